"""Turn tokenized requests into model rows and a deterministic batch partition.

A `Row` is pure token data: one model input plus where to read continuations from it.
Requests whose continuation is a single token and whose context tokens are equal share
ONE row (the next-token distribution at the context's last position scores them all);
every other request gets its own row.

Seam for prefix sharing (next issue): rows of a batch are plain token tuples, so a
prefix-aware backend can find a common leading run (the few-shot block), run it once,
and feed only each row's suffix with `past_key_values`. Nothing here needs to change
for that except, optionally, sorting rows of the same prefix together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from proctor.engine.tokens import Window


@dataclass(frozen=True)
class Readout:
    """One request's continuation inside a row."""

    start: int                 # row position whose next-token distribution scores tokens[0]
    tokens: tuple[int, ...]    # continuation tokens, scored at start, start+1, ...


@dataclass(frozen=True)
class Row:
    """One model input and the readouts taken from it."""

    tokens: tuple[int, ...]
    readouts: tuple[Readout, ...]


@dataclass(frozen=True)
class PlannedRow:
    row: Row
    keys: tuple[str, ...]      # request key of each readout, aligned with row.readouts


@dataclass(frozen=True)
class Batch:
    rows: tuple[PlannedRow, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for r in self.rows for k in r.keys)

    @property
    def padded_tokens(self) -> int:
        return len(self.rows) * max(len(r.row.tokens) for r in self.rows)

    @property
    def real_tokens(self) -> int:
        return sum(len(r.row.tokens) for r in self.rows)


@dataclass(frozen=True)
class BatchLimits:
    """At most `max_rows` rows, and at most `max_tokens` padded tokens (rows x longest)."""

    max_rows: Optional[int] = None
    max_tokens: Optional[int] = None

    def fits(self, n_rows: int, longest: int) -> bool:
        if self.max_rows is not None and n_rows > self.max_rows:
            return False
        return self.max_tokens is None or n_rows * longest <= self.max_tokens


def plan_rows(windows: Sequence[tuple[str, Window]]) -> list[PlannedRow]:
    """Group shared-context single-token requests into one row; sort longest first.

    The order depends only on token content (ties broken by request key), never on the
    order requests arrived in, so the partition is a function of the request set.
    """
    shared: dict[tuple[int, ...], list[tuple[str, Window]]] = {}
    rows: list[PlannedRow] = []
    for key, w in windows:
        # a single-token continuation's input is exactly the (truncated) context tokens
        if len(w.targets) == 1:
            shared.setdefault(w.inputs, []).append((key, w))
        else:
            rows.append(PlannedRow(Row(w.inputs, (Readout(w.start, w.targets),)), (key,)))
    for inputs, members in shared.items():
        members.sort(key=lambda m: m[0])
        readouts = tuple(Readout(w.start, w.targets) for _, w in members)
        rows.append(PlannedRow(Row(inputs, readouts), tuple(k for k, _ in members)))
    rows.sort(key=lambda r: (-len(r.row.tokens), r.row.tokens, r.keys))
    return rows


def partition(rows: Sequence[PlannedRow], limits: BatchLimits) -> list[Batch]:
    """Cut longest-first rows into consecutive batches filled up to the limits."""
    batches: list[Batch] = []
    current: list[PlannedRow] = []
    for row in rows:
        # rows are sorted longest first, so the batch's first row sets the padded length
        longest = len(current[0].row.tokens) if current else len(row.row.tokens)
        if current and not limits.fits(len(current) + 1, longest):
            batches.append(Batch(tuple(current)))
            current = []
        current.append(row)
    if current:
        batches.append(Batch(tuple(current)))
    return batches
