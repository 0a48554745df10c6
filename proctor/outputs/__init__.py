"""Records and run outputs: atomic writes, predictions, requests, metrics, sidecar."""
