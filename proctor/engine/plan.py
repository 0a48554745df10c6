"""Turn tokenized requests into model rows and a deterministic batch partition.

A `Row` is pure token data: one model input plus where to read continuations from it.
Requests whose continuation is a single token and whose context tokens are equal share
ONE row (the next-token distribution at the context's last position scores them all);
every other request gets its own row.

With a backend that shares prefixes, rows that start with the same long token run
(`find_prefix_groups`, on the clusters `proctor.engine.prefix` chooses) are batched
together: the batch carries the prefix once and its rows hold only their suffixes, with
readout positions still counted from the start of the full sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from proctor.engine.prefix import prefix_clusters
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
    """A row and the keys of the requests its readouts score."""

    row: Row
    keys: tuple[str, ...]      # request key of each readout, aligned with row.readouts


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (full tokens) that all start with `prefix`."""

    prefix: tuple[int, ...]
    rows: tuple[PlannedRow, ...]               # rows that continue `prefix` directly
    nested: tuple["PrefixGroup", ...] = ()     # rows that share a longer prefix (full tokens, no deeper nesting)

    @property
    def all_rows(self) -> tuple[PlannedRow, ...]:
        """The group's direct rows, then its nested groups' rows."""
        return self.rows + tuple(r for n in self.nested for r in n.rows)


def shareable(row: PlannedRow) -> tuple[int, ...]:
    """Return the leading tokens of a row that no readout reads a hidden state from.

    A row may share only these: the hidden state at its first readout position must come
    from the row's own forward pass.
    """
    first = min(r.start for r in row.row.readouts)
    return row.row.tokens[:first]


def find_prefix_groups(rows: Sequence[PlannedRow]) -> tuple[list[PrefixGroup], list[PlannedRow]]:
    """Split rows into prefix groups and rows that share nothing worth sharing.

    Depends only on token content and request keys, never on the order of `rows`.
    """
    ordered = sorted(rows, key=lambda r: (shareable(r), r.row.tokens, r.keys))
    shares = [shareable(r) for r in ordered]
    groups: list[PrefixGroup] = []
    grouped: set[int] = set()
    for lo, hi, m, inner in prefix_clusters(shares):
        nested = tuple(PrefixGroup(shares[a][:n], tuple(ordered[a:b])) for a, b, n, _ in inner)
        in_nested = {i for a, b, _, _ in inner for i in range(a, b)}
        direct = tuple(ordered[i] for i in range(lo, hi) if i not in in_nested)
        groups.append(PrefixGroup(shares[lo][:m], direct, nested))
        grouped.update(range(lo, hi))
    rest = [r for i, r in enumerate(ordered) if i not in grouped]
    return groups, rest


@dataclass(frozen=True)
class Batch:
    """Rows run in one forward pass; with a `prefix`, rows hold the tokens after it.

    A row may continue another row of the batch (`parents[i]`, -1 for none): then it
    holds only the tokens after that row's, which is a segment shared by its children
    (tokens without readouts, computed once in the batch).
    """

    rows: tuple[PlannedRow, ...]
    prefix: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()   # empty: no row continues another

    def parent(self, i: int) -> int:
        """Return the index of the row that row i continues, or -1."""
        return self.parents[i] if self.parents else -1

    def offset(self, i: int) -> int:
        """Tokens of the full sequence before row i's own tokens."""
        p = self.parent(i)
        return len(self.prefix) + (len(self.rows[p].row.tokens) if p >= 0 else 0)

    @property
    def keys(self) -> tuple[str, ...]:
        """The request keys of every row's readouts, in row order."""
        return tuple(k for r in self.rows for k in r.keys)

    @property
    def padded_tokens(self) -> int:
        """Tokens the rows take padded to the longest: rows x longest."""
        return len(self.rows) * max(len(r.row.tokens) for r in self.rows)

    @property
    def real_tokens(self) -> int:
        """Tokens the rows feed the model (the prefix is computed separately, once)."""
        return sum(len(r.row.tokens) for r in self.rows)

    @property
    def full_tokens(self) -> int:
        """Tokens the same requests' rows would feed the model without any sharing."""
        return sum(self.offset(i) + len(r.row.tokens) for i, r in enumerate(self.rows) if r.keys)

    def flattened(self) -> "Batch":
        """Return the same rows with every segment joined back into its children (no parents)."""
        if not self.parents:
            return self
        rows = []
        for i, r in enumerate(self.rows):
            if not r.keys:
                continue
            p = self.parent(i)
            head = self.rows[p].row.tokens if p >= 0 else ()
            rows.append(PlannedRow(Row(head + r.row.tokens, r.row.readouts), r.keys))
        return Batch(tuple(rows), self.prefix)


@dataclass(frozen=True)
class BatchLimits:
    """At most `max_rows` rows with readouts, and at most `max_tokens` tokens per batch.

    Tokens are counted as the backend computes them: rows x longest when it pads rows,
    their sum when it packs them (a shared segment counted once).
    """

    max_rows: Optional[int] = None
    max_tokens: Optional[int] = None

    def fits(self, n_rows: int, tokens: int) -> bool:
        """Whether a batch of `n_rows` rows with readouts and `tokens` tokens is within both limits."""
        if self.max_rows is not None and n_rows > self.max_rows:
            return False
        return self.max_tokens is None or tokens <= self.max_tokens


@dataclass(frozen=True)
class Unit:
    """Rows that must share a batch: a segment (or none) and the rows continuing it."""

    rows: tuple[PlannedRow, ...]
    segment: Optional[PlannedRow] = None

    @property
    def tokens(self) -> int:
        """Tokens the unit feeds the model: its rows' and its segment's."""
        own = sum(len(r.row.tokens) for r in self.rows)
        return own + (len(self.segment.row.tokens) if self.segment else 0)

    def sort_key(self) -> tuple:
        """Return the unit's sort key: largest first, ties broken by token content, then request keys."""
        first = self.rows[0]
        head = self.segment.row.tokens if self.segment else ()
        return (-self.tokens, head + first.row.tokens, tuple(k for r in self.rows for k in r.keys))


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
    """Cut longest-first rows into consecutive padded batches filled up to the limits."""
    batches: list[Batch] = []
    current: list[PlannedRow] = []
    for row in rows:
        # rows are sorted longest first, so the batch's first row sets the padded length
        longest = len(current[0].row.tokens) if current else len(row.row.tokens)
        if current and not limits.fits(len(current) + 1, (len(current) + 1) * longest):
            batches.append(Batch(tuple(current), prefix))
            current = []
        current.append(row)
    if current:
        batches.append(Batch(tuple(current), prefix))
    return batches


def pack(units: Sequence[Unit], limits: BatchLimits, prefix: tuple[int, ...] = ()) -> list[Batch]:
    """Cut units into consecutive packed batches.

    A unit with more rows than `max_rows` is split, each part with its own copy of the segment.
    """
    pieces: list[Unit] = []
    step = limits.max_rows or max(len(u.rows) for u in units)
    for u in units:
        pieces += [Unit(u.rows[i:i + step], u.segment) for i in range(0, len(u.rows), step)]
    batches: list[Batch] = []
    current: list[Unit] = []
    for unit in pieces:
        n_rows = sum(len(u.rows) for u in current) + len(unit.rows)
        if current and not limits.fits(n_rows, sum(u.tokens for u in current) + unit.tokens):
            batches.append(_packed_batch(current, prefix))
            current = []
        current.append(unit)
    if current:
        batches.append(_packed_batch(current, prefix))
    return batches


def _packed_batch(units: Sequence[Unit], prefix: tuple[int, ...]) -> Batch:
    rows: list[PlannedRow] = []
    parents: list[int] = []
    for u in units:
        parent = -1
        if u.segment is not None:
            parent = len(rows)
            rows.append(u.segment)
            parents.append(-1)
        rows += u.rows
        parents += [parent] * len(u.rows)
    return Batch(tuple(rows), prefix, tuple(parents) if any(p >= 0 for p in parents) else ())


def strip_prefix(planned: PlannedRow, n: int) -> PlannedRow:
    """Return the row without its first `n` tokens; readout positions stay absolute."""
    return PlannedRow(Row(planned.row.tokens[n:], planned.row.readouts), planned.keys)


def _fits_one_batch(group: PrefixGroup, limits: BatchLimits) -> bool:
    """Whether a group without nested groups fits in one batch, its prefix counted as a segment."""
    tokens = len(group.prefix) + sum(len(r.row.tokens) - len(group.prefix) for r in group.rows)
    return limits.fits(len(group.rows), tokens)


def plan_batches(rows: Sequence[PlannedRow], limits: BatchLimits, *, share_prefixes: bool) -> list[Batch]:
    """Return the batch partition of longest-first rows, optionally grouping rows by shared prefix.

    Without sharing, rows are padded into batches. With it (the backend packs rows), each
    prefix group's rows are packed into consecutive batches (a backend keeps the last
    prefix's keys and values), nested groups as segments; a group that fits in one batch
    is a segment among the unprefixed rows instead (one forward for many RC items, not a
    prefix pass and a batch per item). Units are ordered by size, largest first, ties
    broken by content.
    """
    if not share_prefixes:
        return partition(rows, limits)
    groups, rest = find_prefix_groups(rows)
    loose = [Unit((r,)) for r in rest]
    shared = []
    for group in groups:
        if group.nested or not _fits_one_batch(group, limits):
            shared.append(group)
        else:  # its prefix would serve one batch only: a segment packed beside other rows costs less
            n = len(group.prefix)
            loose.append(Unit(tuple(strip_prefix(r, n) for r in group.rows), PlannedRow(Row(group.prefix, ()), ())))
    units: list[list[Batch]] = [pack(sorted(loose, key=Unit.sort_key), limits)] if loose else []
    for group in shared:
        n = len(group.prefix)
        members = [Unit((strip_prefix(r, n),)) for r in group.rows]
        for nested in group.nested:
            m = len(nested.prefix)
            segment = PlannedRow(Row(nested.prefix[n:], ()), ())
            members.append(Unit(tuple(strip_prefix(r, m) for r in nested.rows), segment))
        units.append(pack(sorted(members, key=Unit.sort_key), limits, group.prefix))

    def order(batches: list[Batch]) -> tuple:
        first = batches[0]
        return (-(len(first.prefix) + first.real_tokens), first.prefix, first.keys)

    return [b for unit in sorted(units, key=order) for b in unit]
