"""lm-eval's YAML task files among what `--include` names: telling them from proctor's, and checking them.

lm-eval's own index skips a YAML file it cannot read without a word (its task is then
"unknown"), so every included file is read here first, and a broken one is one line naming
the file and what is wrong with it. Telling the formats apart needs no lm-eval: an lm-eval
task file is a `.yaml` mapping with lm-eval's keys (`task`, `group`, `include`, ...) and none
of proctor's task-file keys (`name`, `tasks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from proctor.errors import UserError
from proctor.harness.code_eval import sandboxed_code_eval
from proctor.harness.library import PREFIX, add_include, lm_eval_version
from proctor.harness.offline import first_line, hub_metric

LM_EVAL_KEYS = frozenset({"task", "group", "tag", "include", "dataset_path", "output_type", "doc_to_text"})
PROCTOR_KEYS = frozenset({"name", "tasks"})


class _AnyTagLoader(yaml.SafeLoader):
    """A safe loader that reads lm-eval's `!function` (and any other tag) as nothing, to see a file's keys."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def is_lm_eval_file(file: Path) -> bool:
    """Whether a file is an lm-eval YAML task file (lm-eval reads `*.yaml` only)."""
    if file.suffix != ".yaml" or not file.is_file():
        return False
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_AnyTagLoader)  # noqa: S506 (safe loader)
    except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError, ValueError):
        return False  # proctor's task-file reader says what is wrong with it
    return isinstance(data, dict) and not PROCTOR_KEYS & data.keys() and bool(LM_EVAL_KEYS & data.keys())


def lm_eval_files(directory: Path) -> list[Path]:
    """Return the lm-eval YAML task files anywhere under a directory (lm-eval searches it recursively)."""
    return sorted(p for p in directory.glob("**/*.yaml")
                  if "__pycache__" not in p.parts and is_lm_eval_file(p))


def include_lm_eval(directory: Path, files: list[Path]) -> list[str]:
    """Check lm-eval task files and search their directory when specs resolve; return their `lm_eval:` names.

    Each file is read as lm-eval reads it (its `include:` chain merged, its `!function`s
    imported), so a file lm-eval would skip is refused here in one line.
    """
    lm_eval_version()
    from lm_eval.tasks._yaml_loader import load_yaml

    names: list[str] = []
    for file in files:
        try:
            with sandboxed_code_eval():
                config: Any = load_yaml(file, resolve_func=True, recursive=True)
        except Exception as e:  # a missing include, a !function that does not import, bad YAML
            metric = hub_metric(e)
            if metric is not None:
                raise UserError(f"{file}: {metric}") from None
            raise UserError(f"{file}: lm-eval cannot read this task file: {type(e).__name__}: "
                            f"{first_line(e)}") from None
        name = next((config[k] for k in ("task", "group") if isinstance(config.get(k), str)), None)
        if name is None:
            raise UserError(f"{file}: an lm-eval task file names its task (`task: <name>`) or group "
                            "(`group: <name>`); this one names neither")
        names.append(PREFIX + name)
    add_include(str(directory.resolve()))
    return names
