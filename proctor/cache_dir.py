"""Where proctor keeps what it can recompute: converted models, results, streamed corpus prefixes."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$PROCTOR_CACHE_DIR`, else `~/.cache/proctor`."""
    return Path(os.environ.get("PROCTOR_CACHE_DIR", Path.home() / ".cache" / "proctor")).expanduser()


def results_path() -> Path:
    """Return the path of the result cache every run reads and stores finished results in."""
    return cache_root() / "results.sqlite"
