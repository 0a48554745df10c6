"""The factual-recall probe (spec: ../shared/spec/factual.md, seed factual-probe-output-schema.txt).

Build a query bank from real facts (`build_bank`), generate with the seed's protocol
(`generate`) or bring generations from another stack (`validate_generations`), score them
(`score_generations`), extract last-token hidden states (`extract_hidden`), and compute ISS
and KTS per condition (`compute_iss`, `compute_kts`). `proctor factual ...` runs each step.
"""

from proctor.factual.bank import Bank, build_bank, read_bank, write_bank
from proctor.factual.generate import generate
from proctor.factual.hidden import HiddenStates, extract_hidden, load_hidden
from proctor.factual.iss import compute_iss
from proctor.factual.kts import compute_kts
from proctor.factual.prompts import CONDITION_FAMILIES, DECODING, PROMPT, build_prompt, condition_of
from proctor.factual.score import score_generations, summaries
from proctor.factual.scorer import (
    LABELS,
    Score,
    extract_span,
    normalise_forms,
    popqa_match,
    score_response,
    summarise,
)
from proctor.factual.validate import ValidationReport, read_jsonl, validate_generations

__all__ = [
    "Bank", "build_bank", "read_bank", "write_bank",
    "generate",
    "HiddenStates", "extract_hidden", "load_hidden",
    "compute_iss", "compute_kts",
    "CONDITION_FAMILIES", "DECODING", "PROMPT", "build_prompt", "condition_of",
    "score_generations", "summaries",
    "LABELS", "Score", "extract_span", "normalise_forms", "popqa_match", "score_response", "summarise",
    "ValidationReport", "read_jsonl", "validate_generations",
]
