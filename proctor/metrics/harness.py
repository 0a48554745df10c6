"""lm-evaluation-harness multiple-choice metrics that OLMES's normalisations do not cover.

- `acc_norm`: lm-eval divides each choice's log-likelihood by the character length of
  the choice text *without* the target delimiter (the leading space), so it is not
  proctor's `acc_per_char` (which counts the space) and can pick another choice.
- `mc2` (TruthfulQA MC2): the normalised probability mass of the true answers.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from proctor.metrics.choice import argmax


def acc_norm_index(lls: Sequence[float], choice_texts: Sequence[str]) -> int:
    """lm-eval's `pred_norm`: argmax of log-likelihood / len(choice text)."""
    if len(lls) != len(choice_texts) or not lls:
        raise ValueError(f"need one log-likelihood per choice, got {len(lls)} for {len(choice_texts)}")
    return argmax([ll / len(text) for ll, text in zip(lls, choice_texts)])


def mc2(lls: Sequence[float], true_mask: Sequence[bool]) -> float:
    """Probability mass of the true answers after normalising exp(ll) over all choices.

    Computed relative to the largest log-likelihood, so it equals lm-eval's
    `process_results_mc2` to rounding and stays finite where plain exp() would
    underflow every choice to 0 (lm-eval then returns nan).
    """
    if len(lls) != len(true_mask) or not lls:
        raise ValueError(f"need one log-likelihood per choice, got {len(lls)} for {len(true_mask)}")
    top = max(lls)
    weights = [math.exp(ll - top) for ll in lls]
    return math.fsum(w for w, t in zip(weights, true_mask) if t) / math.fsum(weights)


def lm_eval_choice_metrics(lls: Sequence[float], choice_texts: Sequence[str], label: int,
                           true_choices: Optional[Sequence[int]] = None) -> dict:
    """Per-doc `acc_norm` (and `mc2` when the doc has a set of true answers).

    With `true_choices` (MC2), `predicted_index_mc2` is the raw argmax and `is_correct`
    says whether it is one of the true answers.
    """
    norm = acc_norm_index(lls, choice_texts)
    out: dict = {"predicted_index_norm": norm, "acc_norm": float(norm == label)}
    if true_choices is not None:
        true = set(true_choices)
        raw = argmax(lls)
        out["mc2"] = mc2(lls, [i in true for i in range(len(lls))])
        out["predicted_index_mc2"] = raw
        out["is_correct"] = raw in true
    return out
