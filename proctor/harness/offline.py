"""lm-eval tasks' datasets read from a local data directory (`--data-dir`), rows as on the hub.

lm-eval loads a task's dataset when the task object is built (`ConfigurableTask.download`).
While `local_datasets(data_dir)` is active, a task whose `dataset_path` proctor can read
from `data_dir` (`proctor.data.local.LOADERS`: MMLU, ARC, HellaSwag, GSM8K, TruthfulQA,
BBH, BIG-bench, HumanEval, SocialIQA) gets its splits from there instead; any other task
loads as lm-eval loads it (the hub or the HF datasets cache), and a failure there is one
`UserError` naming the task, its dataset and how to provide it.

A split the task names but the directory lacks (HellaSwag's train split) is served empty,
and `missing_splits` remembers it: the bridge refuses the task if its few-shot examples
would come from such a split.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from proctor.data.local import LOADERS
from proctor.errors import UserError
from proctor.harness.library import eval_split

#: lm-eval dataset paths whose rows proctor reads under another hub id of the same rows
#: (hails/mmlu_no_train: "a copy of `cais/mmlu` with no auxiliary_train split", lm-eval's llama3 MMLU tasks)
SAME_ROWS = {"lighteval/siqa": "allenai/social_i_qa", "hails/mmlu_no_train": "cais/mmlu"}

#: task object -> the splits served empty because `data_dir` lacks them
_MISSING_ATTR = "_proctor_missing_splits"


def local_loader_of(dataset_path: Optional[str]) -> Optional[str]:
    """Return the proctor dataset id whose local reader serves lm-eval's `dataset_path`, if any."""
    if dataset_path is None:
        return None
    dataset = SAME_ROWS.get(dataset_path, dataset_path)
    return dataset if dataset in LOADERS else None


def _split_names(config: Any) -> list[str]:
    names = [config.training_split, config.validation_split, config.test_split, config.fewshot_split]
    fewshot = config.fewshot_config or {}
    if isinstance(fewshot, dict) and fewshot.get("split"):
        names.append(fewshot["split"])
    return [n for n in dict.fromkeys(names) if n]


def _local_dataset(task: Any, data_dir: Path) -> Any:
    """Build the task's DatasetDict from `data_dir` (None when no local reader serves its dataset)."""
    import datasets

    config = task.config
    dataset = local_loader_of(config.dataset_path)
    if dataset is None:
        return None
    loader = LOADERS[dataset]
    evaluated = eval_split(task)
    splits: dict[str, Any] = {}
    missing = []
    for split in _split_names(config):
        try:
            rows = loader(data_dir, config.dataset_name, split)
        except UserError as e:
            if split == evaluated:
                raise UserError(f"lm_eval:{config.task}: its {split} split of {config.dataset_path} "
                                f"({config.dataset_name or 'default'}) cannot be read from {data_dir}: {e}") from None
            missing.append(split)
            rows = []
        splits[split] = datasets.Dataset.from_list(rows)
    setattr(task, _MISSING_ATTR, tuple(missing))
    return datasets.DatasetDict(splits)


def missing_splits(task: Any) -> tuple[str, ...]:
    """Return the splits a task named that its local data directory lacks (served empty)."""
    return getattr(task, _MISSING_ATTR, ())


def _unavailable(task: Any, error: BaseException, data_dir: Optional[Path]) -> UserError:
    config = task.config
    name = f" (config {config.dataset_name})" if config.dataset_name else ""
    where = (f"--data-dir {data_dir} has no reader for it" if data_dir is not None
             else "no --data-dir was given")
    return UserError(f"lm_eval:{config.task}: its dataset {config.dataset_path}{name} could not be loaded "
                     f"({first_line(error)}); {where}. Put the dataset in the HF datasets cache (run once where the hub "
                     f"is reachable, or copy ~/.cache/huggingface/datasets); proctor reads these datasets from "
                     f"--data-dir: {', '.join(sorted([*LOADERS, *SAME_ROWS]))}")


def first_line(error: BaseException) -> str:
    """Return an exception's first line of text (at most 300 characters), or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def hub_metric(error: BaseException) -> Optional[str]:
    """Say which `evaluate` metric a task could not load from the hub, if that is why lm-eval failed to build it."""
    text = str(error)
    if not isinstance(error, FileNotFoundError) or "Couldn't find a module script" not in text:
        return None
    metric = Path(text.split(" at ", 1)[-1].split(".py", 1)[0]).name
    return (f"the task scores with the Hugging Face `evaluate` metric {metric!r}, whose script comes from the hub, "
            "which cannot be reached; load it once online (it is then cached), or run proctor's own spec of the "
            "benchmark (`proctor tasks`)")


@contextmanager
def local_datasets(data_dir: Optional[Path]) -> Iterator[None]:
    """Within it, lm-eval task objects built read their datasets from `data_dir` where proctor can."""
    from lm_eval.api.task import ConfigurableTask

    original = ConfigurableTask.download

    def download(self: Any, dataset_kwargs: Optional[dict] = None, **kwargs: Any) -> None:
        local = None if data_dir is None or callable(self.config.custom_dataset) else _local_dataset(self, data_dir)
        if local is not None:
            self.dataset = local
            return
        try:
            original(self, dataset_kwargs, **kwargs)
        except UserError:
            raise
        except Exception as e:  # datasets' errors: offline, not found, no such config, ...
            raise _unavailable(self, e, data_dir) from None

    ConfigurableTask.download = download
    try:
        yield
    finally:
        ConfigurableTask.download = original
