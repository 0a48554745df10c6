"""Answer extraction, exact match and per-doc sample metrics, against hand-computed values."""

import pytest

from proctor.metrics import (
    BBH_ANSWER, GSM8K_IGNORE, exact_match, extract_last_number, gsm8k_gold, gsm8k_match,
    maj_at_k, regex_extract, sampled_metrics,
)
from proctor.metrics.answers import normalize_for_match


@pytest.mark.parametrize("text,expected", [
    ("So the answer is 18.", "18"),                             # trailing period not taken
    ("16 - 3 - 4 = 9. 9 * 2 = 18", "18"),                       # the LAST number
    ("She made $1,234 in total. So the answer is 1,234.", "1234"),  # digit,digit commas go
    ("That is 1,450,000 dollars", "1450000"),
    ("The numbers 1, 2 and 3", "3"),                            # ", " is not inside a number
    ("It costs $18.", "18"),                                    # $ is not part of the number
    ("It costs $12.50 each", "12.50"),                          # decimals keep their digits
    ("10,000.75 in the bank", "10000.75"),
    ("x = -0.5", "-0.5"),                                       # sign kept before a decimal
    ("x = +.5", "+.5"),
    ("The temperature is -7.", "7"),                            # ...but not before an integer
    ("1.5.", "1.5"),
    ("#### 42", "42"),
    ("no number at all", "no number at all"),                   # none: the whole text
    ("", ""),
])
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


@pytest.mark.parametrize("answer,gold", [
    ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n#### 18", "18"),
    ("So the total is 2,125.\n#### 2,125", "2125"),
    ("The balance drops by 10.\n#### -10", "10"),               # GSM8K test doc 489
    ("a #### 3 #### 4", "4"),                                   # after the LAST ####
])
def test_gsm8k_gold(answer, gold):
    assert gsm8k_gold(answer) == gold


@pytest.mark.parametrize("prediction,gold,expected", [
    ("18", "18", True),
    ("18.", "18", True),              # "\.$" drops one trailing period
    ("18..", "18", False),            # ...only one
    ("$18", "18", True),              # "\$" drops dollar signs
    ("1,234", "1234", True),          # "," drops commas anywhere
    ("#### 72", "72", True),          # "(?s).*#### " drops everything up to the marker
    ("so\n#### 72", "72", True),      # (?s): across newlines too
    ("18.00", "18", False),           # no numeric equivalence
    ("18.0", "18", False),
    ("ABC", "abc", True),             # lower-cased
    ("no number here", "5", False),
    ("", "5", False),
])
def test_gsm8k_match(prediction, gold, expected):
    assert gsm8k_match(prediction, gold) is expected


def test_exact_match_normalisation_order_and_options():
    assert GSM8K_IGNORE == (",", "\\$", "(?s).*#### ", "\\.$")
    # regexes run before lower-casing, punctuation removal after it
    assert normalize_for_match("A.B, $C.", regexes_to_ignore=GSM8K_IGNORE, ignore_case=True) == "a.b c"
    assert normalize_for_match("(A).", ignore_punctuation=True) == "A"
    assert exact_match("(A)", "(A)") and not exact_match("(a)", "(A)")
    assert exact_match("(a)", "(A)", ignore_case=True)
    assert exact_match("A", "(A)", ignore_punctuation=True)
    assert not exact_match("A ", "A")


@pytest.mark.parametrize("text,expected", [
    ("... that is 12/14/1937. So the answer is (D).", "(D)"),
    ("So the answer is False.", "False"),
    ("So the answer is } ] >.", "} ] >"),
    ("So the answer is apple banana cherry.", "apple banana cherry"),
    ("So the answer is 24", "2"),                # (?=.) eats the last character, period or not
    ("So the answer is (A).\nLater, the answer is (B).", "(A)"),  # the FIRST match
    ("The answer is (A).", "[invalid]"),         # case-sensitive "the answer is "
    ("So the answer is yes.\n", "yes"),
    ("So the answer is .", ""),                  # an empty match is a match, not the fallback
    ("I cannot tell.", "[invalid]"),
    ("", "[invalid]"),
])
def test_regex_extract_bbh(text, expected):
    assert regex_extract(text, BBH_ANSWER) == expected


def test_regex_extract_groups_and_selection():
    pattern = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"   # lm-eval gsm8k "flexible-extract"
    assert regex_extract("I have 3 apples and 45 pears", pattern, group_select=-1) == "45"
    assert regex_extract("I have 3 apples and 45 pears", pattern, group_select=0) == "3"
    assert regex_extract("nothing", pattern, fallback="X") == "X"


def test_maj_at_k_ties_go_to_the_first_seen_answer():
    answers = ["3", "4", "4", "3"]
    correct = [False, True, True, False]
    assert maj_at_k(answers, correct, 1) == 0.0      # "3"
    assert maj_at_k(answers, correct, 2) == 0.0      # 3 vs 4 tie -> "3"
    assert maj_at_k(answers, correct, 3) == 1.0      # "4" twice
    assert maj_at_k(answers, correct, 4) == 0.0      # 2-2 tie -> "3"
    with pytest.raises(ValueError):
        maj_at_k(answers, correct, 5)
    with pytest.raises(ValueError):
        maj_at_k(answers, correct[:3], 1)


def test_sampled_metrics_hand_computed():
    answers = ["5", "7", "7", "9", "7", "7", "2", "5"]
    correct = [a == "7" for a in answers]           # c = 4 of n = 8
    m = sampled_metrics(answers, correct, (1, 2, 4, 8))
    assert list(m) == ["pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8",
                       "maj_at_1", "maj_at_2", "maj_at_4", "maj_at_8"]
    assert m["pass_at_1"] == pytest.approx(4 / 8)
    assert m["pass_at_2"] == pytest.approx(1 - 6 / 28)        # 1 - C(4,2)/C(8,2)
    assert m["pass_at_4"] == pytest.approx(1 - 1 / 70)        # 1 - C(4,4)/C(8,4)
    assert m["pass_at_8"] == 1.0
    assert (m["maj_at_1"], m["maj_at_2"], m["maj_at_4"], m["maj_at_8"]) == (0.0, 0.0, 1.0, 1.0)
