"""The one exception type for mistakes a user can fix.

The CLI prints its message as a single line and exits with code 2; everything else
is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A bad spec, missing data, malformed file or bad option; the message says how to fix it."""


class BatchTooLarge(Exception):
    """A backend ran out of memory on a batch; the engine splits the batch and retries."""
