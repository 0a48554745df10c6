"""One option of a run, declared once.

A declaration gives its default, its help, how its command-line flag reads text, and how a
value given to `proctor.evaluate` is checked.

A declaration is a dataclass field made with `option(...)`; `proctor.options` turns those
fields into the `proctor run` flags, the `evaluate` keywords and their checks, so the three
cannot disagree. Every check raises `UserError` naming the keyword (and its flag) and what
it accepts. The same checks guard the other public functions' arguments
(`checked_arguments`), so that a wrong type or value anywhere is one such line.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
from dataclasses import Field, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar, cast

from proctor.errors import UserError

Check = Callable[[str, Any], Any]   # (keyword, value) -> the value as the run uses it
F = TypeVar("F", bound=Callable[..., Any])


class Required:
    """The default of an option that has none (`tasks`)."""

    def __repr__(self) -> str:
        """Show the missing default as `required` wherever it is printed."""
        return "required"


REQUIRED: Any = Required()


@dataclass(frozen=True)
class Option:
    """How one run option appears on the command line and is checked in the API."""

    help: str
    check: Check
    parse: Optional[Callable[[str], Any]] = None       # argparse `type`: the flag's text -> value
    choices: Optional[tuple[Any, ...]] = None
    metavar: Optional[str] = None
    #: argparse keywords beyond type/choices/default/help (nargs, const, action)
    cli: Mapping[str, Any] = field(default_factory=dict)
    #: the flag's value -> the keyword's (e.g. `--label` pairs -> a dict); None: the same
    from_cli: Optional[Callable[[Any], Any]] = None
    flag: Optional[str] = None                          # default: --name-with-dashes
    api_only: bool = False                              # no flag (e.g. `command`)


def option(default: Any, help: str, check: Check, **how: Any) -> Any:
    """Return a dataclass field declaring a run option (see `Option`)."""
    return field(default=default, metadata={"option": Option(help, check, **how)})


def declared(f: Field) -> Optional[Option]:
    """Return the option a dataclass field declares, if any."""
    return f.metadata.get("option")


def spec_of(f: Field) -> Option:
    """Return the option a dataclass field declares (TypeError for a field that declares none)."""
    spec = declared(f)
    if spec is None:
        raise TypeError(f"{f.name} is not a declared option")
    return spec


def flag_of(name: str, spec: Option) -> str:
    """Return the command-line flag of option `name`."""
    return spec.flag or "--" + name.replace("_", "-")


def named(name: str) -> str:
    """How a message names keyword `name`: with its flag, e.g. 'limit (--limit)'.

    A name that is not a keyword's (`read_run(): directory`) is shown as it is.
    """
    return f"{name} (--{name.replace('_', '-')})" if name.isidentifier() else name


def shown(value: Any) -> str:
    """Return `repr(value)` for a message: at most 60 characters, and never an error of its own."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the message it is in
        return f"a {type(value).__name__} object"
    return text if len(text) <= 60 else text[:57] + "..."


def run_check(check: Check, name: str, value: Any) -> Any:
    """Return `check(name, value)`; a value that breaks the check itself is a UserError too.

    (An object whose `__len__`, `__eq__` or `__iter__` raises, say: it is named with what the
    check accepts, from the first line of the check's docstring.)
    """
    try:
        return check(name, value)
    except UserError:
        raise
    except Exception as e:
        accepts = (check.__doc__ or "").strip().splitlines()[0:1]
        what = accepts[0].removeprefix("Accept ").rstrip(".") if accepts else "what help(proctor.evaluate) says"
        raise UserError(f"{named(name)} must be {what}; got {shown(value)} (checking it raised "
                        f"{type(e).__name__})") from None


def checked_arguments(**checks: Check) -> Callable[[F], F]:
    """Check the named arguments of every call with these checks before the function's body runs.

    A wrong one is one UserError naming the function and the argument
    (`read_run(): directory must be ...`); the function gets the values as the checks return
    them. Arguments left at their defaults are not checked.
    """
    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        assert set(checks) <= set(signature.parameters), f"{function.__name__} has no {set(checks)}"

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)  # a missing or unknown argument: Python's own TypeError
            for name, check in checks.items():
                if name in bound.arguments:
                    bound.arguments[name] = run_check(check, f"{function.__name__}(): {name}",
                                                      bound.arguments[name])
            return function(*bound.args, **bound.kwargs)

        return cast(F, call)

    return decorate


# ---- checks of API values --------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> Optional[int]:
    """Accept a whole number above 0, or None."""
    if value is None or (_is_int(value) and value > 0):
        return value
    raise UserError(f"{named(name)} must be a positive whole number, got {shown(value)}")


def count(name: str, value: Any) -> Optional[int]:
    """Accept a whole number >= 0, or None."""
    if value is None or (_is_int(value) and value >= 0):
        return value
    raise UserError(f"{named(name)} must be a whole number >= 0, got {shown(value)}")


def seed_number(name: str, value: Any) -> int:
    """Accept a seed: a whole number in [0, 2**63)."""
    if _is_int(value) and 0 <= value < 2**63:
        return value
    raise UserError(f"{named(name)} must be a whole number between 0 and 2**63 - 1, got {shown(value)}")


def boolean(name: str, value: Any) -> bool:
    """Accept True or False (not a truthy value of another type)."""
    if isinstance(value, bool):
        return value
    raise UserError(f"{name} must be True or False, got {shown(value)}")


def maybe_flag(name: str, value: Any) -> Optional[bool]:
    """Accept True, False or None."""
    if value is None or isinstance(value, bool):
        return value
    raise UserError(f"{name} must be True, False or None, got {shown(value)}")


def text(name: str, value: Any) -> str:
    """Accept a non-empty string."""
    if isinstance(value, str) and value:
        return str.__str__(value)
    raise UserError(f"{named(name)} must be a non-empty string, got {shown(value)}")


def some_text(name: str, value: Any) -> Optional[str]:
    """Accept a non-empty string, or None."""
    return None if value is None else text(name, value)


def path_text(value: Any) -> Optional[str]:
    """Return the path `value` stands for: a non-empty string, or what an os.PathLike gives as one; else None.

    An os.PathLike whose `__fspath__` fails or gives bytes is not a path here, and neither
    is a string with a NUL character (no file can be named so).
    """
    if isinstance(value, str):
        found: Any = str.__str__(value)
    elif isinstance(value, os.PathLike):
        try:
            found = os.fspath(value)
        except Exception:
            return None
    else:
        return None
    return str.__str__(found) if isinstance(found, str) and found and "\0" not in found else None


def one_path(name: str, value: Any) -> str:
    """Accept a non-empty path: a string or an os.PathLike that gives one."""
    found = path_text(value)
    if found is None:
        raise UserError(f"{named(name)} must be a path (a non-empty string or an os.PathLike giving one), "
                        f"got {shown(value)}")
    return found


def path(name: str, value: Any) -> Optional[str]:
    """Accept a non-empty path (a string or an os.PathLike that gives one), or None; return it as a string."""
    return None if value is None else one_path(name, value)


def paths(name: str, value: Any) -> tuple[str, ...]:
    """Accept one path or a list of them (task files, modules or directories); return them as a tuple of strings."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    found = [path_text(v) for v in value] if isinstance(value, (list, tuple)) else [None]
    if any(p is None for p in found):
        raise UserError(f"{named(name)} must be a path or a list of paths (task files, modules or directories), "
                        f"got {shown(value)}")
    return tuple(cast(str, p) for p in found)


def instance_of(kind: type, what: str, *, optional: bool = False) -> Check:
    """Build the check of an object of type `kind` (`what` names it in messages), or None when `optional`."""
    def check(name: str, value: Any) -> Any:
        if isinstance(value, kind) or (optional and value is None):
            return value
        raise UserError(f"{named(name)} must be {what}{' or None' if optional else ''}, got {shown(value)}")
    check.__doc__ = f"Accept {what}{' or None' if optional else ''}."
    return check


def one_of(*choices: Any) -> Check:
    """Build the check of a string that must be one of `choices`."""
    def check(name: str, value: Any) -> Any:
        if isinstance(value, str) and value in choices:
            return str.__str__(value)
        raise UserError(f"{named(name)} must be one of {', '.join(map(str, choices))}; got {shown(value)}")
    check.__doc__ = f"Accept one of {', '.join(map(str, choices))}."
    return check


def fraction(name: str, value: Any) -> Optional[float]:
    """Accept a number in (0, 1], or None; return it as a float."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    raise UserError(f"{named(name)} must be a fraction in (0, 1], got {shown(value)}")


def json_object(name: str, value: Any) -> Optional[dict]:
    """Accept a mapping with string keys (a JSON object of request fields), or None; return a dict copy."""
    if value is None:
        return None
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise UserError(f"{named(name)} must be a dict of request fields (JSON object), got {shown(value)}")


def is_default(value: Any, default: Any) -> bool:
    """Return whether `value` is `default` (a value that cannot be compared is not)."""
    try:
        return value is default or bool(type(value) is type(default) and value == default)
    except Exception:
        return False


def anything(name: str, value: Any) -> Any:
    """Accept any value unchanged."""
    return value


# ---- the flags' text -> values (argparse types: their errors become one line) ----------------


def whole_number(text: str) -> int:
    """Parse a flag's text as a whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def parse_positive_int(text: str) -> int:
    """Parse a flag's text as a whole number above 0."""
    value = whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value}")
    return value


def parse_count(text: str) -> int:
    """Parse a flag's text as a whole number >= 0."""
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def parse_seed(text: str) -> int:
    """Parse a flag's text as a seed: a whole number in [0, 2**63)."""
    value = whole_number(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**63 - 1, got {value}")
    return value


def parse_fraction(text: str) -> float:
    """Parse a flag's text as a finite number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {text}")
    return value


def parse_json_object(text: str) -> dict:
    """Parse a flag's text as a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def parse_batch_size(text: str) -> Any:
    """Parse a flag's text as "auto" or a whole number above 0."""
    return "auto" if text == "auto" else parse_positive_int(text)


def specs_of(values: Sequence[str]) -> list[str]:
    """`--tasks a,b c` -> ["a", "b", "c"], order kept, duplicates dropped."""
    specs: list[str] = []
    for value in values:
        for spec in value.split(","):
            spec = spec.strip()
            if spec and spec not in specs:
                specs.append(spec)
    if not specs:
        raise UserError("--tasks is empty; name at least one task spec (`proctor tasks` lists them)")
    return specs
