"""The one exception type for mistakes a user can fix.

The CLI prints its message as a single line and exits with code 2; everything else
is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A bad spec, missing data, malformed file or bad option; the message says how to fix it."""


def check_positive_int(name: str, value: object) -> None:
    """Raise a UserError unless user option `name` is a positive integer (a bool is not one here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")


class BatchTooLarge(Exception):
    """A backend ran out of memory on a batch; the engine splits the batch and retries."""
