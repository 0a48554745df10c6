import math

import pytest

from proctor.metrics import MeanStat, choice_score, score_multiple_choice, suite_scores
from proctor.outputs.records import ChoiceOutput
from proctor.requests import LoglikelihoodResult


def test_choice_score_normalisations_hand_computed():
    s = choice_score(" café", LoglikelihoodResult(sum_logits=-6.0, num_tokens=3, is_greedy=False))
    assert (s.num_chars, s.num_bytes) == (5, 6)  # leading space counted; é is two bytes
    assert s.logits_per_token == -2.0
    assert s.logits_per_char == pytest.approx(-1.2)
    assert s.bits_per_byte == pytest.approx(6.0 / 6 / math.log(2))
    assert "sum_logits_uncond" not in s.to_dict()
    assert isinstance(s, ChoiceOutput)  # the record itself: model_output holds it as is
    assert list(s.to_dict()) == ["sum_logits", "num_tokens", "num_chars", "num_bytes", "is_greedy",
                                 "logits_per_token", "logits_per_char", "bits_per_byte"]
    with_uncond = choice_score(" x", LoglikelihoodResult(-2.0, 1, False), LoglikelihoodResult(-1.0, 1, False))
    assert with_uncond.to_dict()["sum_logits_uncond"] == -1.0


def test_each_normalisation_can_pick_a_different_choice():
    choices = [
        choice_score(" A long answer", LoglikelihoodResult(-10.0, 5, False)),  # best per char/token
        choice_score(" B", LoglikelihoodResult(-3.0, 1, True)),  # best raw
        choice_score(" Cé", LoglikelihoodResult(-3.5, 1, False)),
    ]
    m = score_multiple_choice(choices, label=0)
    assert m["predicted_index_raw"] == 1 and m["acc_raw"] == 0.0
    assert m["predicted_index_per_token"] == 0 and m["acc_per_token"] == 1.0  # -2.0 vs -3.0 vs -3.5
    assert m["predicted_index_per_char"] == 0  # -10/14 = -0.71 beats -1.5 and -1.17
    assert m["predicted_index_per_byte"] == 0
    assert "acc_uncond" not in m
    assert m["sum_logits_corr"] == -10.0 and m["correct_choice"] == 0


def test_uncond_and_ties_go_to_lowest_index():
    choices = [
        choice_score(" x", LoglikelihoodResult(-2.0, 1, False), LoglikelihoodResult(-1.0, 1, False)),
        choice_score(" y", LoglikelihoodResult(-2.0, 1, False), LoglikelihoodResult(-4.0, 1, False)),
    ]
    m = score_multiple_choice(choices, label=1)
    assert m["predicted_index_raw"] == 0  # tie on sum_logits -> lowest index
    assert m["predicted_index_uncond"] == 1  # -2-(-4)=2 beats -2-(-1)=-1
    assert m["acc_uncond"] == 1.0


def test_meanstat_matches_sample_stderr_and_merges_exactly():
    values = [1.0, 0.0, 1.0, 1.0, 0.0]
    stat = MeanStat.of(values)
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    assert stat.mean == pytest.approx(0.6)
    assert stat.stderr == pytest.approx(sd / math.sqrt(5))
    assert MeanStat.of(values[:2]).merge(MeanStat.of(values[2:])) == stat
    assert math.isnan(MeanStat.of([1.0]).stderr)


def test_suite_macro_is_unweighted_and_micro_is_weighted():
    a = MeanStat.of([1.0] * 3 + [0.0])  # 0.75 on 4 docs
    b = MeanStat.of([0.0] * 12)  # 0.0 on 12 docs
    s = suite_scores([a, b])
    assert s["macro"] == pytest.approx(0.375)
    assert s["micro"] == pytest.approx(3 / 16)
    assert s["num_instances"] == 16 and s["num_tasks"] == 2
