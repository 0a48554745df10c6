"""proctor: evaluate language models with reproducible protocols."""

from proctor.version import VERSION as __version__

__all__ = ["__version__"]
