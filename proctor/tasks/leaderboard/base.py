"""The shape every lm-eval multiple-choice task shares: rows → prompts → loglikelihood requests.

A family says where its rows are and how lm-eval's YAML reads one (`text`, `choices`,
`gold`); this class lays the prompt out as lm-eval 0.4.13's `fewshot_context` does:

    description + Σ(shot text + " " + shot answer + "\\n\\n") + doc text

with one request per choice, continuation = " " + choice text (the target delimiter).
"""

from __future__ import annotations

import random
from abc import abstractmethod
from pathlib import Path
from typing import Any, Optional

from proctor.errors import UserError
from proctor.tasks.base import Instance, Task, assign_query_ids
from proctor.tasks.leaderboard.fewshot import FEWSHOT_SEED, first_n, sample_random

TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"


class HarnessTask(Task):
    """lm-eval `output_type: multiple_choice` with its default delimiters."""

    #: lm-eval's fewshot_config.sampler: "default" (seeded random draws) or "first_n"
    sampler: str = "default"
    #: lm-eval hands the eval doc to the sampler (to be excluded) when its few-shot split
    #: equals its test split; for HellaSwag both are None
    excludes_eval_doc: bool = False

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

    def description(self) -> str:
        return ""

    def native_id(self, row: dict, index: int) -> Any:
        return index

    def row_metadata(self, row: dict) -> dict:
        return {}

    # ---- the protocol -----------------------------------------------------------

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        return [{**row, "native_id": self.native_id(row, i), "split": self.config.split}
                for i, row in enumerate(self.rows(data_dir, self.config.split))]

    def fewshot_pool(self, data_dir: Optional[Path]) -> list[dict]:
        split = self.shots_split
        if split is None:
            raise UserError(f"{self.config.name}: no few-shot split to draw "
                            f"{self.config.num_shots} shots from")
        return self.rows(data_dir, split)

    def shot_block(self, row: dict) -> str:
        return self.text(row) + TARGET_DELIMITER + self.choices(row)[self.gold(row)] + FEWSHOT_DELIMITER

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[Instance]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise UserError(f"--limit must be a positive integer, got {limit!r}")
        rows = self.rows(data_dir, self.config.split)
        native = [self.native_id(row, i) for i, row in enumerate(rows)]
        qids, _ = assign_query_ids(self.config.name, native)
        n = self.config.num_shots
        pool = self.fewshot_pool(data_dir) if n else []
        rnd = random.Random(FEWSHOT_SEED)
        out = []
        for doc_id, row in enumerate(rows[:limit]):
            eval_doc = row if self.excludes_eval_doc else None
            if self.sampler == "first_n":
                shots = first_n(pool, n, eval_doc)
            else:
                shots = sample_random(rnd, pool, n, eval_doc)
            options = self.choices(row)
            gold = self.gold(row)
            if not 0 <= gold < len(options):
                raise UserError(f"{self.config.name} doc {native[doc_id]!r}: gold index {gold} "
                                f"is not one of its {len(options)} choices")
            out.append(Instance(
                query_id=qids[doc_id],
                task=self.config.name,
                doc_id=doc_id,
                native_id=native[doc_id],
                prompt=self.description() + "".join(self.shot_block(s) for s in shots) + self.text(row),
                choices=tuple(options),
                continuations=tuple(TARGET_DELIMITER + c for c in options),
                label=gold,
                metadata={"benchmark": self.config.benchmark, "subject": self.config.subject,
                          "reasoning_type": None, "split": self.config.split,
                          "scoring": "lm_eval", **self.row_metadata(row)},
            ))
        return out
