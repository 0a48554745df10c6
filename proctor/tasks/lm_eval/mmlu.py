r"""MMLU 5-shot in lm-eval's `mmlu` format (tasks/mmlu/default): acc.

Description "The following are multiple choice questions (with answers) about
{subject}.\n\n", doc "{question.strip()}\nA. ..\nB. ..\nC. ..\nD. ..\nAnswer:"
(no leading space before the letters, unlike OLMES), choices "A".."D", shots = the
first 5 dev rows in order (first_n sampler). lm-eval files anatomy under STEM (OLMES
under "other"), so its category groups (19/13/12/13 subjects) differ from OLMES's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.lm_eval.base import HarnessTask
from proctor.tasks.mmlu import BENCHMARK, CATEGORIES as OLMES_CATEGORIES, SUBJECTS

DATASET = "cais/mmlu"
LETTERS = ("A", "B", "C", "D")

# lm-eval's groups (the `tag` of each subject YAML): OLMES's, with anatomy moved to STEM
CATEGORIES: dict[str, tuple[str, ...]] = {
    cat: tuple(sorted(s for s in subs if s != "anatomy") + (["anatomy"] if cat == "mmlu_stem" else []))
    for cat, subs in OLMES_CATEGORIES.items()
}
CATEGORY_OF: dict[str, str] = {s: cat for cat, subs in CATEGORIES.items() for s in subs}


def spec(subject: str) -> str:
    """Return the spec name of a subject: `mmlu_<subject>::leaderboard`."""
    return f"mmlu_{subject}::leaderboard"


class MMLULeaderboardTask(HarnessTask):
    """One MMLU subject in lm-eval's format: the first 5 dev rows as shots, the letters as choices."""

    sampler = "first_n"
    shots_split = "dev"

    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split of the subject's rows."""
        return load_split(DATASET, self.config.subject, split, data_dir)

    def description(self) -> str:
        """Return lm-eval's MMLU description, naming the subject."""
        subject = self.config.needs("subject").replace("_", " ")
        return f"The following are multiple choice questions (with answers) about {subject}.\n\n"

    def text(self, row: dict) -> str:
        """Return the stripped question, a line per lettered option, then "Answer:"."""
        options = "".join(f"\n{letter}. {choice}" for letter, choice in zip(LETTERS, row["choices"]))
        return f"{row['question'].strip()}{options}\nAnswer:"

    def choices(self, row: dict) -> list[str]:
        """Return the letters A-D: the model chooses a letter."""
        return list(LETTERS)

    def gold(self, row: dict) -> int:
        """Return the row's answer index."""
        return int(row["answer"])


def configs() -> dict[str, TaskConfig]:
    """Build each subject's config."""
    return {spec(s): TaskConfig(name=spec(s), benchmark=BENCHMARK[CATEGORY_OF[s]],
                                dataset_path=DATASET, dataset_name=s, split="test", num_shots=5,
                                primary_metric="acc_raw", fewshot_source="dev split, first 5 in order",
                                subject=s)
            for s in SUBJECTS}


def suites() -> dict[str, tuple[str, ...]]:
    """Category suites and `mmlu::leaderboard` over the four categories (lm-eval's groups)."""
    out = {f"{cat}::leaderboard": tuple(spec(s) for s in subs) for cat, subs in CATEGORIES.items()}
    out["mmlu::leaderboard"] = tuple(f"{cat}::leaderboard" for cat in CATEGORIES)
    return out


TASK_CLASS = MMLULeaderboardTask
