"""Runs for other tools: the Bergson export (`bergson.py`) and the attribution join (`attribution.py`)."""

#: what an exported row scores (`proctor export bergson --target`)
TARGETS = ("gold", "predicted", "samples")
