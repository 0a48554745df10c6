"""Tasks of your own, without editing the package: `@task` classes, task files, entry points.

- `@task("my_thing:mc", ...)` on a `ChoiceTask`, `GenerationTask` or other `Task` subclass
  registers it under that spec (stack several for several specs of one class).
- `include(paths)` adds the tasks of task files (.yaml/.yml/.toml, see
  `proctor.tasks.custom`), of Python files (.py, imported by path; their `@task` classes
  register) and of directories (each such file in it, sorted; not recursive).
- `load_entry_points()` loads the `proctor.tasks` entry points of installed packages: each
  names a module (its `@task` classes register when it is imported) or a callable that
  returns task file / module / directory paths to `include`. The registry calls it on its
  first lookup, so installed plugins' tasks list and resolve without any flag.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional, Sequence, TypeVar, Union

from proctor.errors import UserError
from proctor.option import checked_arguments, paths as path_list, shown, some_text, text
from proctor.tasks import catalog
from proctor.tasks.base import Task, TaskConfig
from proctor.tasks.choice import ChoiceTask
from proctor.tasks.custom import CHOICE_METRICS, DEFAULT_METRIC, SUFFIXES, read_task_file, task_class
from proctor.tasks.generation import GenerationTask
from proctor.tasks.module_guard import guarded_import
from proctor.tasks.spec import parse_spec

ENTRY_POINT_GROUP = "proctor.tasks"
MODULE_PREFIX = "proctor_user_tasks_"
INCLUDABLE = (*SUFFIXES, ".py")

T = TypeVar("T", bound=type)


def _origin_of(cls: type) -> str:
    """Where a class was defined: its module's file (resolved), else the module's name."""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return str(Path(file).resolve()) if file else cls.__module__


@checked_arguments(spec=text, benchmark=some_text, dataset_path=some_text, dataset_name=some_text, split=text,
                   primary_metric=some_text, fewshot_source=some_text, subject=some_text)  # num_shots: below
def task(spec: str, *, benchmark: Optional[str] = None, dataset_path: Optional[str] = None,
         dataset_name: Optional[str] = None, split: str = "test", num_shots: int = 0,
         primary_metric: Optional[str] = None, fewshot_source: Optional[str] = None,
         subject: Optional[str] = None) -> Callable[[T], T]:
    """Register the decorated `Task` subclass under `spec`, with the `TaskConfig` these build.

    Defaults: `benchmark` the spec's task name; `dataset_path` the defining file (recorded
    in metrics.json); `primary_metric` acc_raw for `<name>:mc`, acc_per_char for
    `<name>:rc`, a `GenerationTask`'s first `metric_names` (other tasks must say). A
    `ChoiceTask` spec's format is mc or rc: it picks letters or answer texts.
    """

    def register(cls: T) -> T:
        origin = _origin_of(cls) if isinstance(cls, type) else shown(cls)
        where = f"{origin}: @task({spec!r}) on {cls.__qualname__ if isinstance(cls, type) else shown(cls)}"
        try:
            name, fmt, _ = parse_spec(spec)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise UserError(f"{where}: decorates a Task subclass (ChoiceTask, GenerationTask, ...)")
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            raise UserError(f"{where}: the class does not implement {missing}")
        if isinstance(num_shots, bool) or not isinstance(num_shots, int) or num_shots < 0:
            raise UserError(f"{where}: num_shots must be an integer >= 0, got {num_shots!r}")
        metric = primary_metric
        if issubclass(cls, ChoiceTask):
            if fmt not in CHOICE_METRICS:
                raise UserError(f"{where}: a ChoiceTask spec is <name>:mc or <name>:rc, got format {fmt!r}")
            metric = metric or DEFAULT_METRIC[fmt]
            if metric not in CHOICE_METRICS[fmt]:
                raise UserError(f"{where}: primary_metric must be one of {', '.join(CHOICE_METRICS[fmt])}, "
                                f"got {metric!r}")
        elif issubclass(cls, GenerationTask) and cls.metric_names:
            metric = metric or cls.metric_names[0]
            if metric not in cls.metric_names:
                raise UserError(f"{where}: primary_metric must be one of its metric_names "
                                f"{', '.join(cls.metric_names)}, got {metric!r}")
        if not metric:
            raise UserError(f"{where}: give primary_metric (the metric the task's headline score is)")
        config = TaskConfig(name=spec.strip(), benchmark=benchmark or name, dataset_path=dataset_path or origin,
                            dataset_name=dataset_name, split=split, num_shots=num_shots,
                            primary_metric=metric, fewshot_source=fewshot_source, subject=subject)
        catalog.add_task(cls, config, origin)
        return cls

    return register


# ---- include -------------------------------------------------------------------------------

@checked_arguments(paths=path_list)
def include(paths: Sequence[Union[str, Path]]) -> list[str]:
    """Add the tasks of task files, Python files and directories; return the spec names they define.

    A directory's lm-eval YAML task files (anywhere under it) are read as lm-eval's
    `--include_path`: their tasks become `lm_eval:<name>` specs (its Python files are then
    their `!function` modules, which lm-eval imports, not task modules). The names come in order;
    including a path again is fine and returns its names again. A Python file is code that runs
    with the caller's rights when it is imported (see `proctor.tasks.module_guard` for what its
    import may not do).
    """
    from proctor.harness.yaml_files import include_lm_eval, is_lm_eval_file, lm_eval_files

    names: list[str] = []
    where = [Path(given).expanduser().absolute() for given in paths]  # all before a module runs code
    for given, path in zip(paths, where):
        harness: list[Path] = []
        if path.is_dir():
            harness = lm_eval_files(path)
            # beside lm-eval YAML files, Python files are their `!function` modules: lm-eval imports them
            files = sorted(p for p in path.iterdir() if p.suffix in INCLUDABLE and p.is_file()
                           and not p.name.startswith((".", "_")) and p not in harness
                           and not (harness and p.suffix == ".py"))
            if not files and not harness:
                raise UserError(f"--include {given}: the directory holds no {', '.join(INCLUDABLE)} files "
                                "(proctor task files, task modules or lm-eval YAML task files)")
        elif path.is_file():
            if path.suffix not in INCLUDABLE:
                raise UserError(f"--include {given}: not a task file ({', '.join(INCLUDABLE)}) or a directory")
            files, harness = ([], [path]) if is_lm_eval_file(path) else ([path], [])
        else:
            raise UserError(f"--include {given}: no such file or directory")
        if harness:  # lm-eval searches the directory, as its --include_path
            names.extend(n for n in include_lm_eval(path if path.is_dir() else path.parent, harness)
                         if n not in names)
        for file in files:
            names.extend(n for n in (_include_module(file) if file.suffix == ".py" else _include_task_file(file))
                         if n not in names)
    return names


def _include_task_file(file: Path) -> list[str]:
    defs = read_task_file(file)  # the whole file is checked before any of it registers
    origin = str(file.resolve())
    builtin = {parse_spec(n)[0] for n in catalog.builtin_names()}
    for d in defs:
        if d.name in builtin:
            raise UserError(f"{file}: field 'name' is {d.name!r}, the name of a built-in task; choose another")
    names = []
    for d in defs:
        for form in d.forms:
            catalog.add_task(task_class(d, form), d.config(form), origin)
            names.append(d.spec(form))
    return names


def _include_module(file: Path) -> list[str]:
    """Import a Python file under a name of its own (once per path); its `@task` classes register."""
    resolved = file.resolve()
    stem = re.sub(r"\W", "_", resolved.stem)
    module_name = f"{MODULE_PREFIX}{stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise UserError(f"{file}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # before it runs: dataclasses and pickling look it up
        try:
            with guarded_import(file):
                spec.loader.exec_module(module)
        except UserError:
            del sys.modules[module_name]
            raise
        except SyntaxError as e:
            del sys.modules[module_name]
            raise UserError(f"{e.filename or file}:{e.lineno}: invalid Python ({e.msg})") from None
        except Exception as e:  # the user's module failed: one line, not their traceback
            del sys.modules[module_name]
            raise UserError(f"{file}: importing it failed: {_one_line(e)}") from None
        except BaseException as e:  # exit() or an interrupt from a task file must not end proctor as a success
            del sys.modules[module_name]
            raise UserError(f"{file}: importing it raised {type(e).__name__}({_args(e)}); a task module "
                            "must only define and register tasks") from None
    return catalog.added_specs(str(resolved))


def _args(e: BaseException) -> str:
    """Return the exception's arguments as Python shows them, e.g. `0` for SystemExit(0)."""
    return ", ".join(repr(a) for a in e.args)[:80]


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


# ---- entry points --------------------------------------------------------------------------

def load_entry_points() -> list[str]:
    """Load every `proctor.tasks` entry point; returns the spec names added.

    An entry point names a module (importing it registers its `@task` classes) or a callable
    returning paths to `include`. A broken one is one UserError naming it.
    """
    added: list[str] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        before = set(catalog.added_specs())
        where = f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP!r}"
        try:
            loaded = ep.load()
            if isinstance(loaded, ModuleType):
                names = [n for n in catalog.added_specs() if n not in before]
            elif callable(loaded):
                paths = loaded()
                if not isinstance(paths, (list, tuple)) or not all(isinstance(p, (str, Path)) for p in paths):
                    raise UserError(f"returned {type(paths).__name__}, not a list of task file paths")
                names = include(list(paths))
            else:
                raise UserError(f"loads a {type(loaded).__name__}, not a module or a callable returning paths")
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        except BaseException as e:  # a plugin that fails, exits or is interrupted: name it, in one line
            raise UserError(f"{where} failed: {_one_line(e)}; fix or uninstall the package that "
                            "provides it") from None
        added.extend(n for n in names if n not in added)
    return added
