"""Defaults the CLI and the library share (kept import-free: the CLI starts fast)."""

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_MAX_LENGTH = 2048
DEFAULT_SEED = 1234  # the run seed every sample's own seed derives from
