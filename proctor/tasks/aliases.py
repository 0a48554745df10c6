"""The task names lm-evaluation-harness users type, resolved to proctor specs of the same protocol.

`proctor run --tasks hellaswag` runs what `lm_eval --tasks hellaswag` runs: the spec of
lm-eval's format (`hellaswag::leaderboard`) with the shots lm-eval's task defaults to (the
YAML's `num_fewshot`, 0 where it sets none). The `::leaderboard` specs carry the Open LLM
Leaderboard's shots (ARC 25, HellaSwag 10, MMLU 5); lm-eval's own tasks of those names
are 0-shot, so their names resolve with 0 shots. An explicit --num-fewshot replaces an
alias's shots, as lm-eval's --num_fewshot replaces the YAML's.

Each alias was compared with lm-eval 0.4.13's task file (lm_eval/tasks/<file>): dataset
and split, doc_to_text / doc_to_target / doc_to_choice, description, delimiters, sampler,
generation settings, filters and metrics, and a group's aggregation. Where proctor's spec
still differs, the alias says how (`Alias.differs`, shown by `registry.alias_note`). Not offered:
lm-eval names proctor has no spec of the same format for (`arc_easy`, `ai2_arc`,
`truthfulqa` with its generation task, `gsm8k_cot`, `humaneval_instruct`,
`humaneval_plus`, the `leaderboard_*` tasks of the Open LLM Leaderboard v2).

Proctor's own specs and suites win over an alias of the same name (registry.resolve looks
them up first).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from proctor.tasks import bbh
from proctor.tasks.lm_eval import (
    arc as lb_arc,
    bigbench as lb_bigbench,
    gsm8k as lb_gsm8k,
    hellaswag as lb_hellaswag,
    mmlu as lb_mmlu,
)
from proctor.tasks.mmlu import SUBJECTS


@dataclass(frozen=True)
class Alias:
    """An lm-eval task or group name and the proctor spec of its protocol."""

    name: str                   # lm-eval's task or group name
    spec: str                   # the proctor spec (task or suite) it resolves to
    shots: int                  # lm-eval's default num_fewshot: every leaf task runs with it
    yaml: str                   # the lm-eval task file it was checked against (under lm_eval/tasks)
    note: str                   # one line: how lm-eval's task maps onto the spec
    differs: str = ""           # what still differs from lm-eval ("" where nothing does)


def _mmlu() -> list[Alias]:
    """List `mmlu`, its four category groups and 57 subjects: 0-shot (the template sets no num_fewshot).

    The groups weight by size, as the `::leaderboard` suites' micro headline.
    """
    zero = "lm-eval's default is 0-shot; the ::leaderboard spec alone is the leaderboard's 5-shot"
    out = [Alias("mmlu", "mmlu::leaderboard", 0, "mmlu/default/_mmlu.yaml", zero)]
    for category in lb_mmlu.CATEGORIES:
        out.append(Alias(category, f"{category}::leaderboard", 0, f"mmlu/default/_{category}.yaml", zero))
    for subject in SUBJECTS:
        out.append(Alias(f"mmlu_{subject}", lb_mmlu.spec(subject), 0, f"mmlu/default/mmlu_{subject}.yaml", zero))
    return out


def _bbh() -> list[Alias]:
    """List lm-eval's groups `bbh_cot_fewshot` and `bbh`, and each `bbh_cot_fewshot_<task>`: 3-shot.

    The `bbh` group (bbh/cot_fewshot/_bbh.yaml) has the same 27 tasks and the same size-weighted mean.
    """
    out = [Alias(group, bbh.SUITE, 3, f"bbh/cot_fewshot/{file}", "lm-eval's group, mean over all docs")
           for group, file in (("bbh_cot_fewshot", "_bbh_cot_fewshot.yaml"), ("bbh", "_bbh.yaml"))]
    for task in bbh.TASKS:
        out.append(Alias(f"bbh_cot_fewshot_{task}", bbh.spec_name(task), 3, f"bbh/cot_fewshot/{task}.yaml",
                         "3-shot chain of thought, exact match of the 'get-answer' filter"))
    return out


def _bigbench() -> list[Alias]:
    """`bigbench_<task>_multiple_choice` (bigbench/multiple_choice/<task>.yaml): 0-shot acc."""
    out = []
    for task, (source, _) in lb_bigbench.TASKS.items():
        local = ("" if source == "task.json" else
                 "from a local data directory its rows are llm-foundry's conversion of the task "
                 "(their own wording), not hails/bigbench's; from the hub they are hails/bigbench's")
        out.append(Alias(f"bigbench_{task}_multiple_choice", lb_bigbench.spec(task), 0,
                         f"bigbench/multiple_choice/{task}.yaml", "0-shot multiple choice; lm-eval's acc is acc_raw",
                         differs=local))
    return out


@lru_cache(maxsize=1)
def _table() -> dict[str, Alias]:
    rows = [
        Alias("hellaswag", lb_hellaswag.SPEC, 0, "hellaswag/hellaswag.yaml",
              "lm-eval's default is 0-shot; the ::leaderboard spec alone is the leaderboard's 10-shot",
              differs="from a local data directory its rows are llama.cpp's plain-text conversion (markup "
                      "already stripped), not Rowan/hellaswag's, so a prompt can differ; from the hub they agree"),
        Alias("arc_challenge", lb_arc.SPEC, 0, "arc/arc_challenge.yaml",
              "lm-eval's default is 0-shot; the ::leaderboard spec alone is the leaderboard's 25-shot"),
        *_mmlu(),
        Alias("truthfulqa_mc1", "truthfulqa_mc1::leaderboard", 0, "truthfulqa/truthfulqa_mc1.yaml",
              "0-shot, with lm-eval's 6-example QA primer in every prompt"),
        Alias("truthfulqa_mc2", "truthfulqa_mc2::leaderboard", 0, "truthfulqa/truthfulqa_mc2.yaml",
              "0-shot, with lm-eval's 6-example QA primer; lm-eval's `acc` is proctor's mc2"),
        Alias("gsm8k", lb_gsm8k.SPEC, 5, "gsm8k/gsm8k.yaml",
              "strict-match and flexible-extract exact match; strict-match is the primary"),
        *_bbh(),
        Alias("humaneval", "humaneval::greedy", 0, "humaneval/humaneval.yaml", "greedy pass@1"),
        Alias("humaneval_64", "humaneval::n64", 0, "humaneval/humaneval_64.yaml",
              "64 samples; lm-eval reports pass@2..64, proctor those and pass_at_1 (its primary)"),
        *_bigbench(),
    ]
    return {a.name: a for a in rows}


def lookup(name: str) -> Optional[Alias]:
    """Return the alias of that lm-eval name, if there is one (whether or not a spec shadows it)."""
    return _table().get(name.strip())


def all_aliases() -> list[Alias]:
    """Every alias, by name."""
    return [a for _, a in sorted(_table().items())]


def describe(alias: Alias, num_fewshot: Optional[int] = None) -> str:
    """Describe an alias in one line: "hellaswag → hellaswag::leaderboard (0-shot, lm-eval's default)".

    The line ends with what still differs from lm-eval, if anything.
    """
    shots = (f"{num_fewshot}-shot, --num-fewshot" if num_fewshot is not None
             else f"{alias.shots}-shot, lm-eval's default")
    line = f"{alias.name} → {alias.spec} ({shots})"
    return f"{line}; differs from lm-eval: {alias.differs}" if alias.differs else line
