"""Choose the token prefixes that many sequences share, so a backend computes each one once.

Given sequences sorted by content (each row's shareable part: the tokens before its first
readout, see `proctor.engine.plan.find_prefix_groups`), any set of them with a common
prefix is a contiguous run, and the longest prefix common to a run is the minimum of its
adjacent longest-common-prefixes (LCPs).

Clusters are chosen on the LCP-interval tree: a run keeps one prefix for all its rows
unless cutting it at its weakest links saves more tokens (e.g. all items of an MMLU
subject share the 5-shot block; the choices of one RC item share their question, and
neighbouring items share only "Question:", so there each item becomes its own cluster).

A cluster may hold nested clusters: rows that share more than the cluster's prefix (the
choices of one RC item after a shared few-shot block). A backend computes the outer
prefix once for all its batches and each nested part once in its batch.

This module knows token tuples only; `proctor.engine.plan` turns its clusters into groups
of rows.
"""

from __future__ import annotations

from typing import Sequence

MIN_PREFIX = 16     # tokens; a shorter shared prefix does not pay for its extra forward pass
CLUSTER_COST = 16   # tokens a cluster costs: one more forward pass, smaller batches
_MAX_DEPTH = 200    # past this nesting a run is taken whole (bounds recursion; never hit in practice)


def common_prefix_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading tokens `a` and `b` have in common."""
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


def prefix_clusters(shares: Sequence[tuple[int, ...]]) -> list[Cluster]:
    """Return the clusters worth sharing among content-sorted sequences.

    Each is (lo, hi, prefix length, nested clusters), covering `shares[lo:hi]`, nested ones
    inside their cluster's range.
    """
    lcp = [common_prefix_length(shares[i], shares[i + 1]) for i in range(len(shares) - 1)]
    _, chosen = _clusters(lcp, 0, len(shares), 0)
    return chosen
