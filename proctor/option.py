"""One option of a run, declared once.

A declaration gives its default, its help, how its command-line flag reads text, and how a
value given to `proctor.evaluate` is checked.

A declaration is a dataclass field made with `option(...)`; `proctor.options` turns those
fields into the `proctor run` flags, the `evaluate` keywords and their checks, so the three
cannot disagree. Every check raises `UserError` naming the keyword (and its flag) and what
it accepts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import Field, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.errors import UserError

Check = Callable[[str, Any], Any]   # (keyword, value) -> the value as the run uses it


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
    """How a message names keyword `name`: with its flag, e.g. 'limit (--limit)'."""
    return f"{name} (--{name.replace('_', '-')})"


# ---- checks of API values --------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> Optional[int]:
    """Accept a whole number above 0, or None."""
    if value is None or (_is_int(value) and value > 0):
        return value
    raise UserError(f"{named(name)} must be a positive whole number, got {value!r}")


def count(name: str, value: Any) -> Optional[int]:
    """Accept a whole number >= 0, or None."""
    if value is None or (_is_int(value) and value >= 0):
        return value
    raise UserError(f"{named(name)} must be a whole number >= 0, got {value!r}")


def seed_number(name: str, value: Any) -> int:
    """Accept a seed: a whole number in [0, 2**63)."""
    if _is_int(value) and 0 <= value < 2**63:
        return value
    raise UserError(f"{named(name)} must be a whole number between 0 and 2**63 - 1, got {value!r}")


def boolean(name: str, value: Any) -> bool:
    """Accept True or False (not a truthy value of another type)."""
    if isinstance(value, bool):
        return value
    raise UserError(f"{name} must be True or False, got {value!r}")


def maybe_flag(name: str, value: Any) -> Optional[bool]:
    """Accept True, False or None."""
    if value is None or isinstance(value, bool):
        return value
    raise UserError(f"{name} must be True, False or None, got {value!r}")


def some_text(name: str, value: Any) -> Optional[str]:
    """Accept a non-empty string, or None."""
    if value is None or (isinstance(value, str) and value):
        return value
    raise UserError(f"{named(name)} must be a non-empty string, got {value!r}")


def path(name: str, value: Any) -> Optional[str]:
    """Accept a non-empty path (a string or os.PathLike), or None; return it as a string."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        return os.fspath(value)
    raise UserError(f"{named(name)} must be a path (a string or os.PathLike), got {value!r}")


def paths(name: str, value: Any) -> tuple[str, ...]:
    """Accept one path or a list of them; return them as a tuple of strings."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, os.PathLike)) and os.fspath(v)
                                                for v in value):
        return tuple(os.fspath(v) for v in value)
    raise UserError(f"{named(name)} must be a path or a list of paths (task files, modules or directories), "
                    f"got {value!r}")


def one_of(*choices: Any) -> Check:
    """Build the check of a string that must be one of `choices`."""
    def check(name: str, value: Any) -> Any:
        if isinstance(value, str) and value in choices:
            return value
        raise UserError(f"{named(name)} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return check


def fraction(name: str, value: Any) -> Optional[float]:
    """Accept a number in (0, 1], or None; return it as a float."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    raise UserError(f"{named(name)} must be a fraction in (0, 1], got {value}")


def json_object(name: str, value: Any) -> Optional[dict]:
    """Accept a mapping with string keys (a JSON object of request fields), or None; return a dict copy."""
    if value is None:
        return None
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise UserError(f"{named(name)} must be a dict of request fields (JSON object), got {value!r}")


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
