"""Atomic file and directory writes: a reader sees the old state or the whole new one.

Staging directories sit beside their destination, named after it, the host and the
process that made them (`proctor.liveness`), so the next run can remove what a killed
one left behind.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from proctor.errors import UserError
from proctor.liveness import maker_alive, process_tag

_STAGE_MARK = ".proctor-stage"   # inside every staging directory until it is published


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
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
    """A new marked staging directory for `name` in `parent` (after clearing dead ones)."""
    remove_dead_stages(parent, name)
    stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{name}.{kind}-{_host()}-{process_tag()}-"))
    (stage / _STAGE_MARK).touch()
    return stage


def unmark(stage: Path) -> None:
    """Make a staging directory ready to be moved into place."""
    (stage / _STAGE_MARK).unlink()
    os.chmod(stage, 0o777 & ~_umask())


def _write_failure(final: Path, e: OSError) -> UserError:
    why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else (e.strerror or str(e))
    return UserError(f"cannot write {final}: {why}; nothing was written there (finished results are "
                     f"cached: free space or choose another path, then rerun)")


@contextmanager
def staged_directory(final: Path, *, overwrite: bool = False, option: str = "--output") -> Iterator[Path]:
    """Yield a hidden sibling directory to fill; on success it replaces `final` whole.

    `final` must be new, empty, or (with `overwrite`) an earlier proctor output nobody
    changed (see `owned.check_output_dir`); it is checked again just before the swap.
    On any error the staging directory is removed and `final` is left as it was, so no
    half-written run directory ever stands at the requested path.
    """
    from proctor.outputs.owned import MANIFEST, check_output_dir, manifest_text, tree_digests

    final = Path(os.path.abspath(final))
    check_output_dir(final, overwrite=overwrite, option=option)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        stage = make_stage(final.parent, final.name, "partial")
    except OSError as e:
        raise _write_failure(final, e) from None
    try:
        yield stage
        unmark(stage)
        atomic_write_text(stage / MANIFEST, manifest_text(tree_digests(stage)))
        check_output_dir(final, overwrite=overwrite, option=option)  # nothing appeared meanwhile
        if final.is_dir() and any(final.iterdir()):
            old = make_stage(final.parent, final.name, "old")
            os.rename(final, old / final.name)
            os.rename(stage, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(stage, final)  # rename(2) replaces an empty directory whole
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        raise _write_failure(final, e) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
