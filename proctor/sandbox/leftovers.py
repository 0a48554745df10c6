"""What a killed evaluator leaves behind, and removing it on the next run.

Everything a run creates on the host (its cgroups; for the `none` isolation its work
directory) is named `proctor-sandbox-<pid>-<start time>-<random>` after the process that
created it, so `sweep()` can tell a dead creator's (removed) from a live concurrent
run's (kept, whatever process it belongs to). The sandbox processes themselves die with
the evaluator: the runner treats the end of its stdin as the evaluator's death.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from proctor.liveness import maker_alive, process_tag
from proctor.sandbox import cgroups

PREFIX = "proctor-sandbox-"
_TAGGED = re.compile(rf"^{PREFIX}(\d+)-(\d+)-")
_LEGACY = re.compile(rf"^{PREFIX}[0-9a-f]{{12}}$")   # cgroups named before the creator was
LEGACY_AGE_S = 600.0                                  # far longer than any run lasts


def run_name() -> str:
    """Make a fresh name for one run's cgroups."""
    return f"{PREFIX}{process_tag()}-{secrets.token_hex(6)}"


def host_workdir() -> str:
    """Create a fresh host work directory (the `none` isolation's), named like a run cgroup."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{process_tag()}-")


def creator_dead(name: str, mtime: float, now: float) -> bool:
    """Return whether `name` was made by a process that no longer exists.

    A pid reused since has another start time. Untagged names count as dead once they are old.
    """
    m = _TAGGED.match(name)
    if m is None:
        return bool(_LEGACY.match(name)) and now - mtime > LEGACY_AGE_S
    return not maker_alive(int(m.group(1)), int(m.group(2)))


def sweep() -> tuple[list[Path], list[Path]]:
    """Remove dead runs' cgroups and host work directories; return (cgroups removed, directories removed).

    Only empty cgroups go: the kernel refuses others.
    """
    now = time.time()
    removed_cgroups = cgroups.sweep(lambda name, mtime: creator_dead(name, mtime, now), PREFIX)
    removed_dirs = []
    tmp = Path(tempfile.gettempdir())
    try:
        entries = [p for p in tmp.iterdir() if p.name.startswith(PREFIX) and _TAGGED.match(p.name)]
    except OSError:
        entries = []
    for path in entries:
        try:
            if path.is_dir() and not path.is_symlink() and creator_dead(path.name, 0.0, now):
                shutil.rmtree(path, ignore_errors=True)
                removed_dirs.append(path)
        except OSError:
            pass
    return removed_cgroups, removed_dirs
