"""Find token prefixes that many rows share, so a backend can compute each one once.

A row may share only the tokens before its first readout position: the hidden state at
that position must come from the row's own forward pass. Sorted by that shareable part,
any set of rows with a common prefix is a contiguous run, and the longest prefix common
to a run is the minimum of its adjacent longest-common-prefixes (LCPs).

Clusters are chosen on the LCP-interval tree: a run keeps one prefix for all its rows
unless cutting it at its weakest links saves more tokens (e.g. all items of an MMLU
subject share the 5-shot block; the choices of one RC item share their question, and
neighbouring items share only "Question:", so there each item becomes its own cluster).

A cluster may hold nested clusters: rows that share more than the cluster's prefix (the
choices of one RC item after a shared few-shot block). A backend computes the outer
prefix once for all its batches and each nested part once in its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from proctor.engine.plan import PlannedRow

MIN_PREFIX = 16     # tokens; a shorter shared prefix does not pay for its extra forward pass
CLUSTER_COST = 16   # tokens a cluster costs: one more forward pass, smaller batches
_MAX_DEPTH = 200    # past this nesting a run is taken whole (bounds recursion; never hit in practice)


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (full tokens) that all start with `prefix`."""

    prefix: tuple[int, ...]
    rows: tuple[PlannedRow, ...]               # rows that continue `prefix` directly
    nested: tuple["PrefixGroup", ...] = ()     # rows that share a longer prefix (full tokens, no deeper nesting)

    @property
    def all_rows(self) -> tuple[PlannedRow, ...]:
        return self.rows + tuple(r for n in self.nested for r in n.rows)


def shareable(row: PlannedRow) -> tuple[int, ...]:
    """The leading tokens of a row that no readout reads a hidden state from."""
    first = min(r.start for r in row.row.readouts)
    return row.row.tokens[:first]


def common_prefix_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


Cluster = tuple[int, int, int, list]  # (lo, hi, prefix length, nested clusters)


def _clusters(lcp: Sequence[int], lo: int, hi: int, depth: int, base: int = 0,
              nest: bool = True) -> tuple[int, list[Cluster]]:
    """Best (tokens saved, clusters) for rows lo..hi-1; lcp[i] joins rows i, i+1.

    Savings count only tokens beyond `base` (a prefix already shared by an outer cluster).
    With `nest`, a whole cluster may also hold nested clusters, found the same way.
    """
    if hi - lo < 2:
        return 0, []
    m = min(lcp[lo:hi - 1])
    whole = 0
    inner: list[Cluster] = []
    if m - base >= MIN_PREFIX:
        whole = (hi - lo - 1) * (m - base) - CLUSTER_COST
        if nest and depth < _MAX_DEPTH:
            inner_saved, inner = _clusters(lcp, lo, hi, depth + 1, base=m, nest=False)
            whole += inner_saved
    if depth >= _MAX_DEPTH:
        return (whole, [(lo, hi, m, inner)]) if whole > 0 else (0, [])
    saved, chosen, start = 0, [], lo
    for i in range(lo, hi):
        if i == hi - 1 or lcp[i] == m:  # cut at the weakest links
            s, c = _clusters(lcp, start, i + 1, depth + 1, base, nest)
            saved += s
            chosen += c
            start = i + 1
    if whole > 0 and whole >= saved:
        return whole, [(lo, hi, m, inner)]
    return saved, chosen


def find_prefix_groups(rows: Sequence[PlannedRow]) -> tuple[list[PrefixGroup], list[PlannedRow]]:
    """Split rows into prefix groups and rows that share nothing worth sharing.

    Depends only on token content and request keys, never on the order of `rows`.
    """
    ordered = sorted(rows, key=lambda r: (shareable(r), r.row.tokens, r.keys))
    shares = [shareable(r) for r in ordered]
    lcp = [common_prefix_length(shares[i], shares[i + 1]) for i in range(len(ordered) - 1)]
    _, chosen = _clusters(lcp, 0, len(ordered), 0)
    groups: list[PrefixGroup] = []
    grouped: set[int] = set()
    for lo, hi, m, inner in chosen:
        nested = tuple(PrefixGroup(shares[a][:n], tuple(ordered[a:b])) for a, b, n, _ in inner)
        in_nested = {i for a, b, _, _ in inner for i in range(a, b)}
        direct = tuple(ordered[i] for i in range(lo, hi) if i not in in_nested)
        groups.append(PrefixGroup(shares[lo][:m], direct, nested))
        grouped.update(range(lo, hi))
    rest = [r for i, r in enumerate(ordered) if i not in grouped]
    return groups, rest
