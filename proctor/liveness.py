"""Names that say which process made a thing.

With them a later run can tell what a dead process left behind (to remove) from what a
live concurrent run is using (to keep).

A tag is "<pid>-<start time>": the start time (clock ticks since boot, /proc/<pid>/stat)
tells a reused pid apart from the process that made the thing.
"""

from __future__ import annotations

import os
from typing import Optional


def start_time(pid: int) -> Optional[int]:
    """Return the process's start time in clock ticks since boot (field 22 of /proc/pid/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_tag() -> str:
    """Return this process's tag."""
    pid = os.getpid()
    return f"{pid}-{start_time(pid)}"


def maker_alive(pid: int, start: int) -> bool:
    """Whether the process that wrote tag `pid-start` still runs."""
    return start_time(pid) == start
