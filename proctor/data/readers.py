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
from functools import lru_cache
from pathlib import Path
from typing import Any

from proctor.errors import UserError


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
    except (OSError, EOFError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def read_text(path: Path) -> str:
    """The whole file as UTF-8 text (.gz / .bz2 decompressed by suffix)."""
    data = _decompressed_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 text (byte offset {e.start}); "
                        "re-save the file as UTF-8") from None


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(f"data file not found: {path}") from None
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


def read_jsonl(path: Path) -> tuple[dict, ...]:
    """One JSON object per non-blank line. Callers must not mutate the (cached) dicts."""
    return _read_jsonl(*_stamp(path))


@lru_cache(maxsize=64)
def _read_jsonl(path: str, _size: int, _mtime: int) -> tuple[dict, ...]:
    rows = []
    for lineno, line in enumerate(read_text(Path(path)).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object, found {type(obj).__name__}")
        rows.append(obj)
    return tuple(rows)


def read_lines(path: Path) -> tuple[str, ...]:
    """Lines without their line endings (a final newline adds no empty line)."""
    return _read_lines(*_stamp(path))


@lru_cache(maxsize=64)
def _read_lines(path: str, _size: int, _mtime: int) -> tuple[str, ...]:
    return tuple(read_text(Path(path)).splitlines())


def read_json(path: Path) -> Any:
    return _read_json(*_stamp(path))


@lru_cache(maxsize=64)
def _read_json(path: str, _size: int, _mtime: int) -> Any:
    try:
        return json.loads(read_text(Path(path)))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def first_existing(candidates: list[Path]) -> Path:
    """The first candidate that exists (plain or compressed), else a UserError listing them."""
    for p in candidates:
        if p.is_file():
            return p
    listed = ", ".join(str(p) for p in candidates)
    raise UserError(f"data file not found; looked for: {listed}")
