"""Turn tokenized requests into model rows and a deterministic batch partition.

A `Row` is pure token data: one model input plus where to read continuations from it.
Requests whose continuation is a single token and whose context tokens are equal share
ONE row (the next-token distribution at the context's last position scores them all);
every other request gets its own row.

With a backend that shares prefixes, rows that start with the same long token run
(found by `proctor.engine.prefix`) are batched together: the batch carries the prefix
once and its rows hold only their suffixes, with readout positions still counted from
the start of the full sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from proctor.engine.prefix import find_prefix_groups
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
    """Rows run in one forward pass; with a `prefix`, rows hold the tokens after it."""

    rows: tuple[PlannedRow, ...]
    prefix: tuple[int, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for r in self.rows for k in r.keys)

    @property
    def padded_tokens(self) -> int:
        return len(self.rows) * max(len(r.row.tokens) for r in self.rows)

    @property
    def real_tokens(self) -> int:
        """Tokens the rows feed the model (the prefix is computed separately, once)."""
        return sum(len(r.row.tokens) for r in self.rows)

    @property
    def full_tokens(self) -> int:
        """Tokens the same rows would feed the model without prefix sharing."""
        return self.real_tokens + len(self.rows) * len(self.prefix)


PREFIX_TOKEN_SHARE = 4  # a prefix token costs a suffix row ~1/4 token (attention; smaller CPU batches measured faster)


@dataclass(frozen=True)
class BatchLimits:
    """At most `max_rows` rows, and at most `max_tokens` padded tokens (rows x longest).

    Rows after a shared prefix also attend over it (and, one layer at a time, hold a copy
    of its keys and values), so each prefix token counts as a fraction of a token per row.
    """

    max_rows: Optional[int] = None
    max_tokens: Optional[int] = None

    def fits(self, n_rows: int, longest: int, prefix: int = 0) -> bool:
        if self.max_rows is not None and n_rows > self.max_rows:
            return False
        return self.max_tokens is None or n_rows * (longest + prefix // PREFIX_TOKEN_SHARE) <= self.max_tokens


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


def partition(rows: Sequence[PlannedRow], limits: BatchLimits, prefix: tuple[int, ...] = ()) -> list[Batch]:
    """Cut longest-first rows into consecutive batches filled up to the limits."""
    batches: list[Batch] = []
    current: list[PlannedRow] = []
    for row in rows:
        # rows are sorted longest first, so the batch's first row sets the padded length
        longest = len(current[0].row.tokens) if current else len(row.row.tokens)
        if current and not limits.fits(len(current) + 1, longest, len(prefix)):
            batches.append(Batch(tuple(current), prefix))
            current = []
        current.append(row)
    if current:
        batches.append(Batch(tuple(current), prefix))
    return batches


def strip_prefix(planned: PlannedRow, n: int) -> PlannedRow:
    """The row without its first `n` tokens; readout positions stay absolute."""
    return PlannedRow(Row(planned.row.tokens[n:], planned.row.readouts), planned.keys)


def plan_batches(rows: Sequence[PlannedRow], limits: BatchLimits, *, share_prefixes: bool) -> list[Batch]:
    """The batch partition of longest-first rows, optionally grouping rows by shared prefix.

    Batches of one prefix are consecutive (a backend keeps the last prefix's keys and
    values); units are ordered by full length, longest first, ties broken by content.
    """
    if not share_prefixes:
        return partition(rows, limits)
    groups, rest = find_prefix_groups(rows)
    units: list[list[Batch]] = [[b] for b in partition(rest, limits)]
    for group in groups:
        n = len(group.prefix)
        suffixes = sorted((strip_prefix(r, n) for r in group.rows),
                          key=lambda r: (-len(r.row.tokens), r.row.tokens, r.keys))
        units.append(partition(suffixes, limits, group.prefix))

    def order(unit: list[Batch]) -> tuple:
        first = unit[0]
        return (-(len(first.prefix) + len(first.rows[0].row.tokens)), first.prefix + first.rows[0].row.tokens,
                first.keys)

    return [b for unit in sorted(units, key=order) for b in unit]
