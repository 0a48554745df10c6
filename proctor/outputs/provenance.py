"""Where a result came from: library versions and the git state of proctor's own code."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Optional

from proctor.version import VERSION

LIBRARIES = ("torch", "transformers", "tokenizers", "datasets", "numpy", "pyarrow", "gguf")


def library_versions() -> dict[str, Optional[str]]:
    """Return the versions of Python, proctor and the libraries in LIBRARIES (None: not installed)."""
    versions: dict[str, Optional[str]] = {"python": platform.python_version(), "proctor": VERSION}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def code_git_state() -> dict[str, Optional[object]]:
    """Return the commit proctor's source was checked out at, and whether it had local changes."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}
