"""The factual-recall probe (spec: ../shared/spec/factual.md, seed factual-probe-output-schema.txt).

Build a query bank from real facts (`build_bank`), generate with the seed's protocol
(`generate`) or bring generations from another stack (`validate_generations`), score them
(`score_generations`), extract last-token hidden states (`extract_hidden`), and compute ISS
and KTS per condition (`compute_iss`, `compute_kts`). `proctor factual ...` runs each step.

Names are imported on first use, as in `proctor.backends`, so registering the
`proctor factual` command costs every `proctor` command nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_MODULES = {
    "bank": ("Bank", "build_bank", "read_bank", "write_bank"),
    "generate": ("factual_request", "generate"),
    "hidden": ("HiddenStateFiles", "extract_hidden", "load_hidden"),
    "iss": ("compute_iss",),
    "kts": ("compute_kts",),
    "prompts": ("CONDITION_FAMILIES", "DECODING", "PROMPT", "build_prompt", "condition_of"),
    "score": ("score_generations", "summaries"),
    "scorer": ("LABELS", "Score", "extract_span", "normalise_forms", "popqa_match", "score_response",
               "summarise"),
    "validate": ("ValidationReport", "read_jsonl", "validate_generations"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}
__all__ = list(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"proctor.factual.{_HOME[name]}"), name)
    raise AttributeError(f"module 'proctor.factual' has no attribute {name!r}")
