"""Stdlib readers for local benchmark files; every error names the file (and line).

Parsed files are cached in-process (an MMLU suite reads 57 of them, several times);
the cache key includes size and mtime so an edited file is read again.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import stat
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from proctor.data.fields import json_type
from proctor.errors import UserError

BOM = "\ufeff"


def _decompressed_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        if path.suffix == ".bz2":
            with bz2.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"data file not found: {path}") from None
    except (OSError, EOFError, zlib.error) as e:  # unreadable, truncated or not really compressed
        raise UserError(f"cannot read {path}: {e}; replace it with a complete copy") from None


def decode_text(data: bytes, path: Path) -> str:
    """UTF-8 bytes as text, a leading byte-order mark dropped; else a UserError naming the line."""
    try:  # not "utf-8-sig": its error offsets do not count the mark, and the line is wanted
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 text (byte offset {e.start}); "
                        "re-save the file as UTF-8") from None


def read_text(path: Path) -> str:
    """Read the whole file as UTF-8 text (.gz / .bz2 decompressed by suffix, a leading BOM dropped)."""
    return decode_text(_decompressed_bytes(path), path)


def split_lines(text: str) -> list[str]:
    r"""Split the text of a line-based file into lines at "\n" only, each line's trailing "\r" dropped.

    A final newline adds no empty line. (`str.splitlines` also splits on U+2028, U+0085,
    form feeds and other characters that JSON strings and text fields may hold.)
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def parse_json(text: str, path: object, line: Optional[int] = None) -> Any:
    """Return `json.loads(text)`, where `text` is the file `path` or its line `line`.

    Invalid or too deeply nested JSON is a UserError naming the file and line.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{line or e.lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise UserError(f"{path}:{line or 1}: invalid JSON (nested too deeply to read)") from None


def _not_a_file(path: Path) -> Optional[str]:
    """Say what is at `path` when it is there but is no regular file to read (None when it is one, or absent).

    A directory, a FIFO (reading one waits for a writer forever), a socket, a device or a
    symbolic link that leads nowhere: each named, with the fix.
    """
    try:
        mode = path.lstat().st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISLNK(mode):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            return (f"data file {path} is a symbolic link to {os.readlink(path)}, which does not exist; point it "
                    "at the data file or put a copy of the file there")
        except (OSError, ValueError):
            return None
    if stat.S_ISREG(mode):
        return None
    kind = next((kind for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                                         (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                                         (stat.S_ISBLK, "a block device")) if test(mode)), "not a regular file")
    return f"data file {path} is {kind}, not a file; replace it with the data file itself"


def _stamp(path: Path) -> tuple[str, int, int]:
    problem = _not_a_file(path)
    if problem is not None:
        raise UserError(problem)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(f"data file not found: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e}") from None
    return str(path), st.st_size, st.st_mtime_ns


def read_csv(path: Path, columns: int) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(line number, fields) of each row of a header-less CSV with exactly `columns` fields."""
    return _read_csv(*_stamp(path), columns)


@lru_cache(maxsize=512)
def _read_csv(path: str, _size: int, _mtime: int, columns: int) -> tuple[tuple[int, tuple[str, ...]], ...]:
    reader = csv.reader(io.StringIO(read_text(Path(path)), newline=""))
    rows = []
    try:
        for row in reader:
            if not row:
                continue
            if len(row) != columns:
                raise UserError(f"{path}:{reader.line_num}: expected {columns} CSV columns, "
                                f"found {len(row)}")
            rows.append((reader.line_num, tuple(row)))
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
    return tuple(rows)


def read_jsonl(path: Path) -> tuple[tuple[int, dict], ...]:
    r"""Return (line number, object) of each non-blank line; lines are separated by "\n" only.

    Callers must not mutate the (cached) dicts.
    """
    return _read_jsonl(*_stamp(path))


@lru_cache(maxsize=64)
def _read_jsonl(path: str, _size: int, _mtime: int) -> tuple[tuple[int, dict], ...]:
    rows = []
    for lineno, line in enumerate(split_lines(read_text(Path(path))), start=1):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object, found {json_type(obj)}")
        rows.append((lineno, obj))
    return tuple(rows)


def read_lines(path: Path) -> tuple[str, ...]:
    """Lines without their line endings (see `split_lines`)."""
    return _read_lines(*_stamp(path))


@lru_cache(maxsize=64)
def _read_lines(path: str, _size: int, _mtime: int) -> tuple[str, ...]:
    return tuple(split_lines(read_text(Path(path))))


def read_json(path: Path) -> Any:
    """Read the file's one JSON value. Callers must not mutate it (it is cached)."""
    return _read_json(*_stamp(path))


@lru_cache(maxsize=64)
def _read_json(path: str, _size: int, _mtime: int) -> Any:
    return parse_json(read_text(Path(path)), path)


def first_existing(candidates: list[Path]) -> Path:
    """Return the first candidate that exists (plain or compressed), else raise a UserError listing them."""
    for p in candidates:
        if p.is_file():
            return p
    for p in candidates:  # there, but not a file: say what it is
        problem = _not_a_file(p)
        if problem is not None:
            raise UserError(problem)
    listed = ", ".join(str(p) for p in candidates)
    raise UserError(f"data file not found; looked for: {listed}")
