"""proctor: evaluate language models with reproducible protocols."""

__version__ = "0.1.0"
