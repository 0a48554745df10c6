"""The factual-recall probe: prompt protocol, checks of external generations, scoring.

Spec: ../shared/spec/factual.md and the seed factual-probe-output-schema.txt. The query
bank builder, generation, hidden states, ISS and KTS are still to come (issue 6).
"""

from proctor.factual.prompts import DECODING, PROMPT, build_prompt
from proctor.factual.validate import ValidationReport, validate_generations

from proctor.factual.scorer import (
    LABELS,
    Score,
    extract_span,
    normalise_forms,
    popqa_match,
    score_response,
    summarise,
)

__all__ = [
    "DECODING",
    "PROMPT",
    "ValidationReport",
    "build_prompt",
    "validate_generations",
    "LABELS",
    "Score",
    "extract_span",
    "normalise_forms",
    "popqa_match",
    "score_response",
    "summarise",
]
