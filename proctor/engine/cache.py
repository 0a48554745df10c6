"""Resume cache: finished results in SQLite, keyed by (fingerprint, request key).

Loglikelihood results, generations (all samples of a request, as JSON), hidden states
(an array's bytes) and how many context tokens left truncation cut from a request live in
four tables; a fifth keeps the rate (tokens/s) each kind of work last ran at, for the
rough time a run says before it starts (`proctor.engine.workload`).

The fingerprint identifies the model, dtype, device type, max_length and tokenization
policy; the request key identifies the work. The first stored result for a key wins
(`INSERT OR IGNORE`), so a result once persisted never changes under a later run.

Every row carries a checksum of its fingerprint, key and values: a row changed outside
proctor (or torn by a broken disk) no longer matches, is dropped and recomputed, and
counted in `tampered`. A file that is not a proctor cache, is corrupt, or cannot be
written is a one-line `UserError` saying what to do; results committed before a failure
(a full disk, a kill) stay in the file, and a full disk's message says how many this run
stored there (what a rerun finds).
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Optional

import numpy as np

from proctor.errors import UserError
from proctor.requests import GenerateResult, Generation, HiddenStatesResult, LoglikelihoodResult

APPLICATION_ID = 0x70726F63  # "proc": marks the file as a proctor cache
_COLUMNS = {
    "loglikelihood": ("fingerprint", "key", "sum_logits", "num_tokens", "is_greedy", "checksum"),
    "generation": ("fingerprint", "key", "samples", "checksum"),
    "truncation": ("fingerprint", "key", "dropped", "checksum"),
    "hidden": ("fingerprint", "key", "dtype", "shape", "data", "checksum"),
    "rate": ("fingerprint", "key", "tokens_per_second", "checksum"),
}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS loglikelihood (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    sum_logits REAL NOT NULL,
    num_tokens INTEGER NOT NULL,
    is_greedy INTEGER NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS generation (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    samples TEXT NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hidden (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    data BLOB NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rate (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    tokens_per_second REAL NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS truncation (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    dropped INTEGER NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
"""
_CHUNK = 500  # stays under SQLite's host-parameter limit
_TIMEOUT = 60.0  # seconds a connection waits for another process's lock
#: free bytes below which a write that failed is taken for a full disk (SQLite grows its files a page at a time)
_FULL = 1 << 20


def _checksum(*values: object) -> int:
    # an array's bytes enter by their own digest: repr() of a large blob is slow
    values = tuple(hashlib.blake2b(v).hexdigest() if isinstance(v, bytes) else v for v in values)
    digest = hashlib.blake2b(repr(values).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _enable_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL mode, retrying while the file is locked.

    Processes opening a new file at once (data-parallel ranks) can get "database is locked"
    here at once: SQLite does not call the busy handler for a journal mode change, so retry
    until the timeout.
    """
    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class ResultCache:
    """An SQLite file (WAL mode) shared by runs; safe to reopen after a kill."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.tampered = 0  # rows whose checksum failed: dropped and recomputed
        self.stored = 0    # results (not truncation counts) this process committed: a rerun finds them
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot use {self.path.parent} for the result cache ({e.strerror or e}); "
                            "set PROCTOR_CACHE_DIR to a writable directory") from None
        if self.path.exists() and not self.path.is_file():
            raise UserError(f"the result cache {self.path} is not a file; move it away or set "
                            "PROCTOR_CACHE_DIR to another directory")
        with self._guard("open"):
            self._db = sqlite3.connect(str(self.path), timeout=_TIMEOUT)
            _enable_wal(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._prepare_schema()

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """SQLite's failures as one line saying what to do about them."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            raise self._failure(doing, e) from None
        except OSError as e:  # the WAL or shm file
            raise self._failure(doing, e) from None

    def _free_bytes(self) -> Optional[int]:
        """Free bytes on the file system that holds the cache (None: cannot tell)."""
        try:
            return shutil.disk_usage(self.path.parent).free
        except OSError:
            return None

    def _failure(self, doing: str, e: Exception) -> UserError:
        text = str(e)
        where = self.path
        code = getattr(e, "sqlite_errorname", "")
        free = self._free_bytes()
        full = "full" in text or getattr(e, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) or (
            (code.startswith("SQLITE_IOERR") or "disk I/O error" in text) and free is not None and free < _FULL)
        if full or (code.startswith("SQLITE_IOERR") and doing == "store results"):  # a file size limit: IOERR
            disk = f"the disk is full ({free} bytes free in {where.parent})" if full and free is not None else \
                "the disk is full" if full else f"{text}: the disk is full or failing, or a file size limit was reached"
            if doing == "open":
                return UserError(f"cannot open the result cache {where}: {disk}; free space there, or set "
                                 "PROCTOR_CACHE_DIR to a disk with room, and rerun the same command")
            kept = (f"the {self.stored} results this run stored are kept there (a rerun reuses them)" if self.stored
                    else "no result of this run was stored yet")
            return UserError(f"cannot {doing} in the result cache {where}: {disk}; {kept}: free space, or set "
                             "PROCTOR_CACHE_DIR to a disk with room, and rerun the same command")
        if "readonly" in text or "read-only" in text or "unable to open" in text or isinstance(e, PermissionError):
            return UserError(f"cannot write the result cache {where} ({text}); make it writable or set "
                             "PROCTOR_CACHE_DIR to a writable directory")
        if "locked" in text or "busy" in text:
            return UserError(f"the result cache {where} stayed locked by another process for {_TIMEOUT:.0f} s "
                             "while trying to " + doing + "; rerun when the other run is done")
        return UserError(f"the result cache {where} is unusable ({text}); move it aside (mv {where} "
                         f"{where}.bad) to start a new one, or set PROCTOR_CACHE_DIR to another directory")

    def _prepare_schema(self) -> None:
        db = self._db
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        (app,) = db.execute("PRAGMA application_id").fetchone()
        if tables and app != APPLICATION_ID and not tables <= set(_COLUMNS):
            raise UserError(f"{self.path} is an SQLite file of another program, not a proctor result cache; "
                            "set PROCTOR_CACHE_DIR to another directory")
        with db:
            for table in tables & set(_COLUMNS):
                columns = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
                if columns == _COLUMNS[table][:-1]:
                    self._add_checksums(table)  # a cache of an earlier proctor
                elif columns != _COLUMNS[table]:
                    raise UserError(f"the result cache {self.path} has an unknown layout (table {table}: "
                                    f"{', '.join(columns)}); move it aside (mv {self.path} {self.path}.bad) "
                                    "to start a new one, or set PROCTOR_CACHE_DIR to another directory")
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")

    def _add_checksums(self, table: str) -> None:
        self._db.execute(f"ALTER TABLE {table} ADD COLUMN checksum INTEGER")
        rows = list(self._db.execute(f"SELECT * FROM {table}"))
        self._db.executemany(f"UPDATE {table} SET checksum = ? WHERE fingerprint = ? AND key = ?",
                             [(_checksum(*row[:-1]), row[0], row[1]) for row in rows])

    def get_many(self, fingerprint: str, keys: Iterable[str]) -> dict[str, LoglikelihoodResult]:
        """Return the loglikelihood results stored under `fingerprint` for those of `keys` that have one."""
        rows = self._select("key, sum_logits, num_tokens, is_greedy, checksum", "loglikelihood", fingerprint, keys)
        return {key: LoglikelihoodResult(s, n, bool(g)) for key, s, n, g in rows}

    def put_many(self, fingerprint: str, results: Mapping[str, LoglikelihoodResult]) -> None:
        """Store and commit in one transaction: after this returns the results survive a kill."""
        # + 0.0: SQLite reads -0.0 back as 0.0, and the checksum must match what it reads
        rows = [(fingerprint, k, float(r.sum_logits) + 0.0, int(r.num_tokens), int(r.is_greedy))
                for k, r in results.items()]
        with self._guard("store results"), self._db:
            self._db.executemany("INSERT OR IGNORE INTO loglikelihood VALUES (?, ?, ?, ?, ?, ?)",
                                 [(*row, _checksum(*row)) for row in rows])
        self.stored += len(rows)

    def get_generations(self, fingerprint: str, keys: Iterable[str]) -> dict[str, GenerateResult]:
        """Return the generations (every sample) stored under `fingerprint` for those of `keys` that have them."""
        found = {}
        for key, samples in self._select("key, samples, checksum", "generation", fingerprint, keys):
            try:
                found[key] = GenerateResult(tuple(Generation(*x) for x in json.loads(samples)))
            except (ValueError, TypeError):  # a checksum collision on garbage: as good as tampered
                self._drop("generation", fingerprint, [key])
        return found

    def _select(self, columns: str, table: str, fingerprint: str, keys: Iterable[str]) -> Iterator[tuple]:
        """Yield the rows of `table` stored under `fingerprint` for `keys`, without their checksum.

        Keys are looked up `_CHUNK` at a time; a row whose checksum fails is dropped from the
        file and not returned.
        """
        keys = list(keys)
        bad: list[str] = []
        with self._guard("read results"):
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i:i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(
                        f"SELECT {columns} FROM {table} WHERE fingerprint = ? AND key IN ({marks})",
                        [fingerprint, *chunk]).fetchall():
                    *values, check = row
                    if check != _checksum(fingerprint, *values):
                        bad.append(values[0])
                    else:
                        yield tuple(values)
        if bad:
            self._drop(table, fingerprint, bad)

    def _drop(self, table: str, fingerprint: str, keys: list[str]) -> None:
        self.tampered += len(keys)
        with self._guard("drop damaged results"), self._db:
            self._db.executemany(f"DELETE FROM {table} WHERE fingerprint = ? AND key = ?",
                                 [(fingerprint, k) for k in keys])

    def put_generations(self, fingerprint: str, results: Mapping[str, GenerateResult]) -> None:
        """Store and commit whole requests (every sample) in one transaction."""
        rows = [(fingerprint, k, _samples_json(r)) for k, r in results.items()]
        with self._guard("store results"), self._db:
            self._db.executemany("INSERT OR IGNORE INTO generation VALUES (?, ?, ?, ?)",
                                 [(*row, _checksum(*row)) for row in rows])
        self.stored += len(rows)

    def get_hidden(self, fingerprint: str, keys: Iterable[str]) -> dict[str, HiddenStatesResult]:
        """Return the hidden states stored under `fingerprint` for those of `keys` that have them."""
        found = {}
        for key, dtype, shape, data in self._select("key, dtype, shape, data, checksum", "hidden", fingerprint, keys):
            try:
                dims = tuple(int(n) for n in shape.split(","))
                found[key] = HiddenStatesResult(np.frombuffer(data, dtype=np.dtype(dtype)).reshape(dims))
            except (ValueError, TypeError):  # a checksum collision on garbage: as good as tampered
                self._drop("hidden", fingerprint, [key])
        return found

    def put_hidden(self, fingerprint: str, results: Mapping[str, HiddenStatesResult]) -> None:
        """Store and commit in one transaction."""
        rows = [(fingerprint, k, str(r.states.dtype), ",".join(map(str, r.states.shape)),
                 np.ascontiguousarray(r.states).tobytes()) for k, r in results.items()]
        with self._guard("store results"), self._db:
            self._db.executemany("INSERT OR IGNORE INTO hidden VALUES (?, ?, ?, ?, ?, ?)",
                                 [(*row, _checksum(*row)) for row in rows])
        self.stored += len(rows)

    def put_truncated(self, fingerprint: str, dropped: Mapping[str, int]) -> None:
        """Store how many context tokens left truncation cut from each request.

        They are noted when the requests are planned, so a later run that finds them all
        cached can report them without tokenizing again.
        """
        rows = [(fingerprint, k, int(n)) for k, n in dropped.items()]
        with self._guard("store results"), self._db:
            self._db.executemany("INSERT OR IGNORE INTO truncation VALUES (?, ?, ?, ?)",
                                 [(*row, _checksum(*row)) for row in rows])

    def get_truncated(self, fingerprint: str, keys: Iterable[str]) -> dict[str, int]:
        """Return the context tokens left truncation cut, for those of `keys` that have a count stored."""
        return dict(self._select("key, dropped, checksum", "truncation", fingerprint, keys))

    def put_rate(self, fingerprint: str, kind: str, tokens_per_second: float) -> None:
        """Keep the rate `kind` just ran at (it replaces the last one: rates are no results)."""
        row = (fingerprint, kind, float(tokens_per_second))
        with self._guard("store results"), self._db:
            self._db.execute("INSERT OR REPLACE INTO rate VALUES (?, ?, ?, ?)", (*row, _checksum(*row)))

    def get_rate(self, fingerprint: str, kind: str) -> Optional[float]:
        """Return the rate `kind` last ran at under `fingerprint` (None when none was kept)."""
        for _, rate in self._select("key, tokens_per_second, checksum", "rate", fingerprint, [kind]):
            return float(rate)
        return None

    def count(self, fingerprint: str) -> int:
        """Return how many loglikelihood results are stored under `fingerprint`."""
        with self._guard("count results"):
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM loglikelihood WHERE fingerprint = ?", (fingerprint,)
            ).fetchone()
        return n

    def tampered_warning(self) -> list[str]:
        """Return the run's warning when rows failed their checksum (empty when none did)."""
        if not self.tampered:
            return []
        return [f"{self.tampered} cached results in {self.path} failed their checksum (changed outside "
                "proctor or damaged) and were recomputed"]

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> "ResultCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _samples_json(result: GenerateResult) -> str:
    return json.dumps([[s.text, s.num_tokens, s.finish_reason] for s in result.samples], ensure_ascii=False)
