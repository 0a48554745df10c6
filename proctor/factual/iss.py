"""ISS — Internal State Similarity of a fact's anchor and perturbed queries (spec: factual.md, ISS).

Per layer l and condition c, each condition's states are centred by that condition's mean over
all its facts and L2-normalised (ĥ). For a fact f of relation r:

    s_l(f,c)    = <ĥ_l(f,anchor), ĥ_l(f,c)>
    null_l(f,c) = mean over the other facts g of r (having c) of <ĥ_l(f,anchor), ĥ_l(g,c)>
    ISS(f,c)    = mean over the stored layers of s_l(f,c) - null_l(f,c)
    rank_l(f,c) = fraction of those g with <ĥ_l(f,anchor), ĥ_l(g,c)> strictly below s_l(f,c)
    ISS-rank    = mean over the stored layers of rank_l (0.5 = chance)

ISS and ISS-rank are NaN for facts whose relation has fewer than `min_facts` (5) facts with both
an anchor and a condition-c row; a condition left with no such fact says why in `reason`. Every
condition is reported on its own: `reverse` is never pooled with `paraphrase`, and crosslingual
is one condition per language (`condition_of`).

Inputs are in-memory so this is testable without files: `rows` are the bank's
use_for_main_forward rows in hidden-state order, `states` maps layer -> [n_rows, d] (float16
memmaps are fine: one layer at a time is cast to float32).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from proctor.errors import UserError
from proctor.factual.prompts import condition_of

ANCHOR = "anchor"
OUTCOMES = ("11", "10", "01", "00")
#: labels that make a fact's outcome pair unknowable; such pairs are left out of `by_outcome`
EXCLUDED_LABELS = frozenset({"ambiguous", "unparseable"})


class Outcome(NamedTuple):
    """ISS of the facts with one outcome pair: how many, and their mean (NaN when none)."""

    n: int
    mean: float


@dataclass
class FactISS:
    """One fact's ISS and ISS-rank in one condition, and its outcome pair."""

    fact_id: str
    relation: str
    iss: float          # NaN when the relation is too small
    iss_rank: float
    outcome: str | None  # "11"/"10"/"01"/"00", None when unknown or excluded


@dataclass
class ConditionISS:
    """ISS of one condition: its mean with CI, layer profile, ISS-rank, outcome split and facts."""

    condition: str
    iss: float
    ci_low: float
    ci_high: float
    n_facts: int                 # facts with a defined ISS (the bootstrap's population)
    n_pairs: int                 # facts with both an anchor and a condition row
    per_layer: dict[int, float]  # mean over facts of s_l - null_l
    iss_rank: float
    rank_ci_low: float
    rank_ci_high: float
    by_outcome: dict[str, Outcome]
    small_relations: list[str]   # relations left out (fewer than min_facts facts)
    reason: str | None = None    # why iss is NaN
    facts: list[FactISS] = field(default_factory=list)

    def to_dict(self, include_facts: bool = True) -> dict:
        """Return the condition as JSON values (NaN as null), with or without its per-fact rows."""
        out = {k: _json(v) for k, v in asdict(self).items() if k not in ("by_outcome", "facts", "per_layer")}
        out["per_layer"] = {str(layer): _json(v) for layer, v in self.per_layer.items()}
        out["by_outcome"] = {k: {"n": o.n, "mean": _json(o.mean)} for k, o in self.by_outcome.items()}
        if include_facts:
            out["facts"] = [{k: _json(v) for k, v in asdict(f).items()} for f in self.facts]
        return out


@dataclass
class ISSReport:
    """ISS of every non-anchor condition, with the settings it was computed under."""

    layers: list[int]
    min_facts: int
    n_boot: int
    seed: int
    conditions: dict[str, ConditionISS]

    def to_dict(self, include_facts: bool = True) -> dict:
        """Return the report as JSON values (NaN as null), with or without the per-fact rows."""
        return {"layers": self.layers, "min_facts": self.min_facts, "n_boot": self.n_boot, "seed": self.seed,
                "conditions": {c: r.to_dict(include_facts) for c, r in self.conditions.items()}}


def compute_iss(rows: Sequence[Mapping], states: Mapping[int, np.ndarray],
                labels: Mapping[str, str] | None = None, *, min_facts: int = 5,
                n_boot: int = 1000, seed: int = 0) -> ISSReport:
    """ISS and ISS-rank of every non-anchor condition, with bootstrap CIs, layer profile and outcome split.

    `labels` (query_id -> scorer label) gives the outcome split: a side counts as correct iff its
    label is "correct" (abstain and incorrect are 0). Pairs where either row is ambiguous,
    unparseable or unlabelled are left out of `by_outcome` (and have `outcome` None).
    CIs are 95% percentile bootstraps over facts, from `np.random.default_rng(seed)` afresh per
    condition and statistic, so a condition's CI does not depend on which other conditions exist.
    """
    layers = sorted(states)
    if min_facts < 2:
        raise UserError(f"min_facts must be at least 2 (a null needs another fact), got {min_facts}")
    if not layers:
        raise UserError("no hidden-state layers given; ISS needs at least one stored layer")
    where = row_index(rows, states)
    conds = sorted({c for (_, c) in where if c != ANCHOR})
    relation = {f: rows[i]["relation"] for (f, c), i in where.items() if c == ANCHOR}
    by_cond: dict[str, dict[str, list[str]]] = {}   # condition -> relation -> facts having both rows
    for c in conds:
        groups: dict[str, list[str]] = defaultdict(list)
        for f in sorted(relation):
            if (f, c) in where:
                groups[relation[f]].append(f)
        by_cond[c] = dict(groups)
    members: dict[str, list[int]] = defaultdict(list)   # condition -> its row indices (centring)
    for (_f, c), i in where.items():
        members[c].append(i)

    # per condition and relation: [facts, layers] arrays of s - null and of the rank
    big = {c: {rel: fs for rel, fs in by_cond[c].items() if len(fs) >= min_facts} for c in conds}
    rows_of = {c: {rel: ([where[(f, ANCHOR)] for f in fs], [where[(f, c)] for f in fs])
                   for rel, fs in big[c].items()} for c in conds}
    diff = {c: {rel: np.empty((len(fs), len(layers))) for rel, fs in big[c].items()} for c in conds}
    rank = {c: {rel: np.empty((len(fs), len(layers))) for rel, fs in big[c].items()} for c in conds}
    for li, layer in enumerate(layers):
        h = _centred_unit(states[layer], members)
        for c in conds:
            for rel, (ia, ic) in rows_of[c].items():
                s, null, below = pair_stats(h[ia] @ h[ic].T)
                diff[c][rel][:, li] = s - null
                rank[c][rel][:, li] = below

    known: Mapping[str, str] = labels if labels is not None else {}

    def labels_of(f: str, c: str) -> tuple[str | None, str | None]:
        return known.get(rows[where[(f, ANCHOR)]]["query_id"]), known.get(rows[where[(f, c)]]["query_id"])

    have = labels_of if labels is not None else None
    result = {c: _condition(c, by_cond[c], diff[c], rank[c], layers, have, n_boot, seed, min_facts)
              for c in conds}
    return ISSReport(layers=layers, min_facts=min_facts, n_boot=n_boot, seed=seed, conditions=result)


def pair_stats(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split M[f,g] = <ĥ(f,anchor), ĥ(g,c)> of one relation into s, null and rank.

    s is the diagonal, null the off-diagonal row means, and rank the fraction of a row's
    off-diagonal entries strictly below its diagonal.
    """
    n = m.shape[0]
    s = np.diag(m).copy()
    off = ~np.eye(n, dtype=bool)
    null = (m.sum(axis=1) - s) / (n - 1)
    below = ((m < s[:, None]) & off).sum(axis=1) / (n - 1)
    return s, null, below


def bootstrap_ci(values: np.ndarray, n_boot: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (NaNs dropped); NaNs when there are none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.concatenate([v[rng.integers(0, v.size, size=(min(100, n_boot - start), v.size))].mean(axis=1)
                            for start in range(0, n_boot, 100)])  # chunks keep the index array small
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def row_index(rows: Sequence[Mapping], states: Mapping[int, np.ndarray]) -> dict[tuple[str, str], int]:
    """(fact_id, condition) -> row index; checks the rows against the states."""
    for layer, arr in states.items():
        if arr.ndim != 2 or arr.shape[0] != len(rows):
            raise UserError(f"hidden states of layer {layer} have shape {tuple(arr.shape)} but there are "
                            f"{len(rows)} main-forward rows; pass the states written for this bank")
    where: dict[tuple[str, str], int] = {}
    for i, row in enumerate(rows):
        key = (row["fact_id"], condition_of(row))
        if key in where:
            raise UserError(f"fact {key[0]} has two main-forward rows of condition {key[1]!r} "
                            f"(rows {where[key]} and {i}); the bank must have at most one per condition")
        where[key] = i
    return where


def _centred_unit(layer_states: np.ndarray, members: Mapping[str, list[int]]) -> np.ndarray:
    """float32 copy with each condition's mean removed, then each row L2-normalised (zero rows stay 0)."""
    h = np.asarray(layer_states, dtype=np.float32).copy()
    for idx in members.values():
        h[idx] -= h[idx].mean(axis=0, dtype=np.float64).astype(np.float32)
    norm = np.linalg.norm(h, axis=1, keepdims=True)
    return h / np.where(norm > 0, norm, 1.0)


def _outcome(anchor_label: str | None, cond_label: str | None) -> str | None:
    """"1"/"0" per side (correct or not), None when either label is missing, ambiguous or unparseable."""
    pair = (anchor_label, cond_label)
    if any(lab is None or lab in EXCLUDED_LABELS for lab in pair):
        return None
    return "".join("1" if lab == "correct" else "0" for lab in pair)


def _condition(c: str, groups: Mapping[str, list[str]], diff: Mapping[str, np.ndarray],
               rank: Mapping[str, np.ndarray], layers: list[int],
               labels_of: Callable[[str, str], tuple[str | None, str | None]] | None, n_boot: int,
               seed: int, min_facts: int) -> ConditionISS:
    """Summaries of one condition; `diff`/`rank` hold [facts, layers] arrays of the relations kept."""
    facts = []
    for rel, fs in groups.items():
        iss = diff[rel].mean(axis=1) if rel in diff else np.full(len(fs), np.nan)
        ranks = rank[rel].mean(axis=1) if rel in rank else np.full(len(fs), np.nan)
        for f, v, r in zip(fs, iss, ranks):
            outcome = _outcome(*labels_of(f, c)) if labels_of else None
            facts.append(FactISS(fact_id=f, relation=rel, iss=float(v), iss_rank=float(r), outcome=outcome))
    facts.sort(key=lambda x: x.fact_id)
    iss = np.array([x.iss for x in facts], dtype=np.float64)
    ranks = np.array([x.iss_rank for x in facts], dtype=np.float64)
    kept = np.concatenate([d for d in diff.values()]) if diff else np.empty((0, len(layers)))
    per_layer = {layer: float(kept[:, li].mean()) if len(kept) else math.nan for li, layer in enumerate(layers)}
    by_outcome = {}
    for o in OUTCOMES if labels_of is not None else ():
        v = np.array([x.iss for x in facts if x.outcome == o and not math.isnan(x.iss)])
        by_outcome[o] = Outcome(int(v.size), float(v.mean()) if v.size else math.nan)
    lo, hi = bootstrap_ci(iss, n_boot, seed)
    rlo, rhi = bootstrap_ci(ranks, n_boot, seed)
    n_facts = int(np.sum(~np.isnan(iss)))
    reason = None
    if not facts:
        reason = f"no fact has both an anchor and a {c} row"
    elif not n_facts:
        most = max(len(fs) for fs in groups.values())
        reason = (f"every relation has fewer than {min_facts} facts with both an anchor and a {c} row "
                  f"(most: {most})")
    return ConditionISS(
        condition=c, iss=_nanmean(iss), ci_low=lo, ci_high=hi, n_facts=n_facts,
        n_pairs=len(facts), per_layer=per_layer, iss_rank=_nanmean(ranks), rank_ci_low=rlo,
        rank_ci_high=rhi, by_outcome=by_outcome, small_relations=sorted(r for r in groups if r not in diff),
        reason=reason, facts=facts)


def _nanmean(v: np.ndarray) -> float:
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else math.nan


def _json(v: object) -> object:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return _json(v.item())
    return v
