"""Atomic file and directory writes: a reader sees the old state or the whole new one.

Staging directories sit beside their destination, named after it, the host and the
process that made them (`proctor.liveness`), so the next run can remove what a killed
one left behind. Publishing a staged directory in place of an earlier output
(`proctor.outputs.owned.staged_directory`) checks first that the output is proctor's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from proctor.liveness import maker_alive, process_tag

_STAGE_MARK = ".proctor-stage"   # inside every staging directory until it is published


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a synced temporary file renamed over it, creating the parent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` as UTF-8, atomically (`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def remove_dead_stages(parent: Path, name: str) -> None:
    """Remove staging directories for `name` in `parent` whose maker (on this host) is dead.

    Only directories still carrying the stage mark (or empty) are removed: a directory
    that merely looks like one is left alone.
    """
    pattern = re.compile(rf"\.{re.escape(name)}\.[a-z]+-{_host()}-(\d+)-(\d+)-")
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry.name)
        if not match or maker_alive(int(match.group(1)), int(match.group(2))) or entry.is_symlink() \
                or not entry.is_dir():
            continue
        if (entry / _STAGE_MARK).is_file() or not any(entry.iterdir()):
            shutil.rmtree(entry, ignore_errors=True)


def make_stage(parent: Path, name: str, kind: str) -> Path:
    """Create a new marked staging directory for `name` in `parent`, after clearing dead ones."""
    remove_dead_stages(parent, name)
    stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{name}.{kind}-{_host()}-{process_tag()}-"))
    (stage / _STAGE_MARK).touch()
    return stage


def unmark(stage: Path) -> None:
    """Make a staging directory ready to be moved into place."""
    (stage / _STAGE_MARK).unlink()
    os.chmod(stage, 0o777 & ~_umask())
