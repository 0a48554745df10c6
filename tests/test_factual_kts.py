"""KTS: synthetic states with a known label direction; folds, standardisation and undefined cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from proctor.errors import UserError
from proctor.factual import kts as kts_mod
from proctor.factual.kts import (ProbeConfig, compute_kts, kts_behavioural, kts_score, label_value,
                                 subject_folds)

FAST = ProbeConfig(Cs=(0.3,), inner_splits=2, seed=0)


def bank(n_facts: int, conditions: tuple[str, ...], per_subject: int = 2) -> list[dict]:
    rows = []
    for i in range(n_facts):
        for c in conditions:
            rows.append({"query_id": f"q{i}_{c}", "fact_id": f"f{i:04d}", "relation": f"rel{i % 3}",
                         "subject": f"subject {i // per_subject}", "condition_family": c, "language": "en"})
    return rows


def synthetic(n_facts: int = 240, d: int = 12, signal: float = 3.0, seed: int = 0):
    """anchor and 'paraphrase' carry the label along e0; 'reverse' carries ITS label along e1 only."""
    rng = np.random.default_rng(seed)
    rows = bank(n_facts, ("anchor", "paraphrase", "reverse"))
    y = rng.integers(0, 2, n_facts)
    y_rev = rng.integers(0, 2, n_facts)
    x = rng.normal(size=(len(rows), d))
    labels = {}
    for j, r in enumerate(rows):
        i = int(r["fact_id"][1:])
        if r["condition_family"] == "reverse":
            x[j, 1] += signal * (2 * y_rev[i] - 1)
            labels[r["query_id"]] = "correct" if y_rev[i] else "incorrect"
        else:
            x[j, 0] += signal * (2 * y[i] - 1)
            labels[r["query_id"]] = "correct" if y[i] else "incorrect"
    return rows, {20: x.astype(np.float16)}, labels


@pytest.fixture(scope="module")
def shared_and_rotated():
    rows, states, labels = synthetic()
    return compute_kts(rows, states, labels, config=FAST)


def test_shared_direction_gives_kts_one(shared_and_rotated):
    res = shared_and_rotated.conditions["paraphrase"]
    assert res.a0 > 0.9 and res.a0_to_c > 0.9 and res.kts > 0.95 and res.reason is None
    assert abs(res.kts_gap) < 0.05
    assert res.kts_beh == pytest.approx(1.0)   # identical labels, identical error rates
    assert res.n_facts == 240


def test_rotated_direction_gives_kts_zero_and_a_positive_gap(shared_and_rotated):
    res = shared_and_rotated.conditions["reverse"]
    assert res.a0 > 0.9 and res.kts < 0.2 and res.ac > 0.9 and res.kts_gap > 0.3


def test_per_fact_kts_uses_out_of_fold_anchor_probe_probabilities(shared_and_rotated):
    for c in ("paraphrase", "reverse"):
        for f in shared_and_rotated.conditions[c].facts:
            assert f.kts == pytest.approx(1 - abs(f.p_anchor - f.p_cond))
            assert 0 <= f.fold < 5
    para = shared_and_rotated.conditions["paraphrase"].facts
    assert np.mean([f.kts for f in para]) > 0.8


def test_folds_never_split_a_subject(shared_and_rotated):
    for res in shared_and_rotated.conditions.values():
        fold_of: dict[str, set[int]] = {}
        for f in res.facts:
            fold_of.setdefault(f.subject, set()).add(f.fold)
        assert all(len(v) == 1 for v in fold_of.values())
        assert len({f.fold for f in res.facts}) == 5


def test_subject_folds_groups_and_covers():
    subjects = [f"s{i // 3}" for i in range(90)]
    folds = subject_folds(subjects, np.arange(90) % 2, 5, seed=1)
    assert set(folds) == set(range(5))
    for s in set(subjects):
        assert len({folds[i] for i in range(90) if subjects[i] == s}) == 1


def test_standardisation_uses_anchor_training_facts_only(monkeypatch):
    rows, states, labels = synthetic(n_facts=120, d=6)
    x = states[20].astype(np.float32)
    # tag every row: coordinate 5 = index/1000 for anchor rows, 1 + index/1000 for condition rows
    for j, r in enumerate(rows):
        i = int(r["fact_id"][1:])
        x[j, 5] = i / 1000 + (r["condition_family"] != "anchor")
    seen = []
    real = kts_mod.standardiser
    monkeypatch.setattr(kts_mod, "standardiser", lambda xt: (seen.append(xt.copy()), real(xt))[1])
    report = compute_kts(rows, {20: x}, labels, config=FAST)
    training = []   # each condition's folds' training facts
    for res in report.conditions.values():
        training += [{int(f.fact_id[1:]) for f in res.facts if f.fold != k} for k in range(5)]
    assert len(seen) == 2 * 2 * 5   # 2 conditions x (anchor probe, within-c probe) x 5 folds
    for xt in seen:
        ids = set(np.rint(xt[:, 5] * 1000).astype(int).tolist())
        assert max(ids) < 1000                          # anchor rows only
        assert ids in training                          # exactly one fold's training facts


@pytest.mark.slow  # heavy: probe fits, over 3 s
def test_best_layer_is_chosen_from_anchor_data_only():
    rows, states, labels = synthetic(n_facts=200, d=8)
    rng = np.random.default_rng(3)
    x_signal = states[20].astype(np.float32)
    x_noise = rng.normal(size=x_signal.shape).astype(np.float32)
    # layer 5: anchor is noise but every condition row carries a huge label signal on e0 and e1
    x5 = x_noise.copy()
    for j, r in enumerate(rows):
        if r["condition_family"] != "anchor":
            x5[j] = x_signal[j] * 10
    report = compute_kts(rows, {5: x5, 20: x_signal}, labels, layer="best", config=FAST)
    for res in report.conditions.values():
        assert res.layers_chosen == [20] * 5
    assert report.conditions["paraphrase"].kts > 0.9 and report.conditions["reverse"].kts < 0.2
    mean = compute_kts(rows, {5: x_noise, 20: x_signal}, labels, config=FAST)
    assert mean.conditions["paraphrase"].layers_chosen is None and mean.layer == "mean"


@pytest.mark.slow  # heavy: probe fits, over 3 s
def test_too_few_per_class_is_undefined_with_a_reason():
    rows, states, labels = synthetic(n_facts=120)
    incorrect = [r["query_id"] for r in rows if r["condition_family"] == "paraphrase"
                 and labels[r["query_id"]] == "incorrect"]
    for q in incorrect[15:]:
        labels[q] = "ambiguous"     # leaves 15 incorrect paraphrase facts
    res = compute_kts(rows, states, labels, config=FAST).conditions["paraphrase"]
    assert res.kts is None and res.a0 is None and "cond_incorrect=15" in res.reason
    assert res.counts["cond_incorrect"] == 15 and res.n_facts == 120 - (len(incorrect) - 15)
    assert res.kts_beh is not None and all(f.p_anchor is None and f.kts is None for f in res.facts)


def test_uninformative_anchor_is_undefined_with_a_reason():
    rows, states, labels = synthetic(n_facts=200, signal=0.0)
    res = compute_kts(rows, states, labels, config=FAST).conditions["paraphrase"]
    assert res.a0 is not None and res.a0 <= 0.55
    assert res.kts is None and "A0" in res.reason and res.kts_gap is not None


@pytest.mark.slow  # heavy: probe fits, over 3 s
def test_abstain_is_excluded_or_counted_as_incorrect():
    rows, states, labels = synthetic(n_facts=200)
    abstained = [r["query_id"] for r in rows if r["condition_family"] == "reverse"][:30]
    for q in abstained:
        labels[q] = "abstain"
    main = compute_kts(rows, states, labels, config=FAST).conditions["reverse"]
    both = compute_kts(rows, states, labels, abstain_as_incorrect=True, config=FAST)
    assert main.n_facts == 170 and both.conditions["reverse"].n_facts == 200
    assert both.variant == "abstain_as_incorrect"
    assert both.conditions["reverse"].counts["cond_incorrect"] == main.counts["cond_incorrect"] + 30


def test_auroc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.normal(size=300) + y, 1)   # rounding makes ties
    assert kts_mod.auroc(y, s) == pytest.approx(roc_auc_score(y, s))
    assert math.isnan(kts_mod.auroc(np.ones(5), np.arange(5)))


def test_scalar_formulas():
    assert kts_score(0.9, 0.7) == pytest.approx(0.5)
    assert kts_score(0.9, 0.4) == 0.0 and kts_score(0.8, 0.95) == 1.0
    assert kts_behavioural(0.2, 0.5) == pytest.approx(2 * (1 / 1.3 - 0.5))
    assert kts_behavioural(0.3, 0.3) == 1.0
    assert [label_value(x) for x in ("correct", "incorrect", "abstain", "ambiguous", "unparseable", None)] == \
        [1, 0, None, None, None, None]
    assert label_value("abstain", abstain_as_incorrect=True) == 0


@pytest.mark.slow  # heavy: probe fits, over 3 s
def test_kts_beh_is_over_the_same_facts():
    rows, states, labels = synthetic(n_facts=100)
    res = compute_kts(rows, states, labels, config=FAST).conditions["reverse"]
    err0 = 1 - np.mean([f.y_anchor for f in res.facts])
    errc = 1 - np.mean([f.y_cond for f in res.facts])
    assert res.err_anchor == pytest.approx(err0) and res.err_cond == pytest.approx(errc)
    assert res.kts_beh == pytest.approx(2 * (1 / (abs(err0 - errc) + 1) - 0.5))


def test_to_dict_is_json(shared_and_rotated):
    d = json.loads(json.dumps(shared_and_rotated.to_dict(), allow_nan=False))
    assert d["variant"] == "main" and set(d["conditions"]) == {"paraphrase", "reverse"}
    assert "facts" not in shared_and_rotated.to_dict(include_facts=False)["conditions"]["reverse"]


def test_bad_inputs_are_user_errors():
    rows, states, labels = synthetic(n_facts=30)
    with pytest.raises(UserError, match="layer"):
        compute_kts(rows, states, labels, layer="last")
    with pytest.raises(UserError, match="shape"):
        compute_kts(rows[:-1], states, labels)
