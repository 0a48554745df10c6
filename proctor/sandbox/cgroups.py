"""Per-run cgroups (pids, memory) where the cgroup filesystem is writable.

rlimits are per process (RLIMIT_AS) or per uid (RLIMIT_NPROC); a cgroup bounds the
whole run: every process it forks, and the tmpfs pages it writes. Each run gets a fresh
child cgroup under the evaluator's own, which the runner joins before forking the
program. Works with cgroup v1 (a hierarchy per controller) and v2 (one unified
hierarchy, when the controllers are delegated to our cgroup's children).

A run's cgroup is named by the caller (`leftovers.run_name()`: it carries the creating
process's identity), and `sweep(is_dead)` removes those a dead process left behind.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

ROOT = Path("/sys/fs/cgroup")
# controller -> (v1 limit file, v2 limit file)
_LIMIT_FILES = {"pids": ("pids.max", "pids.max"), "memory": ("memory.limit_in_bytes", "memory.max")}


@dataclass(frozen=True)
class _Hierarchy:
    controller: str
    parent: Path        # where run cgroups are created
    limit_file: str
    v2: bool


def _own_path(controller: Optional[str]) -> Optional[str]:
    """Return this process's cgroup path in the hierarchy of `controller` (None: the v2 one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller in names.split(",")):
            return path
    return None


def _probe(h: _Hierarchy) -> bool:
    probe = h.parent / f"proctor-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / h.limit_file).is_file() and os.access(probe / h.limit_file, os.W_OK)
    finally:
        probe.rmdir()


@lru_cache(maxsize=1)
def _hierarchies() -> tuple[_Hierarchy, ...]:
    found = []
    for controller, (v1_file, v2_file) in _LIMIT_FILES.items():
        candidates = []
        own_v1 = _own_path(controller)
        if own_v1 is not None and (ROOT / controller).is_dir():
            candidates.append(_Hierarchy(controller, ROOT / controller / own_v1.lstrip("/"), v1_file, False))
        own_v2 = _own_path(None)
        if own_v2 is not None and (ROOT / "cgroup.controllers").is_file():
            candidates.append(_Hierarchy(controller, ROOT / own_v2.lstrip("/"), v2_file, True))
        usable = next((h for h in candidates if _probe(h)), None)
        if usable is not None:
            found.append(usable)
    return tuple(found)


def available() -> tuple[str, ...]:
    """Return the controllers a run can be limited by here, e.g. ("pids", "memory") or ()."""
    return tuple(h.controller for h in _hierarchies())


def _no_swap(path: Path, v2: bool, memory_bytes: int) -> None:
    """Turn swap off for the cgroup at `path`, best effort.

    A run over its memory limit is then killed rather than swapped out (which is slow, and
    writes its pages to the host's disk).
    """
    settings = [("memory.swap.max", "0")] if v2 else [("memory.swappiness", "0"),
                                                       ("memory.memsw.limit_in_bytes", str(memory_bytes))]
    for name, value in settings:
        try:
            (path / name).write_text(value)
        except OSError:
            pass


class RunCgroups:
    """The cgroups of one run: created with limits, joined by the runner, removed after."""

    def __init__(self, name: str, max_procs: int, memory_bytes: int, enabled: bool = True):
        """Create cgroup `name` with its limit in every usable hierarchy (in none unless `enabled`)."""
        self.dirs: list[tuple[_Hierarchy, Path]] = []
        limits = {"pids": max_procs, "memory": memory_bytes}
        for h in _hierarchies() if enabled else ():
            path = h.parent / name
            path.mkdir()
            self.dirs.append((h, path))
            (path / h.limit_file).write_text(str(limits[h.controller]))
            if h.controller == "memory":
                _no_swap(path, h.v2, memory_bytes)

    @property
    def procs_files(self) -> list[str]:
        """The `cgroup.procs` file of each of the run's cgroups, which the runner joins by writing to it."""
        return [str(path / "cgroup.procs") for _, path in self.dirs]

    def oom_killed(self) -> bool:
        """Return whether the OOM killer killed a process in the run's memory cgroup."""
        for h, path in self.dirs:
            if h.controller != "memory":
                continue
            events = path / ("memory.events" if h.v2 else "memory.oom_control")
            try:
                for line in events.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
            except (OSError, ValueError):
                pass
        return False

    def remove(self) -> None:
        """Remove the run's cgroups, retrying for up to a second while they still hold processes."""
        # The namespace's processes die with its init, but reaping can lag a moment.
        for _, path in self.dirs:
            for _attempt in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def sweep(is_leftover: Callable[[str, float], bool], prefix: str = "proctor-sandbox-") -> list[Path]:
    """Remove every run cgroup that `is_leftover(name, mtime)` says a dead run left; return those removed.

    The kernel refuses to remove one that still has processes.
    """
    removed = []
    for h in _hierarchies():
        try:
            entries = list(h.parent.iterdir())
        except OSError:
            continue
        for path in entries:
            if not path.name.startswith(prefix):
                continue
            try:
                if is_leftover(path.name, path.stat().st_mtime):
                    path.rmdir()
                    removed.append(path)
            except OSError:
                pass
    return removed
