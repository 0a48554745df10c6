"""ISS: hand-computed cases and synthetic states with a known answer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from proctor.errors import UserError
from proctor.factual.iss import bootstrap_ci, compute_iss, pair_stats


def make_rows(facts: list[tuple[str, str]], conditions=("anchor", "paraphrase")) -> list[dict]:
    """One row per (fact, condition); facts are (fact_id, relation). Crosslingual as 'crosslingual:de'."""
    rows = []
    for f, rel in facts:
        for c in conditions:
            family, _, lang = c.partition(":")
            rows.append({"query_id": f"q_{f}_{c}", "fact_id": f, "relation": rel, "subject": f"subj {f}",
                         "condition_family": family, "language": lang or "en"})
    return rows


def states_from(rows: list[dict], fn) -> np.ndarray:
    return np.stack([fn(r) for r in rows])


def test_pair_stats_by_hand():
    m = np.array([[0.9, 0.1, 0.95],
                  [0.2, 0.5, 0.4],
                  [0.0, -1.0, -0.5]])
    s, null, below = pair_stats(m)
    assert s.tolist() == [0.9, 0.5, -0.5]
    assert np.allclose(null, [(0.1 + 0.95) / 2, (0.2 + 0.4) / 2, (0.0 - 1.0) / 2])
    assert below.tolist() == [0.5, 1.0, 0.5]


def test_three_facts_with_explicit_vectors():
    # anchor: three unit vectors 120 degrees apart (mean zero); condition: the same rotated by theta.
    # Scale and offset differ per condition, so only centring + normalising recovers the unit vectors.
    angles = np.deg2rad([0, 120, 240])
    facts = [(f"f{i}", "r") for i in range(3)]
    rows = make_rows(facts)

    def layer(theta_deg: float) -> np.ndarray:
        def vec(r):
            k = int(r["fact_id"][1])
            if r["condition_family"] == "anchor":
                return 5 * np.array([np.cos(angles[k]), np.sin(angles[k])]) + [3.0, -2.0]
            t = angles[k] + np.deg2rad(theta_deg)
            return 0.2 * np.array([np.cos(t), np.sin(t)]) + [-7.0, 11.0]
        return states_from(rows, vec).astype(np.float32)

    # theta = 30: s = cos30, others cos150 and cos(-90): null = -cos30/2, both below s
    # theta = 100: s = cos100, others cos220 and cos(-20): one below, one above
    report = compute_iss(rows, {10: layer(30), 12: layer(100)}, min_facts=3, n_boot=200)
    res = report.conditions["paraphrase"]
    c30 = math.cos(math.radians(30))
    d30 = c30 - (-c30 + 0) / 2
    d100 = math.cos(math.radians(100)) - (math.cos(math.radians(220)) + math.cos(math.radians(-20))) / 2
    assert res.per_layer[10] == pytest.approx(d30, abs=1e-5)
    assert res.per_layer[12] == pytest.approx(d100, abs=1e-5)
    for fact in res.facts:
        assert fact.iss == pytest.approx((d30 + d100) / 2, abs=1e-5)
        assert fact.iss_rank == pytest.approx(0.75)
    assert res.iss == pytest.approx((d30 + d100) / 2, abs=1e-5) and res.iss_rank == pytest.approx(0.75)
    assert res.n_facts == 3 and report.layers == [10, 12]


def random_bank(n_facts: int, n_rel: int, conditions=("anchor", "paraphrase")) -> list[dict]:
    return make_rows([(f"f{i:04d}", f"rel{i % n_rel}") for i in range(n_facts)], conditions)


def test_identical_states_give_s_one_and_large_iss():
    rows = random_bank(60, 3)
    rng = np.random.default_rng(0)
    base = {f"f{i:04d}": rng.normal(size=64) for i in range(60)}
    x = states_from(rows, lambda r: base[r["fact_id"]])
    res = compute_iss(rows, {5: x, 6: 2 * x}, n_boot=100).conditions["paraphrase"]
    assert res.iss > 0.9 and res.ci_low > 0.85
    assert res.iss_rank == 1.0
    assert all(f.iss_rank == 1.0 for f in res.facts)


def test_independent_noise_gives_iss_near_zero_and_rank_near_half():
    rows = random_bank(400, 4)
    rng = np.random.default_rng(1)
    states = {layer: rng.normal(size=(len(rows), 64)).astype(np.float16) for layer in (7, 8)}
    res = compute_iss(rows, states, n_boot=300, seed=3).conditions["paraphrase"]
    assert abs(res.iss) < 0.02 and res.ci_low < 0 < res.ci_high
    assert abs(res.iss_rank - 0.5) < 0.03 and res.rank_ci_low < 0.5 < res.rank_ci_high
    assert res.n_facts == 400 and set(res.per_layer) == {7, 8}


def test_relation_with_four_facts_is_nan_and_left_out():
    facts = [(f"a{i}", "big") for i in range(6)] + [(f"b{i}", "small") for i in range(4)]
    rows = make_rows(facts)
    rng = np.random.default_rng(2)
    res = compute_iss(rows, {0: rng.normal(size=(len(rows), 8))}, n_boot=50).conditions["paraphrase"]
    by_fact = {f.fact_id: f for f in res.facts}
    assert all(math.isnan(by_fact[f"b{i}"].iss) and math.isnan(by_fact[f"b{i}"].iss_rank) for i in range(4))
    assert not any(math.isnan(by_fact[f"a{i}"].iss) for i in range(6))
    assert res.n_facts == 6 and res.n_pairs == 10 and res.small_relations == ["small"]
    assert res.iss == pytest.approx(np.mean([by_fact[f"a{i}"].iss for i in range(6)]))


def test_only_facts_with_both_rows_count_toward_the_relation_size():
    facts = [(f"a{i}", "r") for i in range(5)]
    rows = [r for r in make_rows(facts) if not (r["fact_id"] == "a0" and r["condition_family"] == "paraphrase")]
    rng = np.random.default_rng(3)
    res = compute_iss(rows, {0: rng.normal(size=(len(rows), 8))}, n_boot=50).conditions["paraphrase"]
    assert res.n_pairs == 4 and res.n_facts == 0 and math.isnan(res.iss) and math.isnan(res.ci_low)


def test_outcome_split_excludes_ambiguous_and_unparseable():
    rows = random_bank(40, 2)
    rng = np.random.default_rng(4)
    states = {0: rng.normal(size=(len(rows), 16))}
    anchor_label = ["correct", "correct", "incorrect", "abstain", "ambiguous"]
    cond_label = ["correct", "incorrect", "correct", "incorrect", "correct"]
    labels = {}
    for r in rows:
        i = int(r["fact_id"][1:])
        labels[r["query_id"]] = (anchor_label if r["condition_family"] == "anchor" else cond_label)[i % 5]
    labels[rows[1]["query_id"]] = "unparseable"   # paraphrase row of f0000 (an "11" fact)
    res = compute_iss(rows, states, labels, n_boot=50).conditions["paraphrase"]
    expect = {"11": [], "10": [], "01": [], "00": []}
    for f in res.facts:
        i = int(f.fact_id[1:])
        o = None if i == 0 or i % 5 == 4 else ["11", "10", "01", "00"][i % 5]
        assert f.outcome == o
        if o:
            expect[o].append(f.iss)
    for o, vals in expect.items():
        assert res.by_outcome[o].n == len(vals) and res.by_outcome[o].mean == pytest.approx(np.mean(vals))
    assert res.by_outcome["11"].n == 7   # f0000 dropped for its unparseable paraphrase


def test_reverse_and_each_language_are_their_own_condition():
    conds = ("anchor", "paraphrase", "reverse", "crosslingual:de", "crosslingual:fr")
    rows = random_bank(20, 1, conds)
    rng = np.random.default_rng(5)
    base = {f"f{i:04d}": rng.normal(size=32) for i in range(20)}
    # paraphrase copies the anchor, reverse is noise: pooling would land between the two
    x = states_from(rows, lambda r: base[r["fact_id"]] if r["condition_family"] != "reverse"
                    else rng.normal(size=32))
    report = compute_iss(rows, {0: x}, n_boot=50)
    assert set(report.conditions) == {"paraphrase", "reverse", "crosslingual:de", "crosslingual:fr"}
    assert report.conditions["paraphrase"].iss > 0.9 and abs(report.conditions["reverse"].iss) < 0.2
    assert report.conditions["reverse"].n_facts == 20


def test_float16_memmaps_and_json(tmp_path):
    rows = random_bank(30, 2)
    rng = np.random.default_rng(6)
    for layer in (3, 4):
        np.save(tmp_path / f"L{layer:03d}.npy", rng.normal(size=(len(rows), 16)).astype(np.float16))
    states = {layer: np.load(tmp_path / f"L{layer:03d}.npy", mmap_mode="r") for layer in (3, 4)}
    in_memory = {layer: np.asarray(a) for layer, a in states.items()}
    labels = {r["query_id"]: "correct" for r in rows}
    a = compute_iss(rows, states, labels, n_boot=50, seed=9)
    b = compute_iss(rows, in_memory, labels, n_boot=50, seed=9)
    assert a.to_dict() == b.to_dict()
    text = json.dumps(a.to_dict(), allow_nan=False)
    back = json.loads(text)["conditions"]["paraphrase"]
    assert back["by_outcome"]["11"]["n"] == 30 and back["by_outcome"]["00"]["mean"] is None
    assert set(back["per_layer"]) == {"3", "4"} and len(back["facts"]) == 30
    assert compute_iss(rows, states, n_boot=50).conditions["paraphrase"].by_outcome == {}


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    v = np.random.default_rng(7).normal(loc=1.0, size=200)
    assert bootstrap_ci(v, 500, seed=1) == bootstrap_ci(v, 500, seed=1)
    lo, hi = bootstrap_ci(np.append(v, np.nan), 500, seed=1)
    assert lo < v.mean() < hi and hi - lo < 0.5
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([np.nan]), 10, 0))


def test_bad_inputs_are_user_errors():
    rows = random_bank(10, 1)
    with pytest.raises(UserError, match="shape"):
        compute_iss(rows, {0: np.zeros((len(rows) - 1, 4))})
    with pytest.raises(UserError, match="two main-forward rows"):
        compute_iss(rows + rows[:1], {0: np.zeros((len(rows) + 1, 4))})
    with pytest.raises(UserError, match="no hidden-state layers"):
        compute_iss(rows, {})
