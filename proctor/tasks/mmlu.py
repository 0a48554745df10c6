"""MMLU (`cais/mmlu`): 57 subjects, test split, 5 shots = first 5 dev rows, OLMES prompts.

`mmlu_<subject>:mc::tulu` is OLMES's chat variant (allenai/olmes oe_eval/configs/tasks.py,
`mmlu_{sub}:mc::tulu`): the same task with `use_chat_format` and, from its chat_overrides,
`fewshot_as_multiturn` — each shot a user turn ending "Answer:" and an assistant turn
holding the gold letter, continuations "A".."D" without a leading space; suite
`mmlu:mc::tulu` is the macro mean over the 57 subjects (task_suites.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.config import ChatFormat
from proctor.tasks.prompts import choice_prompt

DATASET = "cais/mmlu"

CATEGORIES: dict[str, tuple[str, ...]] = {
    "mmlu_stem": (
        "abstract_algebra", "astronomy", "college_biology", "college_chemistry",
        "college_computer_science", "college_mathematics", "college_physics",
        "computer_security", "conceptual_physics", "electrical_engineering",
        "elementary_mathematics", "high_school_biology", "high_school_chemistry",
        "high_school_computer_science", "high_school_mathematics", "high_school_physics",
        "high_school_statistics", "machine_learning",
    ),
    "mmlu_social_sciences": (
        "econometrics", "high_school_geography", "high_school_government_and_politics",
        "high_school_macroeconomics", "high_school_microeconomics", "high_school_psychology",
        "human_sexuality", "professional_psychology", "public_relations", "security_studies",
        "sociology", "us_foreign_policy",
    ),
    "mmlu_humanities": (
        "formal_logic", "high_school_european_history", "high_school_us_history",
        "high_school_world_history", "international_law", "jurisprudence",
        "logical_fallacies", "moral_disputes", "moral_scenarios", "philosophy", "prehistory",
        "professional_law", "world_religions",
    ),
    "mmlu_other": (
        "anatomy", "business_ethics", "clinical_knowledge", "college_medicine", "global_facts",
        "human_aging", "management", "marketing", "medical_genetics", "miscellaneous",
        "nutrition", "professional_accounting", "professional_medicine", "virology",
    ),
}

# The sidecar `benchmark` column; "mmlu_social_science" is the seed's own spelling.
BENCHMARK = {"mmlu_stem": "mmlu_stem", "mmlu_social_sciences": "mmlu_social_science",
             "mmlu_humanities": "mmlu_humanities", "mmlu_other": "mmlu_other"}

SUBJECTS: tuple[str, ...] = tuple(sorted(s for subs in CATEGORIES.values() for s in subs))
CATEGORY_OF: dict[str, str] = {s: cat for cat, subs in CATEGORIES.items() for s in subs}


class MMLUTask(ChoiceTask):
    """One MMLU subject as OLMES runs it, MC or RC, its shots the first rows of the dev split."""

    splits = ("test", "validation")
    fewshot_split = "dev"

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split of the subject's rows."""
        return load_split(DATASET, self.config.subject, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the subject's dev rows."""
        # OLMES: the first num_shots rows of the dev split in its original order, never sampled
        return load_split(DATASET, self.config.subject, "dev", data_dir)

    def description(self) -> str:
        """Return OLMES's MMLU description, naming the subject."""
        subject = self.config.needs("subject").replace("_", " ")
        return f"The following are multiple choice questions (with answers) about {subject}.\n\n"

    def render(self, row: dict) -> Rendered:
        """Lay a row out as an MC prompt with lettered choices, or as a cloze prompt for RC."""
        choices = tuple(row["choices"])
        text = choice_prompt(row["question"], choices, self.is_mc)
        return Rendered(text=text, options=choices, gold=int(row["answer"]))


def configs() -> dict[str, TaskConfig]:
    """Build each subject's :mc::olmes, :rc::olmes and :mc::tulu configs."""
    out = {}
    for subject in SUBJECTS:
        for fmt, metric in (("mc", "acc_raw"), ("rc", "acc_per_char")):
            name = f"mmlu_{subject}:{fmt}::olmes"
            out[name] = TaskConfig(
                name=name, benchmark=BENCHMARK[CATEGORY_OF[subject]], dataset_path=DATASET,
                dataset_name=subject, split="test", num_shots=5, primary_metric=metric,
                fewshot_source="mmlu:dev", subject=subject)
        name = tulu_spec(subject)
        out[name] = TaskConfig(
            name=name, benchmark=BENCHMARK[CATEGORY_OF[subject]], dataset_path=DATASET,
            dataset_name=subject, split="test", num_shots=5, primary_metric="acc_raw",
            fewshot_source="mmlu:dev", subject=subject, chat=ChatFormat(fewshot_as_multiturn=True))
    return out


def tulu_spec(subject: str) -> str:
    """Return the spec name of a subject's chat variant: `mmlu_<subject>:mc::tulu`."""
    return f"mmlu_{subject}:mc::tulu"


TASK_CLASS = MMLUTask
