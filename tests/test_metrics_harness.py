"""lm-eval's acc_norm and TruthfulQA mc2, and RRGS: hand-computed values and the lm-eval family's scoring."""

import math

import pytest

from proctor.tasks.registry import resolve
from proctor.metrics import choice_score, score_multiple_choice
from proctor.metrics.harness import acc_norm_index, lm_eval_choice_metrics, mc2
from proctor.metrics.rrgs import rrgs
from proctor.requests import LoglikelihoodResult
from proctor.tasks.base import Instance
from proctor.tasks.registry import task_config


def test_acc_norm_divides_by_the_choice_text_without_the_delimiter():
    # lm-eval: -2/1 = -2 < -3.5/2 = -1.75 -> choice 1. Counting the leading space
    # (proctor's acc_per_char): -2/2 = -1 > -3.5/3 = -1.17 -> choice 0.
    lls, texts = [-2.0, -3.5], ["a", "bb"]
    assert acc_norm_index(lls, texts) == 1
    scored = [choice_score(" " + t, LoglikelihoodResult(ll, 1, False)) for ll, t in zip(lls, texts)]
    assert score_multiple_choice(scored, 1)["predicted_index_per_char"] == 0
    assert lm_eval_choice_metrics(lls, texts, 1) == {"predicted_index_norm": 1, "acc_norm": 1.0}


def test_acc_norm_ties_go_to_the_first_choice():
    assert acc_norm_index([-2.0, -4.0], ["ab", "abcd"]) == 0


def test_mc2_is_the_normalised_true_mass():
    lls = [math.log(0.2), math.log(0.1), math.log(0.3)]
    assert mc2(lls, [True, True, False]) == pytest.approx(0.3 / 0.6, rel=1e-15)
    assert mc2(lls, [False, False, True]) == pytest.approx(0.5, rel=1e-15)


def test_mc2_stays_finite_where_exp_underflows():
    # exp(-800) is 0.0 in float64, so lm-eval's plain exp gives 0/0 = nan here
    assert mc2([-800.0, -801.0], [True, False]) == pytest.approx(1 / (1 + math.exp(-1)), rel=1e-14)


def test_mc2_metrics_mark_any_true_answer_correct():
    out = lm_eval_choice_metrics([-5.0, -1.0, -3.0], ["a", "b", "c"], 0, true_choices=(0, 1))
    assert out["predicted_index_mc2"] == 1 and out["is_correct"] is True
    out = lm_eval_choice_metrics([-5.0, -4.0, -1.0], ["a", "b", "c"], 0, true_choices=(0, 1))
    assert out["is_correct"] is False


def test_rrgs_by_hand():
    assert rrgs([0.25, 0.25]) == 1.0
    assert rrgs([0.75, 0.25]) == pytest.approx(1 - (0.5 + 0.0) / 2)
    assert rrgs({"a": 0.0, "b": 1.0, "c": 0.5}) == pytest.approx(1 - (0.25 + 0.75 + 0.25) / 3)
    assert rrgs([0.5], baseline=0.5) == 1.0
    with pytest.raises(ValueError):
        rrgs([])
    with pytest.raises(ValueError):
        rrgs([1.5])


def test_rrgs_matches_the_seed_recipe():
    scores = [0.31, 0.22, 0.47, 0.25, 0.6, 0.19]
    assert rrgs(scores) == pytest.approx(1 - sum(abs(s - 0.25) for s in scores) / len(scores))


def test_lm_eval_family_adds_acc_norm_and_mc2():
    config = task_config("truthfulqa_mc2::leaderboard")
    inst = Instance(query_id="q#0", task=config.name, doc_id=0, native_id=0, prompt="P",
                    choices=("yes", "no", "maybe"), continuations=(" yes", " no", " maybe"), label=0,
                    metadata={"benchmark": "truthfulqa", "true_choices": (0, 1)})
    lls = {" yes": math.log(0.2), " no": math.log(0.5), " maybe": math.log(0.3)}
    results = {r.key: LoglikelihoodResult(lls[r.continuation], 2, False) for r in inst.requests}
    [task] = resolve(config.name)
    scored = task.score_docs([inst], results)
    assert scored.metrics["mc2"].mean == pytest.approx(0.7)
    assert scored.metrics["acc_norm"].mean == 0.0   # per character "maybe" wins (-0.24 > -0.35 > -0.54)
    assert scored.metrics[config.primary_metric].mean == pytest.approx(0.7)
    row = scored.sidecar[0]
    assert row.is_correct is True and row.predicted_answer == "no" and row.correct_answer == "yes"
