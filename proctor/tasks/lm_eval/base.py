r"""The shape every lm-eval multiple-choice task shares: rows → prompts → loglikelihood requests.

A family says where its rows are and how lm-eval's YAML reads one (`text`, `choices`,
`gold`); this class lays the prompt out as lm-eval 0.4.13's `fewshot_context` does
(`proctor.tasks.lm_eval.context`):

    description + Σ(shot text + " " + shot answer + "\n\n") + doc text

with one request per choice, continuation = " " + choice text (the target delimiter). In
chat format (`TaskConfig.chat`, lm-eval's --apply_chat_template) the prompt is a chat and
the continuation the bare choice text. Requests follow lm-eval's tokenization policy.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from pathlib import Path
from typing import Optional, Sequence

from proctor.errors import UserError
from proctor.metrics.harness import lm_eval_choice_metrics
from proctor.outputs.records import ChoiceOutput
from proctor.requests import Context
from proctor.tasks.base import Instance, about, check_limit, number_docs
from proctor.tasks.choice import RankedChoiceTask
from proctor.tasks.lm_eval.context import choice_delimiter, fewshot_context
from proctor.tasks.lm_eval.fewshot import FEWSHOT_SEED, first_n, sample_random

TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"


class HarnessTask(RankedChoiceTask):
    """lm-eval `output_type: multiple_choice` with its default delimiters."""

    supports_chat = True
    supports_system_instruction = True

    #: lm-eval's fewshot_config.sampler: "default" (seeded random draws) or "first_n"
    sampler: str = "default"
    #: lm-eval hands the eval doc to the sampler (to be excluded) when its few-shot split
    #: equals its test split; for HellaSwag both are None
    excludes_eval_doc: bool = False

    def extra_metrics(self, inst: Instance, choices: Sequence[ChoiceOutput]) -> dict[str, float]:
        """lm-eval's acc_norm (and TruthfulQA's mc2, for documents with a set of true answers)."""
        return lm_eval_choice_metrics([c.sum_logits for c in choices], inst.choices, inst.label,
                                      inst.metadata.get("true_choices"))

    # ---- what a family provides -------------------------------------------------

    @abstractmethod
    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Hub-shaped rows of one split, in dataset order (after lm-eval's process_docs)."""

    @abstractmethod
    def text(self, row: dict) -> str:
        """lm-eval's doc_to_text."""

    @abstractmethod
    def choices(self, row: dict) -> list[str]:
        """lm-eval's doc_to_choice."""

    @abstractmethod
    def gold(self, row: dict) -> int:
        """lm-eval's doc_to_target, as an index into `choices`."""

    #: the split shots are drawn from (lm-eval: fewshot_split, else train, else validation)
    shots_split: Optional[str] = None

    # ---- the protocol -----------------------------------------------------------

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the spec's split as docs, in dataset order."""
        return self.as_docs(self.rows(data_dir, self.config.split), self.config.split)

    def fewshot_pool(self, data_dir: Optional[Path]) -> list[dict]:
        """Return the rows shots are drawn from: at least num_shots of them.

        One more when the eval doc is excluded; fewer is a UserError: a prompt never holds fewer
        shots than the spec says.
        """
        n, split = self.config.num_shots, self.shots_split
        if split is None:
            raise UserError(f"no few-shot split to draw {n} shots from")
        pool = self.rows(data_dir, split)
        if len(pool) < n + self.excludes_eval_doc:
            raise UserError(f"the spec needs {n} few-shot examples from the {split} split, which "
                            f"has only {len(pool)} rows")
        return pool

    def shot(self, row: dict) -> tuple[str, str]:
        """Return a few-shot example as (question, answer) texts."""
        return self.text(row), self.choices(row)[self.gold(row)]

    def context(self, shots: Sequence[dict], doc: dict) -> Context:
        """Lay out a doc's prompt after its shots as lm-eval's `fewshot_context` does."""
        c = self.config
        return fewshot_context(self.description(), [self.shot(s) for s in shots], self.text(doc),
                               target_delimiter=TARGET_DELIMITER, fewshot_delimiter=FEWSHOT_DELIMITER,
                               system_instruction=c.system_instruction, chat=c.chat)

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[Instance]:
        """Build one `Instance` per document, its shots drawn as lm-eval's sampler draws them."""
        check_limit(limit)  # before any data is read
        with about(self.config.name):
            return self._instances(data_dir, limit)

    def _instances(self, data_dir: Optional[Path], limit: Optional[int]) -> list[Instance]:
        rows = self.rows(data_dir, self.config.split)
        numbered = number_docs(self.config.name, self.as_docs(rows, self.config.split), limit)
        n = self.config.num_shots
        pool = self.fewshot_pool(data_dir) if n else []
        rnd = random.Random(FEWSHOT_SEED)
        delimiter = choice_delimiter(TARGET_DELIMITER, None, self.config.chat)
        out = []
        for doc_id, doc, qid in numbered:
            # lm-eval drops copies of the eval doc from its shots by comparing the plain rows
            eval_doc = rows[doc_id] if self.excludes_eval_doc else None
            if self.sampler == "first_n":
                shots = first_n(pool, n, eval_doc)
            else:
                shots = sample_random(rnd, pool, n, eval_doc)
            options = self.choices(doc)
            gold = self.gold(doc)
            if not 0 <= gold < len(options):
                raise UserError(f"doc {doc['native_id']!r}: gold index {gold} is not one of its "
                                f"{len(options)} choices")
            out.append(Instance(
                query_id=qid,
                task=self.config.name,
                doc_id=doc_id,
                native_id=doc["native_id"],
                prompt=self.context(shots, doc),
                choices=tuple(options),
                continuations=tuple(delimiter + c for c in options),
                label=gold,
                metadata=self.doc_metadata(doc),
                policy="lm_eval",
            ))
        return out
