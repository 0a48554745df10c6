"""A task spec's protocol, as metrics.json records it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ChatFormat:
    """How a task lays its prompts out as chat messages (the model's template renders them)."""

    #: each few-shot example its own user and assistant turn (else all in one user message)
    fewshot_as_multiturn: bool = True
    #: OLMES's assistant_prefix: text the reply starts with, after the generation prompt
    assistant_prefix: str = ""


@dataclass(frozen=True)
class TaskConfig:
    """Everything that defines a task spec's protocol (recorded in metrics.json)."""

    name: str                       # full spec, e.g. "mmlu_abstract_algebra:mc::olmes"
    benchmark: str                  # sidecar `benchmark` column, e.g. "mmlu_stem", "socialiqa"
    dataset_path: str               # hub dataset id, e.g. "cais/mmlu"
    dataset_name: Optional[str]     # hub config, e.g. "abstract_algebra"
    split: str                      # "test", "validation", or "all"
    num_shots: int
    primary_metric: str             # "acc_raw", "acc_per_char", "acc_uncond", ...
    #: the spec's own document sampling: `random.Random(1234).sample` of this many (a float:
    #: this share) of the split's documents; perplexity specs: the corpus prefix's length
    sample_limit: Optional[float] = None
    fewshot_source: Optional[str] = None
    subject: Optional[str] = None   # MMLU subject
    # Examples the prompt really holds when that differs from num_shots: TruthfulQA's
    # lm-eval format is "0-shot" with a fixed 6-example QA primer in every prompt.
    effective_shots: Optional[int] = None
    limit: Optional[int] = None     # --limit: only the first N documents of the spec's list
    #: prompts as chat messages (--chat-template, or a chat variant such as OLMES's ::tulu);
    #: None: plain text
    chat: Optional[ChatFormat] = None
    #: lm-eval's --system_instruction: a system text before the description
    system_instruction: Optional[str] = None
    #: generation tasks: (opening, closing) tags of reasoning spans removed before the
    #: answer is read (--think-tags); None: answers are read from the whole text
    think_tags: Optional[tuple[str, str]] = None

    @classmethod
    def from_dict(cls, entry: dict) -> "TaskConfig":
        """Rebuild a config from metrics.json's `task_config` (written by `dataclasses.asdict`)."""
        chat, tags = entry.get("chat"), entry.get("think_tags")
        return cls(**{**entry, "chat": ChatFormat(**chat) if isinstance(chat, dict) else chat,
                      "think_tags": tuple(tags) if isinstance(tags, list) else tags})

    def needs(self, field: str) -> str:
        """Return an optional text field this task's family always sets (subject, fewshot_source, ...)."""
        value = getattr(self, field)
        if not isinstance(value, str):
            raise ValueError(f"{self.name}: its config has no {field}")
        return value
