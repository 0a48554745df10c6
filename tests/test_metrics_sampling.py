from itertools import combinations

import pytest

from proctor.metrics import majority, pass_at_k


@pytest.mark.parametrize("n,c,k", [(8, 0, 1), (8, 3, 1), (8, 3, 2), (8, 3, 4), (8, 5, 4), (8, 8, 8), (5, 2, 3)])
def test_pass_at_k_equals_enumeration_of_all_k_subsets(n, c, k):
    correct = [i < c for i in range(n)]
    subsets = list(combinations(range(n), k))
    expected = sum(any(correct[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_fraction_correct_and_bad_arguments_raise():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    with pytest.raises(ValueError):
        pass_at_k(8, 9, 1)
    with pytest.raises(ValueError):
        pass_at_k(8, 1, 9)


def test_majority_ties_go_to_first_seen():
    assert majority(["3", "4", "4", "3"]) == "3"
    assert majority(["3", "4", "4"]) == "4"
    with pytest.raises(ValueError):
        majority([])
