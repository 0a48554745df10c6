"""Check a tree of record dataclasses against their declared field types.

A run directory read back from disk may have been edited, truncated or written by another
tool; `read_run` checks every field of what it parsed so that a wrong value is refused at
the door, named by its path, rather than failing later in whatever reads it.
"""

from __future__ import annotations

import collections.abc
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Callable, Union


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def check_fields(value: Any, where: str) -> None:
    """TypeError naming the first field (as a path from `where`) whose value is not of its type.

    A compiled predicate answers first (a whole run reads in well under a second); only a
    tree that fails it is walked again to name the field."""
    if not _fits(type(value))(value):
        _explain_fields(value, where)


def _explain_fields(value: Any, where: str) -> None:
    hints = _hints(type(value))
    for f in fields(value):
        check_value(getattr(value, f.name), hints[f.name], f"{where}.{f.name}")


_FITS: dict[Any, Callable[[Any], bool]] = {}


def _fits(hint: Any) -> Callable[[Any], bool]:
    """A predicate for `hint`, built once per type (a recursive record type refers to itself)."""
    if hint not in _FITS:
        _FITS[hint] = lambda v: _FITS[hint](v)  # stands in while the real one is built
        _FITS[hint] = _build(hint)
    return _FITS[hint]


def _build(hint: Any) -> Callable[[Any], bool]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda v: True
    if origin is Union:
        options = [_fits(a) for a in args]
        return lambda v: any(f(v) for f in options)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _fits(args[0])
            return lambda v: isinstance(v, tuple) and all(map(item, v))
        items = [_fits(a) for a in args]
        return lambda v: isinstance(v, tuple) and len(v) == len(items) and all(f(x) for f, x in zip(items, v))
    if origin in (dict, collections.abc.Mapping):
        key, value = (_fits(a) for a in (args or (Any, Any)))
        return lambda v: isinstance(v, collections.abc.Mapping) and all(key(k) and value(x) for k, x in v.items())
    if hint is type(None):
        return lambda v: v is None
    if hint is float:
        return lambda v: type(v) is float or type(v) is int
    if hint in (int, bool, str):
        return lambda v: type(v) is hint
    if isinstance(hint, type) and is_dataclass(hint):
        checks = [(f.name, _fits(_hints(hint)[f.name])) for f in fields(hint)]
        return lambda v: isinstance(v, hint) and all(f(getattr(v, name)) for name, f in checks)
    raise AssertionError(f"no check for the type {hint!r}")  # a record type this module misses


def check_value(value: Any, hint: Any, where: str) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if origin is Union:
        matching = [a for a in args if isinstance(a, type) and is_dataclass(a) and isinstance(value, a)]
        if matching:  # a record of one of the kinds: its own fields say what is wrong
            check_value(value, matching[0], where)
            return
        for option in args:
            try:
                check_value(value, option, where)
                return
            except TypeError:
                continue
        raise TypeError(f"{where} is {_shown(value)}, not {_name(hint)}")
    if origin is tuple:
        _expect(isinstance(value, tuple), value, hint, where)
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        _expect(len(items) == len(value), value, hint, where)
        for i, (item, item_hint) in enumerate(zip(value, items)):
            check_value(item, item_hint, f"{where}[{i}]")
        return
    if origin in (dict, collections.abc.Mapping):
        _expect(isinstance(value, collections.abc.Mapping), value, hint, where)
        key_hint, value_hint = args or (Any, Any)
        for key, item in value.items():
            check_value(key, key_hint, f"{where} key")
            check_value(item, value_hint, f"{where}[{key!r:.40}]")
        return
    if hint is type(None):
        _expect(value is None, value, hint, where)
    elif hint is float:  # JSON writes whole floats as they are; ints stand for floats in Python typing
        _expect(isinstance(value, (int, float)) and not isinstance(value, bool), value, hint, where)
    elif hint is int:
        _expect(isinstance(value, int) and not isinstance(value, bool), value, hint, where)
    elif hint in (bool, str):
        _expect(isinstance(value, hint), value, hint, where)
    elif isinstance(hint, type) and is_dataclass(hint):
        _expect(isinstance(value, hint), value, hint, where)
        _explain_fields(value, where)
    else:
        raise AssertionError(f"{where}: no check for the type {hint!r}")  # a record type this module misses


def _expect(ok: bool, value: Any, hint: Any, where: str) -> None:
    if not ok:
        raise TypeError(f"{where} is {_shown(value)}, not {_name(hint)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
