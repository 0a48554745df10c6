"""WinoGrande (`allenai/winogrande`, config `winogrande_xl`): OLMES MC prompts and RC partial evaluation.

Specs (allenai/olmes oe_eval/configs/tasks.py): `winogrande:mc::olmes` / `winogrande:rc::olmes`
= every validation doc (1,267, no sampling), 5 shots from OLMES:winogrande, primary acc_raw.

MC: "Fill in the blank: " + the sentence with its blank `_` shown as `___`, the two options
lettered A/B, then "Answer:". RC is partial evaluation (Trinh & Le 2018, as lm-eval's
WinoGrande): each option's context is the sentence up to the blank with that option filled
in, and both are continued by the rest of the sentence, `" " + rest.strip()`; a few-shot
example reads the gold option's context then that continuation, and no unconditioned requests
are made. native_id = the row's index in its split: OLMES's MC export carries it; its RC export
carries none (its RC config names no native id field), so proctor's RC records keep the MC ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot, load_split
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_mcq_prompt

DATASET = "allenai/winogrande"
CONFIG = "winogrande_xl"
FEWSHOT = "OLMES:winogrande"
BLANK = "_"
MC_BLANK = "___"
MC_QUESTION_PREFIX = "Fill in the blank: "
ANSWERS = ("1", "2")


def split_at_blank(row: dict) -> tuple[str, str]:
    """Return the sentence before its blank and after it; a sentence without exactly one blank is refused."""
    sentence = row["sentence"]
    if sentence.count(BLANK) != 1:
        raise UserError(f"WinoGrande item {sentence!r} has {sentence.count(BLANK)} blanks ({BLANK!r}); "
                        "it needs exactly one")
    before, _, after = sentence.partition(BLANK)
    return before, after


class WinoGrandeTask(ChoiceTask):
    """WinoGrande as OLMES runs it: MC over the two options, or RC by partial evaluation."""

    splits = ("validation", "train")   # the hub's test split has no answers

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, CONFIG, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's WinoGrande few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay a row out as OLMES's MC query, or as one partial context per option and the rest of the sentence."""
        options = (row["option1"], row["option2"])
        if row["answer"] not in ANSWERS:
            raise UserError(f"WinoGrande item {row['sentence']!r}: answer {row['answer']!r} is not 1 or 2 "
                            "(an unlabelled split?)")
        gold = ANSWERS.index(row["answer"])
        before, after = split_at_blank(row)
        if self.is_mc:
            text = make_mcq_prompt(before + MC_BLANK + after, options, question_prefix=MC_QUESTION_PREFIX)
            return Rendered(text=text, options=options, gold=gold)
        texts = tuple(before + option for option in options)
        return Rendered(text=texts[gold], options=options, gold=gold, choice_texts=texts,
                        continuation=" " + after.strip())


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC :olmes configs: all validation docs, primary acc_raw for both."""
    def cfg(name: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="winogrande", dataset_path=DATASET, dataset_name=CONFIG,
                          split="validation", num_shots=5, primary_metric="acc_raw",
                          fewshot_source=FEWSHOT)

    return {"winogrande:mc::olmes": cfg("winogrande:mc::olmes"),
            "winogrande:rc::olmes": cfg("winogrande:rc::olmes")}


TASK_CLASS = WinoGrandeTask
