"""Resume cache: finished results in SQLite, keyed by (fingerprint, request key).

Loglikelihood results and generations (all samples of a request, as JSON) live in two
tables.

The fingerprint identifies the model, dtype, device type, max_length and tokenization
policy; the request key identifies the work. The first stored result for a key wins
(`INSERT OR IGNORE`), so a result once persisted never changes under a later run.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from proctor.requests import GenerateResult, Generation, LoglikelihoodResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS loglikelihood (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    sum_logits REAL NOT NULL,
    num_tokens INTEGER NOT NULL,
    is_greedy INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS generation (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    samples TEXT NOT NULL,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID;
"""
_CHUNK = 500  # stays under SQLite's host-parameter limit
_TIMEOUT = 60.0  # seconds a connection waits for another process's lock


def _enable_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL mode. Processes opening a new file at once (data-parallel ranks) can get
    "database is locked" here at once: SQLite does not call the busy handler for a journal
    mode change, so retry until the timeout."""
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=_TIMEOUT)
        _enable_wal(self._db)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.commit()

    def get_many(self, fingerprint: str, keys: Iterable[str]) -> dict[str, LoglikelihoodResult]:
        rows = self._select("key, sum_logits, num_tokens, is_greedy", "loglikelihood", fingerprint, keys)
        return {key: LoglikelihoodResult(s, n, bool(g)) for key, s, n, g in rows}

    def put_many(self, fingerprint: str, results: Mapping[str, LoglikelihoodResult]) -> None:
        """Store and commit in one transaction: after this returns the results survive a kill."""
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO loglikelihood VALUES (?, ?, ?, ?, ?)",
                [(fingerprint, k, r.sum_logits, r.num_tokens, int(r.is_greedy)) for k, r in results.items()],
            )

    def get_generations(self, fingerprint: str, keys: Iterable[str]) -> dict[str, GenerateResult]:
        rows = self._select("key, samples", "generation", fingerprint, keys)
        return {key: GenerateResult(tuple(Generation(*x) for x in json.loads(samples))) for key, samples in rows}

    def _select(self, columns: str, table: str, fingerprint: str, keys: Iterable[str]) -> Iterator[tuple]:
        """Rows of `table` stored under `fingerprint` for `keys`, in chunks of `_CHUNK` keys."""
        keys = list(keys)
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i:i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._db.execute(
                f"SELECT {columns} FROM {table} WHERE fingerprint = ? AND key IN ({marks})",
                [fingerprint, *chunk],
            )

    def put_generations(self, fingerprint: str, results: Mapping[str, GenerateResult]) -> None:
        """Store and commit whole requests (every sample) in one transaction."""
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO generation VALUES (?, ?, ?)",
                [(fingerprint, k, _samples_json(r)) for k, r in results.items()],
            )

    def count(self, fingerprint: str) -> int:
        (n,) = self._db.execute(
            "SELECT COUNT(*) FROM loglikelihood WHERE fingerprint = ?", (fingerprint,)
        ).fetchone()
        return n

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ResultCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _samples_json(result: GenerateResult) -> str:
    return json.dumps([[s.text, s.num_tokens, s.finish_reason] for s in result.samples], ensure_ascii=False)
