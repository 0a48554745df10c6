"""Every task spec and suite this process knows: the built-in ones and those added at run time.

Built-in specs come from the task family modules (each family's `configs()`), suites from
the tables below. Tasks added at run time (`proctor.tasks.plugins`: task files, `@task`
classes, entry points) are kept apart from the cached built-ins, so that adding one needs
no cache invalidation. Looking specs up, with installed plugins loaded first, is
`proctor.tasks.registry`'s job.
"""

from __future__ import annotations

from collections import ChainMap
from functools import lru_cache
from typing import Mapping, Optional

from proctor.errors import UserError
from proctor.tasks import (
    arc,
    basic_skills,
    bbh,
    bbh_olmes,
    boolq,
    copycolors,
    csqa,
    gsm8k,
    gsm8k_bpb,
    hellaswag,
    humaneval,
    humaneval_bpb,
    jeopardy,
    lab_bench,
    lambada,
    mbpp_bpb,
    medmcqa,
    medqa,
    minerva_bpb,
    mmlu,
    mt_mbpp,
    naturalqs,
    olmes_sizes,
    openbookqa,
    perplexity,
    piqa,
    reading_bpb,
    sciq,
    seed_suites,
    socialiqa,
    winogrande,
    yesno,
)
from proctor.tasks.base import Task, TaskConfig
from proctor.tasks.lm_eval import (
    arc as lb_arc,
    bigbench as lb_bigbench,
    hellaswag as lb_hellaswag,
    mmlu as lb_mmlu,
    truthfulqa as lb_truthfulqa,
)
from proctor.tasks.suite import Suite

FAMILIES = (mmlu, socialiqa, arc, hellaswag, boolq, csqa, openbookqa, piqa, winogrande, sciq, basic_skills, naturalqs,
            lambada, medmcqa, medqa, yesno, lab_bench, copycolors, jeopardy, reading_bpb, mt_mbpp, minerva_bpb, humaneval_bpb, mbpp_bpb, gsm8k_bpb, gsm8k, bbh,
            bbh_olmes,
            lb_arc, lb_hellaswag, lb_mmlu, lb_truthfulqa, lb_bigbench, humaneval, perplexity)

_added: dict[str, tuple[type[Task], TaskConfig]] = {}   # tasks added at run time (proctor.tasks.plugins)
_origin: dict[str, str] = {}     # added spec -> the file (or module) that defined it
_added_suites: dict[str, Suite] = {}   # suites added at run time (lm-eval's groups, proctor.harness)


@lru_cache(maxsize=1)
def builtin_tasks() -> dict[str, tuple[type[Task], TaskConfig]]:
    """Every built-in task spec: spec -> (task class, config), from each family's `configs()`."""
    out = {}
    for family in FAMILIES:
        for name, config in family.configs().items():
            out[name] = (getattr(family, "TASK_CLASSES", {}).get(name, family.TASK_CLASS), config)
    out.update(olmes_sizes.sizes(out))
    return out


#: the OLMES-v0.1 multiple-choice tasks, in OLMES's order (its core 9 and MMLU)
OLMES_MC_TASKS = ("arc_easy", "arc_challenge", "boolq", "csqa", "hellaswag", "openbookqa", "piqa", "socialiqa",
                  "winogrande", "mmlu")


def suites() -> Mapping[str, Suite]:
    """Every suite, built-in and added: spec -> the specs it stands for (members may be suites themselves)."""
    return ChainMap(_added_suites, builtin_suites())


@lru_cache(maxsize=1)
def builtin_suites() -> dict[str, Suite]:
    """Every built-in suite."""
    out = {}
    for fmt in ("mc", "rc"):
        for category, subjects in mmlu.CATEGORIES.items():
            name = f"{category}:{fmt}::olmes"
            out[name] = Suite(name, tuple(f"mmlu_{s}:{fmt}::olmes" for s in subjects))
        out[f"mmlu:{fmt}::olmes"] = Suite(
            f"mmlu:{fmt}::olmes", tuple(f"{c}:{fmt}::olmes" for c in mmlu.CATEGORIES))
    # OLMES's chat suite: the 57 subjects' macro mean (allenai/olmes task_suites.py)
    out["mmlu:mc::tulu"] = Suite("mmlu:mc::tulu", tuple(mmlu.tulu_spec(s) for s in mmlu.SUBJECTS))
    # OLMES's `<task>::olmes` = [<task>:mc::olmes, <task>:rc::olmes], primary "mc_or_rc", and the
    # macro means over the first nine (allenai/olmes oe_eval/configs/task_suites.py, OLMES_MC_TASKS)
    for task in OLMES_MC_TASKS:
        name = f"{task}::olmes"
        out[name] = Suite(name, (f"{task}:mc::olmes", f"{task}:rc::olmes"),
                          aggregations=("mc_or_rc",), primary="mc_or_rc")
    for task in OLMES_MC_TASKS[:9]:  # and of the whole-split specs (proctor.tasks.olmes_sizes)
        name = f"{task}::olmes:full"
        out[name] = Suite(name, (f"{task}:mc::olmes:full", f"{task}:rc::olmes:full"),
                          aggregations=("mc_or_rc",), primary="mc_or_rc")
    for variant in ("olmes", "olmes:full"):
        name = f"core_9mcqa::{variant}"
        out[name] = Suite(name, tuple(f"{t}::{variant}" for t in OLMES_MC_TASKS[:9]), aggregations=("macro",))
        name = f"core_9mcqa:rc::{variant}"
        out[name] = Suite(name, tuple(f"{t}:rc::{variant}" for t in OLMES_MC_TASKS[:9]), aggregations=("macro",))
    for fmt in ("mc", "rc", "rc:bpb"):  # OLMES's basic skills: the six sets' macro mean
        name = f"basic_skills:{fmt}::olmes"
        out[name] = Suite(name, tuple(basic_skills.spec_name(s, fmt) for s in basic_skills.BASIC_SKILLS))
    for subset in basic_skills.BASIC_SKILLS:   # ... and each set's MC or RC (OLMES's mc_or_rc)
        name = f"basic_skills_{subset}::olmes"
        out[name] = Suite(name, tuple(basic_skills.spec_name(subset, fmt) for fmt in ("mc", "rc")),
                          aggregations=("mc_or_rc",), primary="mc_or_rc")
    # OLMo's MMLU BPB: the 57 subjects' macro mean (allenai/olmes task_suites.py mmlu:rc:bpb::olmes)
    out["mmlu:rc:bpb::olmes"] = Suite("mmlu:rc:bpb::olmes", tuple(f"mmlu_{s}:rc:bpb::olmes" for s in mmlu.SUBJECTS),
                                      aggregations=("macro",))
    # OLMES's minerva_math::bpb: the seven subjects' macro mean
    out["minerva_math::bpb"] = Suite("minerva_math::bpb", tuple(f"minerva_math_{s}::bpb" for s in minerva_bpb.MATH_SUBJECTS))
    for fmt in ("mc", "rc", "rc:bpb"):  # OLMES's ARC pairs
        for variant in ("olmes:full",) if fmt == "rc:bpb" else ("olmes:full", "xlarge"):
            name = f"arc:{fmt}::{variant}"
            out[name] = Suite(name, (f"arc_easy:{fmt}::{variant}", f"arc_challenge:{fmt}::{variant}"))
    # lm-eval's group bbh_cot_fewshot reports the mean over all docs (weight_by_size)
    out[bbh.SUITE] = Suite(bbh.SUITE, tuple(bbh.spec_name(t) for t in bbh.TASKS), primary="micro")
    # OLMES's Tulu BBH suites: micro mean over all docs (allenai/olmes task_suites.py)
    for fmt in bbh_olmes.FORMATS:
        name = bbh_olmes.suite_name(fmt)
        out[name] = Suite(name, tuple(bbh_olmes.spec_name(t, fmt) for t in bbh.TASKS), primary="micro")
    # lm-eval's mmlu groups weight by size too; macro (the Open LLM Leaderboard v1 figure) is beside it
    for name, members in lb_mmlu.suites().items():
        whole = name == seed_suites.MMLU_LEADERBOARD  # all 57 subjects: RRGS is defined on it
        out[name] = Suite(name, members, primary="micro",
                          aggregations=("macro", "micro", "rrgs") if whole else ("macro", "micro"))
    out[lb_bigbench.SUITE] = Suite(lb_bigbench.SUITE, tuple(lb_bigbench.spec(t) for t in lb_bigbench.TASKS))
    for table in (seed_suites.SLIMPAJAMA_DC, seed_suites.DATA_ATTRIBUTION):
        out[table.name] = table
    return out


def tasks() -> Mapping[str, tuple[type[Task], TaskConfig]]:
    """Every task spec, built-in and added: spec -> (task class, config)."""
    return ChainMap(_added, builtin_tasks())


def builtin_names() -> set[str]:
    """Return the built-in task specs and suites."""
    return set(builtin_tasks()) | set(builtin_suites())


def add_task(cls: type[Task], config: TaskConfig, origin: str) -> None:
    """Register a task spec defined outside the package; `origin` names where (a file path).

    Defining a spec again from the same origin replaces it (including a file twice is fine).
    """
    name = config.name
    if name in builtin_names():
        raise UserError(f"{origin}: task spec {name!r} is a built-in spec; choose another name")
    if _origin.get(name, origin) != origin:
        raise UserError(f"{origin}: task spec {name!r} is already defined by {_origin[name]}; "
                        "rename one of them")
    _added[name] = (cls, config)
    _origin[name] = origin


def added_specs(origin: Optional[str] = None) -> list[str]:
    """Specs added at run time (those of one origin, when given), in the order added."""
    return [n for n, o in _origin.items() if origin is None or o == origin]


def add_suite(suite: Suite) -> None:
    """Register a suite defined outside the package (an lm-eval group); adding it again replaces it."""
    if suite.name in builtin_names():
        raise UserError(f"suite {suite.name!r} is a built-in spec; choose another name")
    _added_suites[suite.name] = suite
