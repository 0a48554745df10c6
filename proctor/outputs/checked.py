"""Reading back a directory proctor wrote, each file checked against its manifest.

A run directory's manifest (`proctor.outputs.owned`) holds the sha256 and size of every
file proctor wrote there. `CheckedDirectory` reads a file only when it is a regular file
(never a FIFO, a device or a directory, which could hang or flood a reader), no larger than
proctor wrote it (refused before it is read), and its bytes hash to the manifest's digest
(hashed as they are read, 4 MiB at a time). Anything else is one UserError naming the file
and the fix; `allow_edited` (the readers' `--allow-edited`) reads a file that was changed
after proctor wrote it, or a directory without its manifest, as it is.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional, Union

from proctor.digests import stream_sha256
from proctor.errors import UserError, asked_as
from proctor.option import boolean, flag_of, option, spec_of
from proctor.outputs.owned import MANIFEST, parse_manifest

#: the largest manifest read (one lists a few files per task: far below this)
MANIFEST_LIMIT = 64 << 20


@dataclass(frozen=True)
class ReadOptions:
    """The option of every reader of a run directory.

    `proctor report`, `compare`, `export bergson` and `attribution join` take it as a flag;
    `proctor.read_run` and the functions behind those commands as a keyword of the same name.
    """

    allow_edited: bool = option(
        False, "read a run directory's files even where they were changed after proctor wrote them (or "
        "its manifest is gone); without it such a file is refused", boolean, cli={"action": "store_true"})


def add_read_flags(parser: Any) -> None:
    """Add the readers' flags (`ReadOptions`, as declared) to an argparse parser."""
    for f in fields(ReadOptions):
        spec = spec_of(f)
        parser.add_argument(flag_of(f.name, spec), dest=f.name, default=f.default, help=spec.help, **spec.cli)


def allowed_edits(value: Any) -> bool:
    """Check a reader's `allow_edited` argument (UserError unless True or False)."""
    return boolean("allow_edited", value)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


class CheckedDirectory:
    """A directory proctor wrote (`what`: "run directory"), opened to read its files checked.

    Opening it checks that it is a directory that can be read and reads its manifest: a
    missing or garbage manifest is refused unless `allow_edited` (then nothing is checked).
    """

    def __init__(self, directory: Union[str, "os.PathLike[str]"], *, allow_edited: bool = False,
                 what: str = "run directory", needs: str = "metrics.json") -> None:
        self.path = Path(directory)
        self.allow_edited = allowed_edits(allow_edited)
        self.what = what
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            raise UserError(f"{self.path} is not a finished {what} (no {needs})") from None
        except OSError as e:
            loop = " (a symbolic link that leads back to itself)" if e.errno == errno.ELOOP else ""
            raise UserError(f"cannot open the {what} {self.path}: {e.strerror or e}{loop}; give the {what}'s "
                            f"real path") from None
        if not stat.S_ISDIR(mode):
            raise UserError(f"{self.path} is not a {what} ({_kind(mode)}); give the {what} proctor wrote")
        self.files: Optional[dict[str, str]] = None   # None: read unchecked (allow_edited)
        self.sizes: dict[str, int] = {}
        manifest = self.path / MANIFEST
        if not os.path.lexists(manifest):
            if not os.path.lexists(self.path / needs):
                raise UserError(f"{self.path} is not a finished {what} (no {needs})")
            if not self.allow_edited:
                raise UserError(f"{self.path} has no manifest ({MANIFEST}), which every {what} proctor writes "
                                f"holds, so its files cannot be checked; copy the {what} whole, or pass "
                                f"{asked_as('allow_edited')} to read it unchecked")
            return
        data, _ = self._read(MANIFEST, limit=MANIFEST_LIMIT)
        try:
            parsed = parse_manifest(data.decode("utf-8"))
        except UnicodeDecodeError:
            parsed = None
        if parsed is None:
            if not self.allow_edited:
                raise UserError(f"{manifest} is not a proctor manifest (it was changed after proctor wrote it), so "
                                f"the {what}'s files cannot be checked; read an unchanged copy of the {what}, or "
                                f"pass {asked_as('allow_edited')} to read it unchecked")
            return
        self.files, self.sizes = parsed

    def exists(self, name: str) -> bool:
        """Whether `name` (a path relative to the directory) is there, whatever it is."""
        return os.path.lexists(self.path / name)

    def read_bytes(self, name: str, *, missing: Optional[str] = None) -> bytes:
        """Return the bytes of file `name`, checked (UserError; `missing`: the message when it is not there)."""
        return self._read(name, missing=missing)[0]

    def read_text(self, name: str, *, missing: Optional[str] = None) -> str:
        """Return the text of file `name` (UTF-8), checked as `read_bytes` does."""
        data = self.read_bytes(name, missing=missing)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"cannot read {self.path / name}: not UTF-8 text ({e.reason} at byte {e.start})") from None

    def check(self, name: str) -> None:
        """Check file `name` as a read does, without keeping its bytes."""
        self._read(name, keep=False)

    def _edited(self, path: Path, detail: str) -> None:
        """Refuse a file changed after proctor wrote it, unless edits are allowed."""
        if not self.allow_edited:
            raise UserError(f"{path} was changed after proctor wrote it ({detail}); read an unchanged copy of the "
                            f"{self.what}, or pass {asked_as('allow_edited')} to read it as it is")

    def _read(self, name: str, *, keep: bool = True, missing: Optional[str] = None,
              limit: Optional[int] = None) -> tuple[bytes, bool]:
        """Return a regular file's bytes (b"" without `keep`) and whether they were checked against the manifest."""
        path = self.path / name
        try:  # O_NONBLOCK: a FIFO without a writer opens at once, to be refused below
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise UserError(missing or f"{path} is missing; the {self.what} is incomplete") from None
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}; give the {self.what} proctor wrote") from None
        with os.fdopen(fd, "rb") as f:
            try:
                size = os.fstat(fd).st_size
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise UserError(f"{path} is not a regular file ({_kind(mode)}); proctor reads only the files it "
                                    f"wrote: put the {self.what}'s own file back")
                if limit is not None and size > limit:
                    raise UserError(f"{path} holds {size} bytes, more than {limit} this file ever needs; it is not "
                                    f"the file proctor wrote: put the {self.what}'s own file back")
                return self._checked(f, path, name, size, keep)
            except OSError as e:
                raise UserError(f"cannot read {path}: {e.strerror or e}") from None

    def _checked(self, f: Any, path: Path, name: str, size: int, keep: bool) -> tuple[bytes, bool]:
        files = self.files
        expected = None if files is None else files.get(name)
        if files is None or name == MANIFEST:   # unchecked: allowed, or the manifest itself
            return (f.read() if keep else b""), False
        if expected is None:
            self._edited(path, f"{MANIFEST} does not list it: proctor did not write it there")
            return (f.read() if keep else b""), False
        wrote = self.sizes.get(name)
        if wrote is not None and size != wrote:
            self._edited(path, f"it holds {size} bytes, {'larger than' if size > wrote else 'not'} the {wrote} "
                               f"bytes proctor wrote")
            return (f.read() if keep else b""), False
        # with its size known the file is hashed as it is read; else hashed first, read after it matched
        digest, count, data = stream_sha256(f, limit=None if wrote is None else wrote + 1,
                                            keep=keep and wrote is not None)
        if digest != expected:
            self._edited(path, f"its sha256 is not the one {MANIFEST} holds")
        elif not keep or wrote is not None:
            return data, True
        f.seek(0)
        return (f.read() if keep else b""), digest == expected
