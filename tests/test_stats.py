"""Error bars for evals: clustered standard errors, paired differences, Holm, McNemar, Wilson."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from proctor.metrics import stats
from proctor.metrics.stats import (
    Z80, Z95, clustered_mean, holm, mcnemar_exact, paired_difference, wilson_interval,
)


def test_z_constants_are_scipys():
    assert Z95 == pytest.approx(norm.ppf(0.975), rel=1e-15)
    assert Z80 == pytest.approx(norm.ppf(0.80), rel=1e-15)


# clustered_mean


def test_clustered_mean_matches_statsmodels_cluster_ols():
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 12, size=30)
    groups = np.repeat(np.arange(30), sizes)
    y = rng.normal(size=30)[groups] + rng.normal(size=groups.size)
    fit = sm.OLS(y, np.ones(y.size)).fit(cov_type="cluster", cov_kwds={"groups": groups})

    # shuffled, with non-integer cluster keys: the result must not depend on the order or on the key type
    order = rng.permutation(y.size)
    result = clustered_mean(y[order].tolist(), [f"q{g}" for g in groups[order]])
    assert result.n == y.size and result.clusters == 30
    assert result.mean == pytest.approx(fit.params[0], rel=1e-12)
    assert result.stderr_clustered == pytest.approx(fit.bse[0], rel=1e-10)
    assert result.stderr_naive == pytest.approx(np.std(y, ddof=1) / math.sqrt(y.size), rel=1e-12)


def test_singleton_clusters_equal_the_naive_stderr():
    values = np.random.default_rng(3).normal(size=57)
    plain = clustered_mean(values)
    assert plain.clusters == plain.n == 57
    assert plain.stderr_clustered == pytest.approx(plain.stderr_naive, rel=1e-12)
    explicit = clustered_mean(values, list(range(57)))
    assert explicit.stderr_clustered == pytest.approx(plain.stderr_naive, rel=1e-12)


def test_clustered_mean_hand_case():
    # mean 3; residuals -2 -1 | 0 3; cluster sums -3, 3; G/(G-1) = 2: sqrt(2 * 18) / 4 = 1.5
    result = clustered_mean([1, 2, 3, 6], ["x", "x", "y", "y"])
    assert result == stats.ClusteredMean(3.0, math.sqrt(14 / 3 / 4), 1.5, 4, 2)


def test_clustered_mean_small_inputs():
    one = clustered_mean([0.5])
    assert one.mean == 0.5 and math.isnan(one.stderr_naive) and math.isnan(one.stderr_clustered)
    same_cluster = clustered_mean([1.0, 0.0, 1.0], ["a", "a", "a"])
    assert not math.isnan(same_cluster.stderr_naive) and math.isnan(same_cluster.stderr_clustered)
    empty = clustered_mean([])
    assert empty.n == 0 and math.isnan(empty.mean)
    with pytest.raises(ValueError, match="clusters"):
        clustered_mean([1.0, 2.0], ["a"])


def test_gsm8k_like_samples_cluster_by_question():
    rng = np.random.default_rng(11)
    questions, samples = 50, 8
    difficulty = rng.beta(0.5, 0.5, size=questions)  # most questions are nearly always or nearly never solved
    correct = (rng.random((questions, samples)) < difficulty[:, None]).astype(float)
    result = clustered_mean(correct.ravel(), np.repeat(np.arange(questions), samples))
    assert result.stderr_clustered > 2 * result.stderr_naive

    # With G clusters of equal size k the residual sum of cluster g is k (m_g - m), so
    # CR1 = sqrt(G/(G-1) * k^2 * sum (m_g - m)^2) / (G k) = sd(m_g, ddof=1) / sqrt(G): the factor is exactly 1.
    per_question = correct.mean(axis=1)
    by_hand = np.std(per_question, ddof=1) / math.sqrt(questions)
    assert abs(result.stderr_clustered - by_hand) < 1e-12


# holm and mcnemar


def test_holm_matches_statsmodels_and_passes_none_through():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(5)
    p = np.concatenate([rng.uniform(0, 0.05, size=6), rng.uniform(size=10), [0.01, 0.01, 1.0]])
    rng.shuffle(p)
    expected = multipletests(p, method="holm")[1]

    with_none = [None, *p[:6], None, *p[6:], None]
    adjusted = holm(with_none)
    assert [i for i, v in enumerate(adjusted) if v is None] == [0, 7, len(p) + 2]
    assert [v for v in adjusted if v is not None] == pytest.approx(expected, rel=1e-12)
    assert holm([]) == [] and holm([None]) == [None]
    assert holm([0.4, 0.9]) == [0.8, 0.9]


def test_mcnemar_matches_statsmodels_exact():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(9)
    for n, p_b in [(40, 0.5), (200, 0.7), (15, 0.9), (7, 0.5)]:
        a = (rng.random(n) < 0.5).astype(int)
        b = (rng.random(n) < p_b).astype(int)
        a_only, b_only, p = mcnemar_exact(a, b)
        table = [[np.sum(a & b), a_only], [b_only, np.sum((1 - a) & (1 - b))]]
        assert a_only == np.sum((a == 1) & (b == 0)) and b_only == np.sum((a == 0) & (b == 1))
        assert p == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-9)
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]) == (0, 0, 1.0)
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([0.5], [1])


# paired_difference


def test_paired_difference_analytic_interval_by_hand():
    a = [0.2, 0.5, 0.9, 0.4]
    b = [0.6, 0.5, 1.0, 0.9]
    # d = 0.4 0 0.1 0.5, mean 0.25, squared deviations sum to 0.17
    result = paired_difference(a, b, bootstrap=0)
    stderr = math.sqrt(0.17 / 3 / 4)
    assert result.diff == pytest.approx(0.25) and result.stderr == pytest.approx(stderr, rel=1e-12)
    assert result.a_score == pytest.approx(0.5) and result.b_score == pytest.approx(0.75)
    assert result.diff_ci95 == pytest.approx((0.25 - Z95 * stderr, 0.25 + Z95 * stderr), rel=1e-12)
    assert result.test == "wald_clustered" and result.a_only is None and result.b_only is None
    assert result.p_value == pytest.approx(2 * norm.sf(0.25 / stderr), rel=1e-12)
    assert result.mde80 == pytest.approx((Z95 + Z80) * stderr, rel=1e-15)
    assert all(math.isnan(v) for v in result.diff_ci95_bootstrap)

    # clusters {0, 1} and {2, 3}: residual sums -0.1 and 0.1; sqrt(2 * 0.02) / 4 = 0.05
    clustered = paired_difference(a, b, ["p", "p", "q", "q"], bootstrap=0)
    assert clustered.clusters == 2 and clustered.stderr == pytest.approx(0.05, rel=1e-12)


def test_binary_outcomes_use_exact_mcnemar_unless_clustered():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 0]
    b = [1, 0, 1, 1, 1, 1, 1, 0, 1, 1]
    plain = paired_difference(a, b, bootstrap=200)
    assert plain.test == "mcnemar_exact"
    assert (plain.a_only, plain.b_only, plain.p_value) == mcnemar_exact(a, b)
    clustered = paired_difference(a, b, [i // 2 for i in range(10)], bootstrap=200)
    assert clustered.test == "wald_clustered" and (clustered.a_only, clustered.b_only) == (2, 5)
    assert clustered.p_value == pytest.approx(2 * norm.sf(abs(clustered.diff) / clustered.stderr))


def test_strata_macro_and_micro_by_hand():
    # X: a 0 0 0 0, b 1 0 1 0 -> diff 0.5, se^2 = (1/3) / 4 = 1/12
    # Y: a 1 1, b 1 0 -> diff -0.5, se^2 = 0.5 / 2 = 1/4
    strata = ["X", "Y", "X", "X", "Y", "X"]
    a = [0, 1, 0, 0, 1, 0]
    b = [1, 1, 0, 1, 0, 0]
    macro = paired_difference(a, b, strata=strata, macro=True, bootstrap=0)
    assert macro.diff == pytest.approx(0.0, abs=1e-15)
    assert macro.stderr == pytest.approx(math.sqrt(0.25 * (1 / 12 + 1 / 4)), rel=1e-12)
    assert (macro.a_score, macro.b_score) == pytest.approx((0.5, 0.5))
    assert macro.p_value == pytest.approx(1.0)
    assert macro.test == "wald_clustered" and (macro.a_only, macro.b_only) == (1, 2)

    micro = paired_difference(a, b, strata=strata, bootstrap=0)
    assert micro.diff == pytest.approx(1 / 6, rel=1e-12)
    assert micro.stderr == pytest.approx(math.sqrt(4 / 9 / 12 + 1 / 9 / 4), rel=1e-12)
    assert (micro.a_score, micro.b_score) == pytest.approx((1 / 3, 0.5))
    assert micro.n == 6 and micro.clusters == 6


def test_cluster_ids_are_nested_in_strata():
    rng = np.random.default_rng(2)
    a, b = rng.random(24), rng.random(24)
    strata = np.repeat(["s1", "s2"], 12).tolist()
    reused = [i % 4 for i in range(24)]  # ids 0..3 in both strata
    unique = [f"{s}/{c}" for s, c in zip(strata, reused)]
    nested = paired_difference(a, b, reused, strata=strata, bootstrap=300, seed=4)
    assert nested.clusters == 8
    assert nested == paired_difference(a, b, unique, strata=strata, bootstrap=300, seed=4)


def _reference_bootstrap(d, clusters, strata, weights, replicates, seed):
    """One replicate at a time, drawing in the module's order: strata, then clusters, in order of first appearance."""
    rng = np.random.default_rng(seed)
    estimates = np.zeros(replicates)
    for s, weight in weights.items():
        members = [i for i in range(len(d)) if strata[i] == s]
        ids = list(dict.fromkeys(clusters[i] for i in members))
        sums = np.array([sum(d[i] for i in members if clusters[i] == c) for c in ids])
        sizes = np.array([sum(1 for i in members if clusters[i] == c) for c in ids], dtype=float)
        for r in range(replicates):
            pick = rng.integers(0, len(ids), size=len(ids))
            estimates[r] += weight * sums[pick].sum() / sizes[pick].sum()
    return tuple(np.percentile(estimates, [2.5, 97.5]))


def test_bootstrap_resamples_clusters_within_strata(monkeypatch):
    rng = np.random.default_rng(8)
    n = 60
    strata = rng.choice(["s1", "s2", "s3"], size=n).tolist()
    clusters = rng.integers(0, 6, size=n).tolist()  # unequal cluster sizes
    a, b = rng.random(n), rng.random(n)
    d = (b - a).tolist()
    counts = {s: strata.count(s) for s in dict.fromkeys(strata)}
    expected = _reference_bootstrap(d, clusters, strata, {s: c / n for s, c in counts.items()}, 150, 3)

    monkeypatch.setattr(stats, "_MAX_INDEX_ENTRIES", 20)  # force many chunks
    result = paired_difference(a, b, clusters, strata=strata, bootstrap=150, seed=3)
    assert result.diff_ci95_bootstrap == pytest.approx(expected, rel=1e-12)


def test_coverage_of_analytic_and_bootstrap_intervals():
    rng = np.random.default_rng(20241101)
    n, runs, true_diff = 200, 300, 0.1
    analytic = bootstrap = 0
    for run in range(runs):
        u = rng.random(n)
        a = (u < 0.55).astype(float)
        v = np.where(rng.random(n) < 0.5, u, rng.random(n))  # b shares half its randomness with a
        b = (v < 0.65).astype(float)
        result = paired_difference(a, b, bootstrap=1000, seed=run)
        analytic += result.diff_ci95[0] <= true_diff <= result.diff_ci95[1]
        bootstrap += result.diff_ci95_bootstrap[0] <= true_diff <= result.diff_ci95_bootstrap[1]
    assert 0.92 <= analytic / runs <= 0.98
    assert 0.92 <= bootstrap / runs <= 0.98


def test_clustered_interval_covers_where_the_naive_one_does_not():
    rng = np.random.default_rng(77)
    groups, size, runs, true_diff = 60, 8, 300, 0.05
    clusters = np.repeat(np.arange(groups), size)
    clustered_cover = naive_cover = 0
    for _ in range(runs):
        base = rng.random(groups * size)
        d = true_diff + rng.normal(0, 0.1, size=groups)[clusters] + rng.normal(0, 0.05, size=groups * size)
        result = paired_difference(base, base + d, clusters, bootstrap=0)
        naive = np.std(d, ddof=1) / math.sqrt(d.size)
        clustered_cover += result.diff_ci95[0] <= true_diff <= result.diff_ci95[1]
        naive_cover += abs(result.diff - true_diff) <= Z95 * naive
    assert 0.92 <= clustered_cover / runs <= 0.98
    assert naive_cover / runs < 0.8


def test_swapping_models_negates_the_difference():
    rng = np.random.default_rng(4)
    a = (rng.random(80) < 0.5).astype(int)
    b = (rng.random(80) < 0.6).astype(int)
    clusters = np.repeat(np.arange(20), 4)
    for kwargs in ({}, {"clusters": clusters}):
        forward = paired_difference(a, b, bootstrap=500, seed=1, **kwargs)
        backward = paired_difference(b, a, bootstrap=500, seed=1, **kwargs)
        assert backward.diff == -forward.diff and backward.stderr == forward.stderr
        assert (backward.a_score, backward.b_score) == (forward.b_score, forward.a_score)
        assert backward.diff_ci95 == pytest.approx((-forward.diff_ci95[1], -forward.diff_ci95[0]), rel=1e-12)
        low, high = forward.diff_ci95_bootstrap
        assert backward.diff_ci95_bootstrap == pytest.approx((-high, -low), rel=1e-12, abs=1e-15)
        assert (backward.a_only, backward.b_only) == (forward.b_only, forward.a_only)
        assert backward.p_value == pytest.approx(forward.p_value, rel=1e-12)
        assert forward.mde80 == pytest.approx((Z95 + Z80) * forward.stderr, rel=1e-15)


def test_bootstrap_is_deterministic_and_agrees_with_the_analytic_interval():
    rng = np.random.default_rng(12)
    a, b = rng.random(500), rng.random(500) + 0.05
    clusters = rng.integers(0, 100, size=500)  # unequal cluster sizes: the ratio estimator
    first = paired_difference(a, b, clusters, bootstrap=2000, seed=5)
    assert first == paired_difference(a, b, clusters, bootstrap=2000, seed=5)
    assert first.diff_ci95_bootstrap != paired_difference(a, b, clusters, bootstrap=2000, seed=6).diff_ci95_bootstrap
    width = first.diff_ci95[1] - first.diff_ci95[0]
    boot_width = first.diff_ci95_bootstrap[1] - first.diff_ci95_bootstrap[0]
    assert boot_width == pytest.approx(width, rel=0.15)


def test_degenerate_inputs():
    with pytest.raises(ValueError, match="a has 2 values and b has 3"):
        paired_difference([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="at least one"):
        paired_difference([], [])
    with pytest.raises(ValueError, match="clusters has 1"):
        paired_difference([1, 0], [0, 1], ["c"])
    with pytest.raises(ValueError, match="strata has 3"):
        paired_difference([1, 0], [0, 1], strata=["s", "s", "t"])

    one = paired_difference([0.3], [0.7])
    assert one.diff == pytest.approx(0.4) and one.n == 1
    assert math.isnan(one.stderr) and math.isnan(one.mde80) and math.isnan(one.p_value)
    assert all(math.isnan(v) for v in one.diff_ci95 + one.diff_ci95_bootstrap)

    tied = paired_difference([1, 0, 1], [1, 0, 1], ["x", "y", "z"])
    assert tied.diff == 0 and tied.stderr == 0 and tied.p_value == 1.0
    assert tied.diff_ci95 == (0.0, 0.0) and tied.diff_ci95_bootstrap == (0.0, 0.0)


# wilson_interval


def test_wilson_interval_matches_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    for successes, n in [(0, 10), (3, 10), (10, 10), (47, 120), (1, 1)]:
        expected = proportion_confint(successes, n, alpha=0.05, method="wilson")
        assert wilson_interval(successes, n) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def test_weighted_difference_matches_statsmodels_weighted_cluster_ols():
    """Weights (a suite's macro weights over documents) with clusters that cross tasks: the
    weighted mean, and its CR1 error as statsmodels' WLS with cluster-robust errors."""
    import statsmodels.api as sm

    rng = np.random.default_rng(11)
    n = 240
    groups = rng.integers(0, 12, size=n)
    a = (rng.random(n) < 0.4).astype(float)
    b = np.where(rng.random(n) < 0.8, a, 1 - a)
    w = rng.choice([1 / 30, 1 / 90, 1 / 120], size=n)
    fit = sm.WLS(b - a, np.ones(n), weights=w).fit(cov_type="cluster", cov_kwds={"groups": groups})
    result = paired_difference(a, b, groups.tolist(), weights=w.tolist(), bootstrap=2000, seed=1)
    assert result.diff == pytest.approx(fit.params[0], rel=1e-12)
    assert result.stderr == pytest.approx(fit.bse[0], rel=1e-10)
    assert result.a_score == pytest.approx(float(w @ a / w.sum()))
    assert result.clusters == 12 and result.test == "wald_clustered"
    lo, hi = result.diff_ci95_bootstrap
    assert lo < result.diff < hi and hi - lo == pytest.approx(2 * Z95 * result.stderr, rel=0.25)
    # equal weights are the unweighted difference
    plain = paired_difference(a, b, groups.tolist(), bootstrap=0)
    same = paired_difference(a, b, groups.tolist(), weights=[1.0] * n, bootstrap=0)
    assert same.diff == pytest.approx(plain.diff) and same.stderr == pytest.approx(plain.stderr)
    with pytest.raises(ValueError, match="not both"):
        paired_difference(a, b, strata=groups.tolist(), weights=w.tolist())
