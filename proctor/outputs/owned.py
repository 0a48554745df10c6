"""What proctor wrote, so that it replaces only its own files and never a user's.

Every output directory proctor fills carries a manifest (`.proctor-manifest.json`) with
the sha256 and the size of each file it wrote there (sizes since proctor 0.1.0's run
directories: an earlier manifest lists digests alone). A path may be replaced only when it is proctor's
and unchanged since: a run directory whose every file its manifest lists (nothing added,
nothing edited), or a single file listed in its directory's manifest. Anything else
that already stands at an output path is refused with a message saying why.
`write_owned_file` (one file) and `staged_directory` (a whole directory) write under
that rule and record what they wrote.

A single file that can carry it (a report's HTML comment, a comparison's JSON key) vouches
for itself instead: its text holds `OWNED_MARK` ("proctor-owned sha256:" and 64 zeros),
which `write_owned_file` fills with the sha256 of the text as it was with the zeros. Such a
file is proctor's and unchanged while its last mark checks out, so writing it adds no
manifest beside it (an existing manifest there is kept up to date).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from proctor.digests import file_sha256
from proctor.errors import UserError, option_named
from proctor.outputs.atomic import atomic_write_bytes, atomic_write_text, make_stage, unmark

MANIFEST = ".proctor-manifest.json"
FORMAT = "proctor-manifest/1"
#: put into a single file's text by its writer: `write_owned_file` fills in the digest
OWNED_MARK = "proctor-owned sha256:" + "0" * 64
_MARK = re.compile(rb"proctor-owned sha256:([0-9a-f]{64})")
_ZEROS = b"0" * 64


def _fill_mark(data: bytes) -> Optional[bytes]:
    """Return `data` with its last `OWNED_MARK` holding the sha256 of `data`; None without a mark."""
    at = data.rfind(OWNED_MARK.encode("ascii"))
    if at < 0:
        return None
    start = at + len(OWNED_MARK) - 64
    return data[:start] + hashlib.sha256(data).hexdigest().encode("ascii") + data[start + 64:]


def carries_own_mark(path: Path) -> bool:
    """Whether `path` is a file proctor wrote with a mark (`OWNED_MARK`) and nobody changed since."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    found = next(iter(list(_MARK.finditer(data))[-1:]), None)   # the last mark: the writer's
    if found is None:
        return False
    blank = data[:found.start(1)] + _ZEROS + data[found.end(1):]
    return hashlib.sha256(blank).hexdigest() == found.group(1).decode("ascii")


def parse_manifest(text: str) -> Optional[tuple[dict[str, str], dict[str, int]]]:
    """Parse a manifest's text: (relative path -> sha256, relative path -> size); None unless it is one."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return None
    files, sizes = data["files"], data.get("sizes", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()) or not isinstance(sizes, dict) \
            or not all(type(v) is int and v >= 0 for v in sizes.values()):
        return None
    return files, {k: v for k, v in sizes.items() if k in files}


def read_manifest_sizes(directory: Path) -> Optional[tuple[dict[str, str], dict[str, int]]]:
    """Read `directory`'s manifest: each file's sha256 and size as proctor wrote it; None without a valid one."""
    try:
        return parse_manifest((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def read_manifest(directory: Path) -> Optional[dict[str, str]]:
    """Read `directory`'s manifest: relative path -> sha256 of what proctor wrote; None without a valid one."""
    found = read_manifest_sizes(directory)
    return None if found is None else found[0]


def manifest_text(files: dict[str, str], sizes: Optional[dict[str, int]] = None) -> str:
    """Render a manifest listing `files` (relative path -> sha256) and their `sizes`, sorted by path."""
    listed = {"format": FORMAT, "files": dict(sorted(files.items()))}
    if sizes:
        listed["sizes"] = dict(sorted(sizes.items()))
    return json.dumps(listed, indent=1) + "\n"


def tree_digests(directory: Path) -> dict[str, str]:
    """Return the sha256 of every regular file under `directory` (the manifest itself left out)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if path.is_file() and not path.is_symlink() and rel != MANIFEST:
            found[rel] = file_sha256(path)
    return found


def foreign_entry(directory: Path) -> Optional[str]:
    """Return the first entry under `directory` that proctor's manifest does not vouch for.

    That is a file it did not write, one changed since, a link, or an extra directory; None
    when the whole directory is proctor's. An empty directory holds nothing foreign.
    """
    entries = sorted(directory.rglob("*"))
    if not entries:
        return None
    files = read_manifest(directory)
    if files is None:
        return entries[0].relative_to(directory).as_posix()
    parents = {p for rel in files for p in Path(rel).parents}
    for path in entries:
        rel = path.relative_to(directory).as_posix()
        if rel == MANIFEST:
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            return rel
        if path.is_dir():
            if Path(rel) not in parents:
                return rel
        elif files.get(rel) != file_sha256(path):
            return rel
    return None


def check_writable_parent(path: Path, what: str) -> None:
    """Check that the nearest existing ancestor of `path` is a directory this process can create entries in.

    Tried for real (a temporary directory made and removed): permission bits say
    nothing for root, and a read-only file system or a full disk only shows on trying.
    """
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor.is_symlink():  # a dangling link: mkdir would fail on it
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{what} {path} cannot be created: {ancestor} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".proctor-probe-"))
    except OSError as e:
        raise UserError(f"{what} {path} cannot be created: cannot write in {ancestor} "
                        f"({e.strerror or e}); choose another path") from None


def check_output_dir(final: Path, *, overwrite: bool, option: str = "--output") -> None:
    """Refuse, before any work, an output directory that would destroy something.

    New or empty: fine. An earlier proctor output, untouched: replaced only with
    `--overwrite`. A file, or a directory holding anything proctor did not write: refused.
    `option` names the output in messages (from the `proctor` command, as its flag).
    """
    option = option_named(option)
    final = Path(os.path.abspath(final))
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise UserError(f"{option} {final} exists and is not a directory; choose a new path")
    if final.is_dir():
        if final == Path.cwd() or final in Path.cwd().parents:
            raise UserError(f"{option} {final} is the current directory or holds it; choose a new path")
        foreign = foreign_entry(final)
        if foreign is not None:
            raise UserError(
                f"{option} {final} already holds files proctor did not write (or that were changed "
                f"since), e.g. {foreign}; proctor never replaces them: choose a new path")
        if any(final.iterdir()) and not overwrite:
            flag = "--overwrite" if option.startswith("--") else "overwrite=True"
            raise UserError(f"{option} {final} holds an earlier proctor output; pass {flag} to "
                            f"replace it, or choose a new path")
    check_writable_parent(final, option)


def check_output_file(path: Path, *, option: str = "--output") -> None:
    """Refuse a single output file that is not proctor's own, unchanged since it was written."""
    path = Path(os.path.abspath(path))
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UserError(f"{option} {path} exists and is not a regular file; choose a new path")
    if path.exists():
        files = read_manifest(path.parent) or {}
        if files.get(path.name) != file_sha256(path) and not carries_own_mark(path):
            raise UserError(f"{option} {path} already exists and proctor did not write it (or it was "
                            f"changed since); proctor never replaces it: choose a new path")
    check_writable_parent(path, option)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise manifest updates of one directory among processes."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_owned_file(path: Path, data: bytes, *, option: str = "output") -> None:
    """Write `path` atomically and record it in its directory's manifest.

    A file there that proctor did not write, or that changed since, is refused, not replaced.
    `data` holding `OWNED_MARK` is written with the mark filled in and needs no manifest: none
    is created beside it (one already there is updated).
    """
    path = Path(os.path.abspath(path))
    check_output_file(path, option=option)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        check_output_file(path, option=option)  # again, now that no other proctor can race us
        found = read_manifest_sizes(path.parent)
        if found is None and (path.parent / MANIFEST).exists():
            raise UserError(f"{path.parent / MANIFEST} is not a proctor manifest; proctor never "
                            "replaces it: move it away or choose another output directory")
        files, sizes = (dict(found[0]), dict(found[1])) if found is not None else ({}, {})
        marked = _fill_mark(data)
        if marked is not None:
            data = marked
            atomic_write_bytes(path, data)
            if found is None:   # the file vouches for itself: no manifest added beside it
                return
        else:
            atomic_write_bytes(path, data)
        files[path.name], sizes[path.name] = hashlib.sha256(data).hexdigest(), len(data)
        atomic_write_text(path.parent / MANIFEST, manifest_text(files, sizes))


def _write_failure(final: Path, e: OSError) -> UserError:
    why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else (e.strerror or str(e))
    return UserError(f"cannot write {final}: {why}; nothing was written there (finished results are "
                     f"cached: free space or choose another path, then rerun)")


@contextmanager
def staged_directory(final: Path, *, overwrite: bool = False, option: str = "--output") -> Iterator[Path]:
    """Yield a hidden sibling directory to fill; on success it replaces `final` whole.

    `final` must be new, empty, or (with `overwrite`) an earlier proctor output nobody
    changed (see `check_output_dir`); it is checked again just before the swap.
    On any error the staging directory is removed and `final` is left as it was, so no
    half-written run directory ever stands at the requested path.
    """
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
        digests = tree_digests(stage)
        sizes = {rel: (stage / rel).stat().st_size for rel in digests}
        atomic_write_text(stage / MANIFEST, manifest_text(digests, sizes))
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
