"""The factual probe's prompt and decoding protocol (seed: factual-probe-output-schema.txt).

Anchor queries get the instruction wrapper; every other family already carries its own
surface form (that is the perturbation), so it gets only a bare `Answer:` cue. No chat
template, for base and instruct models alike.

Beyond the seed, `--chat-template` gives each query's `build_prompt(row)` as one user turn
rendered with a chat template and its generation prompt (`generate.factual_request`: the
engine renders it). The rendered text carries its own special tokens, so it is tokenized
without the tokenizer's (as `apply_chat_template(tokenize=True)` does), and left truncation
to `max_prompt_len` cuts the rendered text. Rows and headers record the template as
`{"origin", "digest"}` (`template_record`); no record means the seed's protocol, and
numbers made with a template are not comparable with the seed's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:  # validate and score read records without importing the engine
    from proctor.engine.chat import ChatTemplate

PROMPT = "Question: {q}\nAnswer with only the shortest correct answer.\nAnswer:"
CONDITION_FAMILIES = ("anchor", "paraphrase", "reverse", "recognition", "crosslingual")


def build_prompt(row: Mapping) -> str:
    """Build a row's prompt exactly as the seed's `runner/eval_run.py:build_prompt` does."""
    if row["condition_family"] == "anchor":
        return PROMPT.format(q=row["query"])
    return f"{row['query']}\nAnswer:"


def template_record(template: Optional[ChatTemplate]) -> Optional[dict[str, str]]:
    """Return what rows and headers record about the prompt format: None for the seed's protocol."""
    return None if template is None else {"origin": template.origin, "digest": template.digest}


def template_key(record: Any) -> str:
    """Return a comparable form of a recorded `chat_template` value (None, a record, or anything read)."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def describe_template(record: Any) -> str:
    """Describe a recorded `chat_template` value in words."""
    if record is None:
        return "no chat template (the seed's protocol)"
    if isinstance(record, Mapping):
        return f"chat template {record.get('origin')} (digest {record.get('digest')})"
    return f"chat template {record!r}"


def protocol_note(record: Any) -> Optional[str]:
    """Return the protocol difference a recorded chat template makes; None for the seed's protocol."""
    if record is None:
        return None
    return (f"protocol difference: prompts were rendered with {describe_template(record)} instead of the "
            "seed's no-template prompt; numbers are not comparable with the seed's protocol")


@dataclass(frozen=True)
class Decoding:
    """The seed's generation settings (`configs/models.yaml:generation`)."""

    max_new_tokens: int = 24
    max_prompt_len: int = 192     # left truncation, left padding
    num_beams: int = 1
    temperature: float = 0.0      # greedy
    dtype: str = "bfloat16"       # where the device supports it
    seed: int = 20260101


DECODING = Decoding()


def condition_of(row: Mapping) -> str:
    """Return the condition a query belongs to for ISS/KTS: its family, per language for crosslingual."""
    family = row["condition_family"]
    return f"crosslingual:{row['language']}" if family == "crosslingual" else family
