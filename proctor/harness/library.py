"""What the bridge to lm-evaluation-harness shares: the spec prefix, the task objects built, their records.

Every `lm_eval:<task>` spec's lm-eval task object is built once per run
(`proctor.harness.specs.load`) and kept here under its proctor task name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from functools import partial
from typing import Any, Iterator

from proctor.errors import UserError
from proctor.tasks.config import TaskConfig

PREFIX = "lm_eval:"
INSTALL = "pip install 'proctor[lm-eval]'"
#: simple_evaluate's default fewshot_random_seed
FEWSHOT_SEED = 1234
ORIGIN = "lm-evaluation-harness"

#: proctor task name -> the lm-eval task object built for this process's run
_built: dict[str, Any] = {}
#: directories of lm-eval YAML task files `--include`d in this process, in order
_includes: list[str] = []


def lm_eval_version() -> str:
    """Return the installed lm-eval's version; one line naming the install command when it is missing."""
    try:
        from importlib.metadata import version

        import lm_eval  # noqa: F401
    except ImportError:
        raise UserError(f"lm_eval: specs run lm-evaluation-harness's own tasks, and lm-eval is not "
                        f"installed; install it: {INSTALL}") from None
    return version("lm_eval")


@contextmanager
def quiet() -> Iterator[None]:
    """Keep lm-eval's chatter off the terminal while its tasks are built and read.

    That is its per-task INFO and WARNING lines (defaults it fills in), the progress bars of
    the `datasets.map` calls its tasks make over their rows, and its tqdm bar of request
    building (proctor shows its own progress). tqdm reads TQDM_DISABLE when it is imported, so
    that bar is turned off where lm-eval's task module calls it.
    """
    import datasets
    from lm_eval.api import task as lm_eval_task

    logger = logging.getLogger("lm_eval")
    level, bars_were_on, bar = logger.level, datasets.is_progress_bar_enabled(), lm_eval_task.tqdm
    logger.setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    lm_eval_task.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        logger.setLevel(level)
        lm_eval_task.tqdm = bar
        if bars_were_on:
            datasets.enable_progress_bars()


def register_built(name: str, task: Any) -> None:
    """Keep the lm-eval task object built for a proctor task name (its HarnessTask reads it)."""
    _built[name] = task


def built_task(name: str) -> Any:
    """Return the lm-eval task object registered under a proctor task name."""
    try:
        return _built[name]
    except KeyError:
        raise UserError(f"{name}: lm-eval's task is not loaded in this process; name it in the run's "
                        "tasks") from None


def add_include(directory: str) -> None:
    """Search a directory of lm-eval YAML task files too (lm-eval's --include_path) when specs resolve."""
    if directory not in _includes:
        _includes.append(directory)


def include_paths() -> tuple[str, ...]:
    """Return the directories of lm-eval YAML task files included so far."""
    return tuple(_includes)


def eval_split(task: Any) -> str:
    """Return the split lm-eval evaluates on: the test split, else the validation split."""
    config = task.config
    return config.test_split or config.validation_split


def metric_keys(task: Any) -> list[str]:
    """Return the task's metric names per filter as proctor records them.

    The bare metric under the filter "none" (lm-eval's `acc,none`), lm-eval's `"<metric>,<filter>"` else.
    """
    filters = [f.name for f in getattr(task, "_filters", [])] or ["none"]
    return [metric_key(r, f) for f in filters for m in task.aggregation() for r in result_names(task, m)]


def result_names(task: Any, metric: str) -> list[str]:
    """Return the names `process_results` gives a metric's values under: its own, or code_eval's `pass@<k>`.

    lm-eval's `pass_at_k` (humaneval's, humaneval_infilling's) returns code_eval's dict of
    pass@k, one per k of its `k` argument, and lm-eval records each under its key.
    """
    ks = getattr(task, "_metric_fn_kwargs", {}).get(metric, {}).get("k")
    if metric != "pass_at_k" or ks is None:
        return [metric]
    return [f"pass@{k}" for k in ([ks] if isinstance(ks, int) else ks)]


def metric_key(metric: str, filter_name: str) -> str:
    """Return one (metric, filter) pair's key in proctor's records."""
    return metric if filter_name == "none" else f"{metric},{filter_name}"


def resolved_config(task: Any) -> dict:
    """Return the task's config as lm-eval expanded it (includes merged, functions as their source), JSON-safe."""
    config = json.loads(json.dumps(task.dump_config(), default=str, sort_keys=True))
    if isinstance(config.get("metadata"), dict):
        config["metadata"].pop("config_source", None)  # the YAML's path on this machine
    return config


def config_digest(config: dict) -> str:
    """Return the sha256 of a resolved config's canonical JSON."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def task_config(name: str, task: Any) -> TaskConfig:
    """Return proctor's record of a built lm-eval task's protocol."""
    config = task.config
    fewshot = config.fewshot_config or {}
    sampler = fewshot.get("sampler", "default") if isinstance(fewshot, dict) else "default"
    return TaskConfig(name=name, benchmark=config.task, dataset_path=str(config.dataset_path),
                      dataset_name=config.dataset_name, split=str(eval_split(task)),
                      num_shots=int(config.num_fewshot or 0), primary_metric=metric_keys(task)[0],
                      fewshot_source=f"lm-eval's {sampler} sampler, seed {FEWSHOT_SEED}")
