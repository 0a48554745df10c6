"""Answer extraction and exact match for generated text (pure string functions).

Two protocols live here:

- OLMES GSM8K: the last number of the text (commas inside numbers removed), compared
  after the task's `regexes_to_ignore` and lower-casing (`extract_last_number`,
  `GSM8K_IGNORE`).
- lm-evaluation-harness `regex` filter + `take_first`: the first match of a pattern,
  stripped, or a fallback (`regex_extract`; BBH uses `BBH_ANSWER`).

`exact_match` is the HF-evaluate/lm-eval `exact_match` for one prediction: apply each
regex in `regexes_to_ignore` (re.sub with "") to both sides, then optionally lower-case
and drop ASCII punctuation, then compare the strings.
"""

from __future__ import annotations

import re
import string
from typing import Sequence

# OLMES gsm8k: `re.sub(r"(\d),(\d)", r"\1\2", text)` then the last of these matches.
_DIGIT_COMMA_DIGIT = re.compile(r"(\d),(\d)")
_NUMBER = re.compile(r"[-+]?\d*\.\d+|\d+")

#: OLMES / lm-eval GSM8K `regexes_to_ignore`, applied in this order
GSM8K_IGNORE: tuple[str, ...] = (",", "\\$", "(?s).*#### ", "\\.$")

#: lm-eval 0.4.13 `bbh_cot_fewshot` filter "get-answer"
BBH_ANSWER = r"(?<=the answer is )(.*)(?=.)"

#: lm-eval RegexFilter's value when the pattern does not match
REGEX_FALLBACK = "[invalid]"

_PUNCTUATION = str.maketrans("", "", string.punctuation)


def extract_last_number(text: str) -> str:
    r"""Return the last number in `text` (OLMES GSM8K), or the whole text when it has none.

    Commas between digits are removed first ("1,234" -> "1234"). A minus sign is kept
    only before a decimal ("-0.5"); before an integer it is not part of the match
    ("-7" -> "7"), exactly as OLMES's pattern `[-+]?\d*\.\d+|\d+` behaves.
    """
    output = _DIGIT_COMMA_DIGIT.sub(r"\1\2", text)
    numbers = _NUMBER.findall(output)
    return numbers[-1] if numbers else output


def gsm8k_gold(answer: str) -> str:
    """Return GSM8K's short gold answer: the text after the last `####`, stripped.

    It is then cleaned like a prediction (`extract_last_number`).
    """
    return extract_last_number(answer.split("####")[-1].strip())


def normalize_for_match(text: str, *, regexes_to_ignore: Sequence[str] = (),
                        ignore_case: bool = False, ignore_punctuation: bool = False) -> str:
    """One side of `exact_match` after its normalisation steps, in lm-eval's order."""
    for pattern in regexes_to_ignore:
        text = re.sub(pattern, "", text)
    if ignore_case:
        text = text.lower()
    if ignore_punctuation:
        text = text.translate(_PUNCTUATION)
    return text


def exact_match(prediction: str, reference: str, *, regexes_to_ignore: Sequence[str] = (),
                ignore_case: bool = False, ignore_punctuation: bool = False) -> bool:
    """Whether prediction and reference are equal after the same normalisation."""
    def normal(text: str) -> str:
        return normalize_for_match(text, regexes_to_ignore=regexes_to_ignore, ignore_case=ignore_case,
                                   ignore_punctuation=ignore_punctuation)

    return normal(prediction) == normal(reference)


def gsm8k_match(prediction: str, gold: str) -> bool:
    """OLMES GSM8K correctness of an extracted answer against the cleaned gold."""
    return exact_match(prediction, gold, regexes_to_ignore=GSM8K_IGNORE, ignore_case=True)


def regex_extract(text: str, pattern: str, *, group_select: int = 0,
                  fallback: str = REGEX_FALLBACK) -> str:
    """lm-eval's `regex` filter on one response followed by `take_first`.

    `re.findall` over the text; the `group_select`-th match (0 = first, -1 = last); a
    match with several groups becomes its first non-empty group; the result is
    stripped. No match (or only empty groups) gives `fallback`.
    """
    matches = re.findall(pattern, text)
    if not matches:
        return fallback
    match = matches[group_select]
    if isinstance(match, tuple):
        non_empty = [m for m in match if m]
        if not non_empty:
            return fallback
        match = non_empty[0]
    return match.strip()
