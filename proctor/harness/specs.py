"""Resolve an `lm_eval:<name>` spec: build lm-eval's task objects and register them as proctor specs.

`load` resolves the name with lm-eval's `TaskManager` (its shipped YAML files, groups and
tags, `include:` and `!function`), builds the task objects with their datasets (local
ones from `--data-dir`, `proctor.harness.offline`), applies lm-eval's `simple_evaluate`
rules for `--num-fewshot` and the few-shot seed, and registers every leaf task as a spec
(`proctor.harness.task.HarnessTask`) and every group or tag as a suite, so that the rest
of a run treats them as any other spec. `evaluate.load("code_eval")` gives proctor's
sandboxed code_eval while they are built (`proctor.harness.code_eval`).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from proctor.errors import UserError
from proctor.harness.code_eval import sandboxed_code_eval
from proctor.harness.index_cache import cached_index
from proctor.harness.library import (
    FEWSHOT_SEED,
    INSTALL,
    ORIGIN,
    PREFIX,
    include_paths,
    lm_eval_version,
    quiet,
    register_built,
    task_config,
)
from proctor.harness.offline import first_line, hub_metric, local_datasets, missing_splits
from proctor.harness.task import HarnessTask
from proctor.tasks import catalog
from proctor.tasks.registry import unknown_spec
from proctor.tasks.suite import Suite


def is_harness_spec(spec: str) -> bool:
    """Whether a spec names an lm-eval task, group or tag (`lm_eval:<name>`)."""
    return isinstance(spec, str) and spec.strip().startswith(PREFIX)


def bare_lm_eval_name(spec: str) -> str:
    """Return `lm_eval:<name>` for a bare name that is lm-eval's task, group or tag, else the spec unchanged.

    `hellaswag` means lm-eval's task `hellaswag` (its shots, its prompt), recorded as
    `lm_eval:hellaswag`: proctor's own formats have names of their own (`hellaswag::leaderboard`).
    Asked only of names proctor does not know. Without lm-eval, the spec stays as it is and is
    refused as unknown, with the install command.
    """
    name = spec.strip()
    if not name or ":" in name:  # lm-eval's names have no colon; proctor's specs do
        return spec
    try:
        lm_eval_version()
    except UserError:  # lm-eval is not installed
        raise UserError(f"{unknown_spec(name)}; an lm-eval task name runs as lm-eval's own task once lm-eval "
                        f"is installed: {INSTALL}") from None
    if name not in task_manager(include_paths()).task_index:
        return spec
    return PREFIX + name


@lru_cache(maxsize=8)
def task_manager(include: tuple[str, ...] = ()) -> Any:
    """Return lm-eval's TaskManager over its shipped tasks and the `include` directories of YAML files."""
    lm_eval_version()
    from lm_eval.tasks import TaskManager

    with quiet(), cached_index():
        return TaskManager(include_path=list(include) or None)


def _unknown(name: str, manager: Any) -> UserError:
    close = difflib.get_close_matches(name, manager.all_tasks, n=5, cutoff=0.75)
    hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
    return UserError(f"unknown lm-eval task, group or tag {name!r}{hint} "
                     "(`python -m lm_eval ls tasks` lists lm-eval's)")


def _effective_shots(task: Any, num_fewshot: Optional[int]) -> int:
    """simple_evaluate's rule: --num_fewshot replaces the YAML's, except a YAML that says 0."""
    default = task.get_config("num_fewshot")
    if num_fewshot is not None and default != 0:
        return num_fewshot
    return default or 0


def load(spec: str, data_dir: Optional[Path], num_fewshot: Optional[int] = None,
         gen_kwargs: Optional[Mapping[str, Any]] = None) -> None:
    """Build the lm-eval tasks a spec names and register them (leaves as tasks, groups and tags as suites).

    `gen_kwargs` update every generation task's generation_kwargs, as simple_evaluate's do.
    Directories of lm-eval YAML files `--include`d (`include_paths`) are searched too.
    """
    name = spec.strip()[len(PREFIX):]
    manager = task_manager(include_paths())
    if name not in manager.task_index:
        raise _unknown(name, manager)
    try:
        with quiet(), local_datasets(data_dir), sandboxed_code_eval():
            loaded = manager.load([name])
    except UserError:
        raise
    except Exception as e:  # a bad field in a YAML file, a !function that fails, ...
        metric = hub_metric(e)
        if metric is not None:
            raise UserError(f"{spec}: {metric}") from None
        entry = manager.task_index[name]
        where = f" ({entry.yaml_path})" if getattr(entry, "yaml_path", None) else ""
        raise UserError(f"{spec}{where}: lm-eval could not build the task: {type(e).__name__}: "
                        f"{first_line(e)}") from None
    for task_name, task in loaded["tasks"].items():
        if gen_kwargs is not None and task.get_config("output_type") == "generate_until":
            task.set_config(key="generation_kwargs", value=dict(gen_kwargs), update=True)
        shots = _effective_shots(task, num_fewshot)
        task.set_config(key="num_fewshot", value=shots)
        task.set_fewshot_seed(seed=FEWSHOT_SEED)
        _check_fewshot_data(task, shots, data_dir)
        proctor_name = PREFIX + task_name
        register_built(proctor_name, task)
        catalog.add_task(HarnessTask, task_config(proctor_name, task), ORIGIN)
    for group in loaded["groups"].values():
        catalog.add_suite(group_suite(group))
    if name not in loaded["groups"] and name not in loaded["tasks"]:  # a tag: its tasks, no aggregate
        catalog.add_suite(Suite(PREFIX + name, tuple(PREFIX + t for t in loaded["tasks"]), aggregations=(),
                                primary=None))


def _check_fewshot_data(task: Any, shots: int, data_dir: Optional[Path]) -> None:
    if not shots:
        return
    lacking = missing_splits(task)
    if not lacking:
        return
    config = task.config
    raise UserError(f"lm_eval:{config.task}: {shots}-shot prompts draw examples from the "
                    f"{'/'.join(lacking)} split of {config.dataset_path}, which {data_dir} does not hold; "
                    "add that split's file, run it 0-shot (--num-fewshot 0), or use the hub (omit --data-dir)")


def group_suite(group: Any) -> Suite:
    """Return an lm-eval group as a suite: its direct members and its aggregation of their primary metric.

    `weight_by_size` weights the members' scores by their document counts (size_weighted, the
    mean over all documents, with lm-eval's pooled standard error); otherwise lm-eval averages
    the members' scores (member_mean). A group without `aggregate_metric_list` reports no score
    of its own, as in lm-eval.
    """
    members = tuple(PREFIX + c for c in group.child_names)
    aggregations = group.aggregate_metric_list or []
    if not aggregations:
        return Suite(PREFIX + group.name, members, aggregations=(), primary=None)
    primary = "size_weighted" if aggregations[0].weight_by_size else "member_mean"
    return Suite(PREFIX + group.name, members, aggregations=(primary,), primary=primary)
