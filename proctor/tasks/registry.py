"""Spec registry: resolution of specs and suites, and the `proctor tasks` listing.

The specs and suites themselves are `proctor.tasks.catalog`'s; the registry loads the
installed plugins' tasks (`proctor.tasks.plugins`) on its first lookup, so they list and
resolve without any flag.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from proctor.errors import UserError
from proctor.tasks import catalog, humaneval, perplexity
from proctor.tasks.base import Task, TaskConfig
from proctor.tasks.counts import official_item_count
from proctor.tasks.plugins import load_entry_points
from proctor.tasks.spec import parse_spec
from proctor.tasks.suite import Suite

__all__ = ["Suite", "TaskRow", "parse_spec", "resolve", "suite", "all_specs", "all_suites",
           "leaf_specs", "task_config", "task_rows", "is_known"]


@dataclass(frozen=True)
class TaskRow:
    """One line of `proctor tasks`."""

    spec: str
    kind: str                   # "task" or "suite"
    split: str
    shots: int                  # -1: the leaves differ
    primary_metric: str
    items: Optional[int]
    items_source: str           # "data" (counted from the data dir) or "official"


_entry_points = "todo"           # the `proctor.tasks` entry points: "todo", "loading", "done"


def _table() -> Mapping[str, tuple[type[Task], TaskConfig]]:
    """Every task spec: built-in, added, and (loaded on first use) those of installed plugins."""
    global _entry_points
    if _entry_points == "todo":
        _entry_points = "loading"  # a plugin that lists tasks while it loads must not recurse
        try:
            load_entry_points()
        except BaseException:
            _entry_points = "todo"  # a broken plugin fails every lookup, not only the first
            raise
        _entry_points = "done"
    return catalog.tasks()


def all_specs() -> list[str]:
    """List every task spec (built-in, added, and installed plugins'), sorted."""
    return sorted(_table())


def all_suites() -> list[Suite]:
    """List every suite, sorted by name."""
    return [s for _, s in sorted(catalog.suites().items())]


def suite(spec: str) -> Optional[Suite]:
    """Return the suite named `spec`, or None."""
    return catalog.suites().get(spec.strip())


def is_known(spec: str) -> bool:
    """Whether `spec` is a task spec or a suite proctor has (built-in, added or a plugin's)."""
    spec = spec.strip()
    return spec in _table() or spec in catalog.suites()


#: families whose prompts hold no few-shot examples, whatever num_shots says
_NO_SHOTS: tuple[type[Task], ...] = (humaneval.HumanEvalTask, perplexity.PerplexityTask)


def _with_shots(cls: type[Task], config: TaskConfig, shots: int) -> TaskConfig:
    """Return the config with `shots` few-shot examples (--num-fewshot)."""
    if shots == config.num_shots:
        return config
    if shots and issubclass(cls, _NO_SHOTS):
        raise UserError(f"{config.name} takes no few-shot examples: --num-fewshot {shots} would not "
                        "change its prompts (leave it out, or 0)")
    effective = config.effective_shots
    if effective is not None:
        # TruthfulQA's primer is part of the doc text: the eval doc's and each shot's
        effective = (effective - config.num_shots) * (shots + 1) + shots
    return dataclasses.replace(config, num_shots=shots, effective_shots=effective)


def _close_names(spec: str) -> list[str]:
    """List the spec and suite names close to an unknown `spec`.

    All forms of the task names nearest to its task part (narrowed to its format and variant
    where it gives them and some match), else the names close to it as a whole. Specs first,
    then suites.
    """
    kinds = {n: 1 for n in catalog.suites()}
    kinds.update({n: 0 for n in _table()})
    task, fmt, variant = parse_spec(spec)
    tasks = {parse_spec(n)[0] for n in kinds}
    ratios = {t: difflib.SequenceMatcher(None, task, t).ratio() for t in tasks}
    best = max(ratios.values(), default=0.0)
    near = {t for t, r in ratios.items() if r >= 0.8 and r >= best - 0.05}
    close = [n for n in kinds if parse_spec(n)[0] in near]
    same_form = [n for n in close if parse_spec(n)[1:] == (fmt, variant)]
    if (fmt or variant) and same_form:
        close = same_form
    if not close:
        close = difflib.get_close_matches(spec, list(kinds), n=len(kinds), cutoff=0.75)
    return sorted(close, key=lambda n: (kinds[n], n))


def _either(names: list[str]) -> str:
    """Join the names quoted, as 'a', 'b' or 'c'."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def unknown_spec(spec: str) -> UserError:
    """Return the error for a spec proctor does not know, naming the specs and suites close to it."""
    close = _close_names(spec)
    hint = f"did you mean {_either(close)}? " if close else ""
    return UserError(f"unknown task spec {spec!r}; {hint}(`proctor tasks` lists all)")


def leaf_specs(spec: str) -> list[str]:
    """Return the task specs a spec stands for.

    A suite expands recursively, order kept, no repeats.
    """
    spec = spec.strip()
    parse_spec(spec)
    if spec in _table():
        return [spec]
    s = catalog.suites().get(spec)
    if s is None:
        raise unknown_spec(spec)
    out: list[str] = []
    for member in s.members:
        out.extend(x for x in leaf_specs(member) if x not in out)
    return out


def task_config(spec: str) -> TaskConfig:
    """Return a task spec's config (a suite is an unknown spec here)."""
    spec = spec.strip()
    if spec not in _table():
        raise unknown_spec(spec)
    return _table()[spec][1]


def resolve(spec: str, num_shots: Optional[int] = None) -> list[Task]:
    """Task objects for a spec (a suite expands to its leaf tasks).

    `num_shots` (--num-fewshot) replaces every task's shots.
    """
    if num_shots is not None and (isinstance(num_shots, bool) or not isinstance(num_shots, int)
                                  or num_shots < 0):
        raise UserError(f"--num-fewshot must be a whole number >= 0, got {num_shots!r}")
    tasks = []
    for name in leaf_specs(spec):
        cls, config = _table()[name]
        if num_shots is not None and cls.applies_num_fewshot:
            config = _with_shots(cls, config, num_shots)
        tasks.append(cls(config))
    return tasks


def _count(config: TaskConfig, data_dir: Optional[Path]) -> tuple[Optional[int], str]:
    """Count a spec's docs from the data directory when it holds them, else give the official size.

    None where no size is known (the table shows "—"); the second value says which it is.
    """
    n = _table()[config.name][0](config).item_count(data_dir)
    return (n, "data") if n is not None else (official_item_count(config), "official")


def _shots(config: TaskConfig) -> int:
    """Examples each prompt really holds (TruthfulQA's "0-shot" primer holds 6)."""
    return config.num_shots if config.effective_shots is None else config.effective_shots


def _matches(name: str, pattern: Optional[str]) -> bool:
    if not pattern:
        return True
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def task_rows(pattern: Optional[str] = None, data_dir: Optional[Path] = None) -> list[TaskRow]:
    """Rows for `proctor tasks [pattern]`: suites first, then tasks, each sorted by name.

    `pattern` is a glob when it has *, ? or [, else a substring; one that matches nothing is
    a UserError.
    """
    counts: dict[str, tuple[Optional[int], str]] = {}

    def count(name: str) -> tuple[Optional[int], str]:
        if name not in counts:
            counts[name] = _count(_table()[name][1], data_dir)
        return counts[name]

    rows = []
    for s in all_suites():
        if not _matches(s.name, pattern):
            continue
        leaves = [_table()[n][1] for n in leaf_specs(s.name)]
        items = [count(c.name) for c in leaves]
        total = None if any(n is None for n, _ in items) else sum(n or 0 for n, _ in items)
        source = "data" if all(src == "data" for _, src in items) else "official"
        splits = {c.split for c in leaves}
        shots = {_shots(c) for c in leaves}
        metrics = {c.primary_metric for c in leaves}
        metric = metrics.pop() if len(metrics) == 1 else "mixed"
        rows.append(TaskRow(
            spec=s.name, kind="suite", split=splits.pop() if len(splits) == 1 else "mixed",
            shots=shots.pop() if len(shots) == 1 else -1,
            primary_metric=f"{s.primary}({metric})" if s.primary else f"each member's ({metric})",
            items=total, items_source=source))
    for name in all_specs():
        if not _matches(name, pattern):
            continue
        config = _table()[name][1]
        n, source = count(name)
        rows.append(TaskRow(spec=name, kind="task", split=config.split, shots=_shots(config),
                            primary_metric=config.primary_metric, items=n, items_source=source))
    if not rows:
        names = list(_table()) + list(catalog.suites())
        close = difflib.get_close_matches(pattern or "", names, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UserError(f"no task spec matches {pattern!r}; {hint}`proctor tasks` with no pattern lists all")
    return rows
