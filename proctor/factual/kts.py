"""KTS — Knowledge Transfer Score: whether the anchor's "knows it" direction reads condition c too.

Spec: factual.md, KTS.

For each condition c != anchor, over the facts that have an anchor row and a c row with usable
labels on both (correct = 1, incorrect = 0; ambiguous, unparseable and unlabelled rows out;
abstain out, or 0 with `abstain_as_incorrect`):

- features are hidden states (the mean over stored layers, or per outer fold the layer with the
  best inner-CV anchor AUROC — chosen from anchor training facts only), standardised with the
  mean/std of the fold's ANCHOR training facts, for anchor and c states alike;
- the probe is L2 logistic regression, C by inner cross-validation (grouped by subject) on the
  training facts of the probe's own condition;
- outer: 5-fold cross-fitting grouped by subject (a subject is never on both sides of a fold),
  stratified on the (anchor label, c label) pair;
- A0 = AUROC of the anchor probe on held-out anchor states vs anchor labels; A0->c = AUROC of the
  same probe on held-out c states vs c labels; Ac = a probe trained and tested within c on the
  same folds. AUROCs are pooled: one AUROC over every fact's out-of-fold prediction, not a mean
  of per-fold AUROCs.
- KTS(c) = clip((A0->c - 0.5) / (A0 - 0.5), 0, 1); None with a reason when A0 <= 0.55 or a class
  (of the anchor labels or of the c labels) has fewer than 20 facts. KTS-gap(c) = Ac - A0->c.
- per fact KTS(f,c) = 1 - |p(f,anchor) - p(f,c)|, both from the fold's anchor probe, out of fold.
- KTS_beh(c) = 2 (1 / (|err_anchor - err_c| + 1) - 1/2) over the same facts (Aggarwal et al. 2025).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from proctor.errors import UserError
from proctor.factual.iss import row_index

if TYPE_CHECKING:  # scikit-learn and scipy load on first use, so importing proctor stays fast
    from sklearn.linear_model import LogisticRegression

ANCHOR = "anchor"
LAYER_MODES = ("mean", "best")
DEFAULT_CS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)   # larger C: slow lbfgs, rarely chosen


@dataclass(frozen=True)
class ProbeConfig:
    """Settings of the KTS probes: folds, the C grid, the seed, and when KTS is defined."""

    n_splits: int = 5                       # outer cross-fitting folds
    inner_splits: int = 3                   # inner CV folds that choose C (and the "best" layer)
    Cs: tuple[float, ...] = DEFAULT_CS
    seed: int = 0
    min_class: int = 20                     # fewest facts per class for KTS to be defined
    min_a0: float = 0.55                    # KTS is undefined at or below this anchor AUROC
    max_iter: int = 1000


@dataclass
class FactKTS:
    """One fact's labels, outer fold, out-of-fold anchor-probe probabilities and KTS(f,c) in one condition."""

    fact_id: str
    subject: str
    fold: int
    y_anchor: int
    y_cond: int
    p_anchor: float | None   # None when no probe was fitted (KTS undefined for lack of data)
    p_cond: float | None
    kts: float | None


@dataclass
class ConditionKTS:
    """KTS of one condition: its AUROCs, KTS, KTS-gap and KTS_beh, and the facts behind them."""

    condition: str
    n_facts: int
    n_subjects: int
    counts: dict[str, int]           # anchor_correct, anchor_incorrect, cond_correct, cond_incorrect
    a0: float | None
    a0_to_c: float | None
    ac: float | None
    kts: float | None
    kts_gap: float | None
    reason: str | None               # why kts is None
    kts_beh: float | None
    err_anchor: float | None
    err_cond: float | None
    layers_chosen: list[int] | None  # per outer fold, with layer="best"
    facts: list[FactKTS] = field(default_factory=list)

    def to_dict(self, include_facts: bool = True) -> dict:
        """Return the condition as a plain dict, with or without its per-fact rows."""
        out = asdict(self)
        if not include_facts:
            out.pop("facts")
        return out


@dataclass
class KTSReport:
    """KTS of every non-anchor condition under one label variant and layer mode."""

    variant: str        # "main" or "abstain_as_incorrect"
    layer: str          # "mean" or "best"
    layers: list[int]
    config: ProbeConfig
    conditions: dict[str, ConditionKTS]

    def to_dict(self, include_facts: bool = True) -> dict:
        """Return the report as a plain dict, with or without the per-fact rows."""
        return {"variant": self.variant, "layer": self.layer, "layers": self.layers,
                "config": asdict(self.config),
                "conditions": {c: r.to_dict(include_facts) for c, r in self.conditions.items()}}


def label_value(label: str | None, abstain_as_incorrect: bool = False) -> int | None:
    """Scorer label -> probe target: correct 1, incorrect 0, abstain 0 or excluded, else excluded."""
    if label == "correct":
        return 1
    if label == "incorrect" or (label == "abstain" and abstain_as_incorrect):
        return 0
    return None


def kts_score(a0: float, a0_to_c: float) -> float:
    """clip((A0->c - 0.5) / (A0 - 0.5), 0, 1); the caller checks A0 > min_a0 first."""
    return float(min(1.0, max(0.0, (a0_to_c - 0.5) / (a0 - 0.5))))


def kts_behavioural(err_anchor: float, err_cond: float) -> float:
    """Return the published behavioural KTS (Aggarwal et al. 2025): 1 when error rates match, -> 0 apart."""
    return 2 * (1 / (abs(err_anchor - err_cond) + 1) - 0.5)


def auroc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count half); NaN when a class is absent."""
    y = np.asarray(y).astype(bool)
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return math.nan
    from scipy.stats import rankdata

    ranks = rankdata(score)
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def standardiser(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (constant features get std 1) of the anchor training facts of one fold."""
    mu = x_train.mean(axis=0)
    sd = x_train.std(axis=0)
    return mu, np.where(sd > 0, sd, 1.0).astype(x_train.dtype)


def mean_states(states: Mapping[int, np.ndarray]) -> np.ndarray:
    """Average the stored layers' states in float32, accumulating one layer at a time."""
    total: np.ndarray | None = None
    for layer in sorted(states):
        x = np.asarray(states[layer], dtype=np.float32)
        total = x.copy() if total is None else total + x
    if total is None:
        raise ValueError("no stored layers to average")
    return total / len(states)


def compute_kts(rows: Sequence[Mapping], states: Mapping[int, np.ndarray], labels: Mapping[str, str], *,
                layer: str = "mean", abstain_as_incorrect: bool = False,
                config: ProbeConfig = ProbeConfig()) -> KTSReport:
    """KTS, KTS-gap, per-fact KTS and KTS_beh of every non-anchor condition (see the module doc).

    Every AUROC is pooled over the folds: one AUROC over all facts' out-of-fold probabilities.
    A0->c and Ac are scored against the condition-c labels. `layer="best"` records the layer
    chosen per outer fold in `layers_chosen`; the within-c probe uses that same layer.
    """
    if layer not in LAYER_MODES:
        raise UserError(f"KTS layer must be one of {', '.join(LAYER_MODES)}, got {layer!r}")
    layers = sorted(states)
    if not layers:
        raise UserError("no hidden-state layers given; KTS needs at least one stored layer")
    where = row_index(rows, states)
    conds = sorted({c for (_, c) in where if c != ANCHOR})
    features = mean_states(states) if layer == "mean" else None
    out = {}
    for c in conds:
        facts = []   # (fact_id, subject, anchor row, c row, y0, yc)
        for (f, cond), ic in sorted(where.items()):
            if cond != c or (f, ANCHOR) not in where:
                continue
            i0 = where[(f, ANCHOR)]
            y0 = label_value(labels.get(rows[i0]["query_id"]), abstain_as_incorrect)
            yc = label_value(labels.get(rows[ic]["query_id"]), abstain_as_incorrect)
            if y0 is not None and yc is not None:
                facts.append((f, str(rows[i0]["subject"]), i0, ic, y0, yc))
        out[c] = _condition(c, facts, states, features, layers, config)
    variant = "abstain_as_incorrect" if abstain_as_incorrect else "main"
    return KTSReport(variant=variant, layer=layer, layers=layers, config=config, conditions=out)


def subject_folds(subjects: Sequence[str], strata: np.ndarray, n_splits: int, seed: int) -> np.ndarray:
    """Outer fold of each fact: grouped by subject, stratified on `strata` as far as groups allow."""
    folds = np.full(len(subjects), -1)
    from sklearn.model_selection import StratifiedGroupKFold

    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # "least populated class has fewer members than n_splits"
        warnings.simplefilter("ignore", UserWarning)
        for k, (_, test) in enumerate(splitter.split(np.zeros(len(subjects)), strata, groups=subjects)):
            folds[test] = k
    return folds


def _condition(c: str, facts: list, states: Mapping[int, np.ndarray], features: np.ndarray | None,
               layers: list[int], cfg: ProbeConfig) -> ConditionKTS:
    n = len(facts)
    y0 = np.array([x[4] for x in facts], dtype=int)
    yc = np.array([x[5] for x in facts], dtype=int)
    subjects = [x[1] for x in facts]
    counts = {"anchor_correct": int(y0.sum()), "anchor_incorrect": int(n - y0.sum()),
              "cond_correct": int(yc.sum()), "cond_incorrect": int(n - yc.sum())}
    err0 = 1 - float(y0.mean()) if n else None
    errc = 1 - float(yc.mean()) if n else None
    beh = kts_behavioural(err0, errc) if err0 is not None and errc is not None else None   # both set iff n
    result = ConditionKTS(
        condition=c, n_facts=n, n_subjects=len(set(subjects)), counts=counts, a0=None, a0_to_c=None, ac=None,
        kts=None, kts_gap=None, reason=None, kts_beh=beh,
        err_anchor=err0, err_cond=errc, layers_chosen=None)
    small = [k for k, v in counts.items() if v < cfg.min_class]
    if small:
        result.reason = (f"too few facts per class: {', '.join(f'{k}={counts[k]}' for k in small)} "
                         f"(need at least {cfg.min_class} each)")
    elif result.n_subjects < cfg.n_splits:
        result.reason = f"only {result.n_subjects} distinct subjects for {cfg.n_splits} subject-grouped folds"
    if result.reason:
        result.facts = [FactKTS(f, s, -1, a, b, None, None, None) for f, s, _, _, a, b in facts]
        return result

    i0 = np.array([x[2] for x in facts])
    ic = np.array([x[3] for x in facts])
    folds = subject_folds(subjects, 2 * y0 + yc, cfg.n_splits, cfg.seed)
    groups = np.array(subjects)
    p0, pc, pcc = np.empty(n), np.empty(n), np.empty(n)
    if features is not None:
        x0, xc = features[i0], features[ic]
        for k in range(cfg.n_splits):
            train, test = folds != k, folds == k
            if not test.any():
                continue
            _, p0[test], pc[test] = _anchor_probe(x0, xc, y0, groups, train, test, cfg)
            pcc[test] = _cond_probe(x0, xc, yc, groups, train, test, cfg)
    else:
        chosen = _best_layers(states, layers, i0, ic, y0, groups, folds, p0, pc, cfg)
        result.layers_chosen = chosen
        for lay in sorted(set(chosen)):
            x0 = np.asarray(states[lay][i0], dtype=np.float32)
            xc = np.asarray(states[lay][ic], dtype=np.float32)
            for k in (k for k in range(cfg.n_splits) if chosen[k] == lay):
                train, test = folds != k, folds == k
                if not test.any():
                    continue
                pcc[test] = _cond_probe(x0, xc, yc, groups, train, test, cfg)

    result.a0 = float(auroc(y0, p0))
    result.a0_to_c = float(auroc(yc, pc))
    result.ac = float(auroc(yc, pcc))
    result.kts_gap = result.ac - result.a0_to_c
    if result.a0 <= cfg.min_a0:
        result.reason = f"A0 = {result.a0:.3f} <= {cfg.min_a0}: the anchor probe does not read correctness"
    else:
        result.kts = kts_score(result.a0, result.a0_to_c)
    result.facts = [FactKTS(f, s, int(folds[j]), a, b, float(p0[j]), float(pc[j]), 1 - abs(float(p0[j] - pc[j])))
                    for j, (f, s, _, _, a, b) in enumerate(facts)]
    return result


def _best_layers(states: Mapping[int, np.ndarray], layers: list[int], i0: np.ndarray, ic: np.ndarray,
                 y0: np.ndarray, groups: np.ndarray, folds: np.ndarray, p0: np.ndarray, pc: np.ndarray,
                 cfg: ProbeConfig) -> list[int]:
    """Return, per outer fold, the layer whose anchor probe has the best inner-CV AUROC.

    The AUROC is over the fold's anchor training facts; p0/pc are filled with that layer's
    out-of-fold predictions.
    """
    best = [(-math.inf, layers[0])] * cfg.n_splits
    for lay in layers:
        x0 = np.asarray(states[lay][i0], dtype=np.float32)
        xc = np.asarray(states[lay][ic], dtype=np.float32)
        for k in range(cfg.n_splits):
            train, test = folds != k, folds == k
            if not test.any():
                continue
            val, a, b = _anchor_probe(x0, xc, y0, groups, train, test, cfg)
            val = -math.inf if math.isnan(val) else val
            if lay == layers[0] or val > best[k][0]:  # strict: ties keep the earlier layer
                best[k] = (val, lay)
                p0[test], pc[test] = a, b
    return [lay for _, lay in best]


def _anchor_probe(x0: np.ndarray, xc: np.ndarray, y0: np.ndarray, groups: np.ndarray, train: np.ndarray,
                  test: np.ndarray, cfg: ProbeConfig) -> tuple[float, np.ndarray, np.ndarray]:
    """Fit on the fold's anchor training facts; (inner-CV AUROC, p on held-out anchor, p on held-out c)."""
    mu, sd = standardiser(x0[train])
    model, val = _fit(((x0[train] - mu) / sd), y0[train], groups[train], cfg)
    return val, _proba(model, (x0[test] - mu) / sd), _proba(model, (xc[test] - mu) / sd)


def _cond_probe(x0: np.ndarray, xc: np.ndarray, yc: np.ndarray, groups: np.ndarray, train: np.ndarray,
                test: np.ndarray, cfg: ProbeConfig) -> np.ndarray:
    """Fit the within-c probe, on states standardised with the fold's anchor-training statistics.

    Returns its probabilities on the fold's held-out c states.
    """
    mu, sd = standardiser(x0[train])
    model, _ = _fit((xc[train] - mu) / sd, yc[train], groups[train], cfg)
    return _proba(model, (xc[test] - mu) / sd)


def _proba(model: LogisticRegression, z: np.ndarray) -> np.ndarray:
    return model.predict_proba(z)[:, 1]


def _fit(z: np.ndarray, y: np.ndarray, groups: np.ndarray, cfg: ProbeConfig) -> tuple[LogisticRegression, float]:
    """L2 logistic regression with C chosen by subject-grouped inner CV (mean AUROC over inner folds).

    Returns the model refitted on all of z at the chosen C and that C's mean inner AUROC (NaN, with
    C = 1, when no inner fold had both classes). Convergence warnings at large C are silenced: the
    grid's small Cs carry the choice when a large one has not converged.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold

    scores = np.zeros(len(cfg.Cs))
    used = 0
    inner = StratifiedGroupKFold(n_splits=cfg.inner_splits, shuffle=True, random_state=cfg.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        if len(set(groups)) >= cfg.inner_splits:
            for tr, va in inner.split(z, y, groups=groups):
                if len(set(y[tr])) < 2 or len(set(y[va])) < 2:
                    continue
                model = LogisticRegression(warm_start=True, max_iter=cfg.max_iter)
                for j, C in enumerate(sorted(cfg.Cs)):   # ascending: each fit warm-starts the next
                    model.set_params(C=C).fit(z[tr], y[tr])
                    scores[j] += auroc(y[va], model.decision_function(z[va]))
                used += 1
        if used:
            j = int(np.argmax(scores))  # first maximum: ties go to the stronger penalty
            C, val = sorted(cfg.Cs)[j], float(scores[j] / used)
        else:
            C, val = 1.0, math.nan
        model = LogisticRegression(C=C, max_iter=cfg.max_iter).fit(z, y)
    return model, val
