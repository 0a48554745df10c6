"""The one exception type for mistakes a user can fix.

The CLI prints its message as a single line and exits with code 2; everything else
is a bug and keeps its traceback. A message names the fix as its reader gives it: a flag
(`--overwrite`) on the command line, a keyword (`overwrite=True`) in Python (`asked_as`).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_COMMAND_LINE: ContextVar[bool] = ContextVar("proctor_command_line", default=False)


class UserError(Exception):
    """A bad spec, missing data, malformed file or bad option; the message says how to fix it."""


@contextmanager
def on_command_line() -> Iterator[None]:
    """Within this block messages name options as the `proctor` command's flags."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def asked_as(name: str) -> str:
    """How a message asks for boolean option `name`: `--allow-edited` or `allow_edited=True`.

    The flag on the command line (`on_command_line`), the keyword in Python.
    """
    return "--" + name.replace("_", "-") if _COMMAND_LINE.get() else f"{name}=True"


def option_named(name: str) -> str:
    """How a message names option `name`: `--output` on the command line, `output` in Python."""
    return "--" + name.replace("_", "-") if _COMMAND_LINE.get() and not name.startswith("-") else name


def check_positive_int(name: str, value: object) -> None:
    """Raise a UserError unless user option `name` is a positive integer (a bool is not one here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")


class BatchTooLarge(Exception):
    """A backend ran out of memory on a batch; the engine splits the batch and retries."""
