"""Check a tree of record dataclasses against their declared field types.

A run directory read back from disk may have been edited, truncated or written by another
tool; `read_run` checks every field of what it parsed so that a wrong value is refused at
the door, named by its path, rather than failing later in whatever reads it.

Each type gets one checker, built once: it returns None when a value fits, else the path
below it and what is wrong (`.metrics.acc_raw is str '1.0', not float`); paths are only
spelled out on failure, so a whole run checks in well under a second.
"""

from __future__ import annotations

import collections.abc
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Callable, Optional, Union

Check = Callable[[Any], Optional[str]]

_CHECKS: dict[Any, Check] = {}


def check_fields(value: Any, where: str) -> None:
    """TypeError naming the first field (as a path from `where`) whose value is not of its type."""
    error = _check(type(value))(value)
    if error is not None:
        raise TypeError(f"{where}{error}")


def _check(hint: Any) -> Check:
    """Return the checker of `hint`, built once per type (a recursive record type refers to itself)."""
    if hint not in _CHECKS:
        _CHECKS[hint] = lambda v: _CHECKS[hint](v)  # stands in while the real one is built
        _CHECKS[hint] = _build(hint)
    return _CHECKS[hint]


def _build(hint: Any) -> Check:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda v: None
    if origin is Union:
        return _union(hint, args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _items(hint, lambda n: [_check(args[0])] * n)
        fixed = [_check(a) for a in args]
        return _items(hint, lambda n: fixed if n == len(fixed) else None)
    if origin in (dict, collections.abc.Mapping):
        return _mapping(hint, *(_check(a) for a in (args or (Any, Any))))
    if hint is type(None):
        return _scalar(hint, lambda v: v is None)
    if hint is float:  # JSON writes whole floats as they are; ints stand for floats in Python typing
        return _scalar(hint, lambda v: type(v) is float or type(v) is int)
    if hint in (int, bool, str):
        return _scalar(hint, lambda v: type(v) is hint)
    if isinstance(hint, type) and is_dataclass(hint):
        return _record(hint)
    raise AssertionError(f"no check for the type {hint!r}")  # a record type this module misses


def _wrong(value: Any, hint: Any) -> str:
    text = repr(value)
    name = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
    return f" is {type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}, not {name}"


def _scalar(hint: Any, fits: Callable[[Any], bool]) -> Check:
    return lambda v: None if fits(v) else _wrong(v, hint)


def _union(hint: Any, args: tuple) -> Check:
    options = [(a, _check(a)) for a in args]
    records = [(a, c) for a, c in options if isinstance(a, type) and is_dataclass(a)]

    def check(v: Any) -> Optional[str]:
        for kind, c in records:
            if isinstance(v, kind):  # a record of one of the kinds: its own fields say what is wrong
                return c(v)
        return None if any(c(v) is None for _, c in options) else _wrong(v, hint)

    return check


def _items(hint: Any, checks_for: Callable[[int], Optional[list[Check]]]) -> Check:
    def check(v: Any) -> Optional[str]:
        checks = checks_for(len(v)) if isinstance(v, tuple) else None
        if checks is None:
            return _wrong(v, hint)
        for i, (c, x) in enumerate(zip(checks, v)):
            error = c(x)
            if error is not None:
                return f"[{i}]{error}"
        return None

    return check


def _mapping(hint: Any, key: Check, value: Check) -> Check:
    def check(v: Any) -> Optional[str]:
        if not isinstance(v, collections.abc.Mapping):
            return _wrong(v, hint)
        for k, x in v.items():
            error = key(k)
            if error is not None:
                return f" key{error}"
            error = value(x)
            if error is not None:
                return f"[{k!r:.40}]{error}"
        return None

    return check


def _record(cls: type) -> Check:
    hints = typing.get_type_hints(cls)
    checks = [(f.name, _check(hints[f.name])) for f in fields(cls)]

    def check(v: Any) -> Optional[str]:
        if not isinstance(v, cls):
            return _wrong(v, cls)
        for name, c in checks:
            error = c(getattr(v, name))
            if error is not None:
                return f".{name}{error}"
        return None

    return check
