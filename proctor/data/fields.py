"""Typed fields of parsed data rows.

A missing field or one of the wrong JSON type is a UserError that says where (file:line,
or file and item) and which field.

Every reader takes its fields through `field`, so a row of the wrong shape never reaches
a task (where it would be a KeyError or TypeError, or worse, a silently different prompt).

`kind` is a Python type standing for a JSON type, optionally parameterised:
`str`, `int` (a JSON integer; true/false is not one), `float` (any finite number),
`bool`, `dict`, `list`, `list[str]`, `dict[str, float]`, or a union such as
`str | list[str]`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Optional, Sequence, TypeVar

from proctor.errors import UserError

T = TypeVar("T", bound=Sequence)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NOUNS = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object",
          list: "list"}
_PLURALS = {"string": "strings", "integer": "integers", "number": "numbers",
            "boolean": "booleans", "object": "objects", "list": "lists"}
_WITH_ARTICLE: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}


def json_type(value: Any) -> str:
    """Name the JSON type of a parsed value, with its article: 'a string', 'null', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _WITH_ARTICLE.get(type(value), type(value).__name__)


def describe(kind: Any) -> str:
    """Say what `kind` asks for, as a noun: 'string', 'list of strings', 'object of numbers'."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(k) for k in args)
    if origin is list:
        return f"list of {_PLURALS[describe(args[0])]}"
    if origin is dict:
        return f"object of {_PLURALS[describe(args[1])]}"
    return _NOUNS[kind]


def mismatch(value: Any, kind: Any) -> Optional[str]:
    """None when `value` is a `kind`, else what it is instead ('found a number at index 2')."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return None if any(mismatch(value, k) is None for k in args) else f"found {json_type(value)}"
    if origin is list:
        if not isinstance(value, list):
            return f"found {json_type(value)}"
        return next((f"{bad} at index {i}" for i, v in enumerate(value)
                     if (bad := mismatch(v, args[0]))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"found {json_type(value)}"
        return next((f"{bad} at key {k[:40]!r}" for k, v in value.items()
                     if (bad := mismatch(v, args[1]))), None)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return "found a number that is not finite"
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if ok and isinstance(value, str) and _LONE_SURROGATE.search(value):
        return "found a string holding a lone surrogate escape (\\ud800-\\udfff), which is not text"
    return None if ok else f"found {json_type(value)}"


def check(value: Any, kind: Any, what: str) -> Any:
    """`value` itself when it is a `kind`; else a UserError '<what> must be <kind>, found ...'."""
    bad = mismatch(value, kind)
    if bad:
        noun = describe(kind)
        raise UserError(f"{what} must be {'an' if noun[0] in 'aeiou' else 'a'} {noun}, {bad}")
    return value


def field(obj: Any, name: str, kind: Any, where: str) -> Any:
    """`obj[name]`, which must exist and be a `kind`; `name` may be a dotted path ("question.stem").

    `where` names `obj` as a noun phrase that says where it is ("dev.jsonl:3: the row",
    "task.json: examples[4]"); the error reads "<where> has no <kind> '<name>' (<why>)".
    """
    value = obj
    for depth, key in enumerate(name.split(".")):
        if not isinstance(value, dict):
            inside = ".".join(name.split(".")[:depth])
            raise UserError(f"{where} has no {describe(kind)} {name!r} "
                            f"({repr(inside) if inside else 'it'} is {json_type(value)}, not an object)")
        if key not in value:
            raise UserError(f"{where} has no {describe(kind)} {name!r} (missing)")
        value = value[key]
    bad = mismatch(value, kind)
    if bad:
        raise UserError(f"{where} has no {describe(kind)} {name!r} ({bad})")
    return value


def optional_field(obj: dict, name: str, kind: Any, where: str, default: Any = None) -> Any:
    """`obj[name]` when present (then it must be a `kind`), else `default`."""
    return field(obj, name, kind, where) if name in obj else default


def nonempty(rows: T, path: Any) -> T:
    """`rows` unless there are none: a data file without rows is never a valid split."""
    if not rows:
        raise UserError(f"{path} holds no rows; replace it with a complete copy")
    return rows
