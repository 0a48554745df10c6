"""SocialIQA (`allenai/social_i_qa`): OLMES MC/RC prompts, ATOMIC reasoning types.

Specs (OLMES task configs): `:mc::olmes` / `:rc::olmes` = validation, 1,000 docs
sampled with seed 1234, primary acc_raw / acc_per_char; `:mc::xlarge` = validation
then train (35,364 docs), 10,000 sampled, acc_raw; `:rc::xlarge` = the same 10,000 docs,
RC prompts, acc_per_char (allenai/olmes oe_eval/configs/tasks.py). native_id = row index
within its own split, so xlarge repeats native ids (query ids disambiguate by doc_id).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import choice_prompt
from proctor.tasks.reasoning_types import reasoning_type

DATASET = "allenai/social_i_qa"
FEWSHOT = "OLMES:social_i_qa"


class SocialIQATask(ChoiceTask):
    """SocialIQA as OLMES runs it, MC or RC over three answers; each doc gets its ATOMIC reasoning type."""

    splits = ("validation", "train")

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, None, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's SocialIQA few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out context and question with the three answers; the 1-based label becomes an index."""
        question = row["context"] + " " + row["question"]
        options = (row["answerA"], row["answerB"], row["answerC"])
        text = choice_prompt(question, options, self.is_mc)
        return Rendered(text=text, options=options, gold=int(row["label"]) - 1)

    def row_metadata(self, row: dict) -> dict:
        """Return a row's reasoning type and its cluster: the questions asked of one context."""
        # questions asked of one context passage are one cluster (the context's digest names it)
        passage = hashlib.sha256(row["context"].encode("utf-8")).hexdigest()[:12]
        return {"reasoning_type": reasoning_type(row["question"], row["context"]), "cluster": f"context:{passage}"}


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC :olmes configs (their other sizes: `proctor.tasks.olmes_sizes`)."""
    def cfg(name: str, split: str, limit: int, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="socialiqa", dataset_path=DATASET, dataset_name=None,
                          split=split, num_shots=5, primary_metric=metric, sample_limit=limit,
                          fewshot_source=FEWSHOT)

    return {
        "socialiqa:mc::olmes": cfg("socialiqa:mc::olmes", "validation", 1000, "acc_raw"),
        "socialiqa:rc::olmes": cfg("socialiqa:rc::olmes", "validation", 1000, "acc_per_char"),
    }


TASK_CLASS = SocialIQATask
