"""HellaSwag 10-shot, lm-eval's `hellaswag` (Open LLM Leaderboard): acc, acc_norm.

lm-eval's process_docs: query = preprocess(activity_label + ": " + ctx_a + " " +
ctx_b.capitalize()), choices = preprocess(ending) each, where preprocess strips, turns
" [title]" into ". ", drops other [markup] and collapses double spaces (not OLMES's
regex). Eval docs = validation; shots are drawn from train, and because lm-eval's
few-shot and test splits are both unset it passes the eval doc to the sampler (11 draws
per doc, copies of the doc removed).

The local data directory has only the validation split (in a text form without
ctx_a/ctx_b, split back by proctor.data.local), so the 10 shots need the hub.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from proctor.data import load_split
from proctor.data.sources import resolve_data_dir
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.lm_eval.base import HarnessTask

DATASET = "Rowan/hellaswag"
SPEC = "hellaswag::leaderboard"


def preprocess(text: str) -> str:
    """lm-eval's hellaswag `preprocess` (tasks/hellaswag/utils.py)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


class HellaSwagLeaderboardTask(HarnessTask):
    """HellaSwag as the Open LLM Leaderboard runs it: 10 shots from train, the eval doc excluded."""

    shots_split = "train"
    excludes_eval_doc = True

    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split; train comes from the hub unless the data directory holds it."""
        root = resolve_data_dir(data_dir)
        if split == "train" and root is not None and not any(
                (root / "hellaswag" / f"hellaswag_train_full.txt{ext}").is_file() for ext in ("", ".bz2", ".gz")):
            raise UserError(f"the spec draws its {self.config.num_shots} shots from the HellaSwag "
                            f"train split, which is not in {root / 'hellaswag'} (it holds only validation); "
                            "add hellaswag_train_full.txt[.bz2|.gz] there, or omit --data-dir and "
                            "PROCTOR_DATA_DIR to load Rowan/hellaswag from the hub")
        return load_split(DATASET, None, split, data_dir)

    def text(self, row: dict) -> str:
        """Return lm-eval's query: activity label and context, preprocessed."""
        return preprocess(row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize())

    def choices(self, row: dict) -> list[str]:
        """Return the endings, preprocessed."""
        return [preprocess(e) for e in row["endings"]]

    def gold(self, row: dict) -> int:
        """Return the row's label as an index."""
        return int(row["label"])


def configs() -> dict[str, TaskConfig]:
    """Build the one spec's config."""
    return {SPEC: TaskConfig(name=SPEC, benchmark="hellaswag", dataset_path=DATASET,
                             dataset_name=None, split="validation", num_shots=10,
                             primary_metric="acc_norm",
                             fewshot_source="train split, lm-eval random sampler (seed 1234), "
                                            "eval doc excluded")}


TASK_CLASS = HellaSwagLeaderboardTask
