"""Which isolation this machine allows, and the command prefix that sets it up.

From strongest to weakest (the first that works is used):

- `namespaces`: util-linux `unshare` with new network, PID, mount, IPC and UTS
  namespaces; the runner (PID 1 and root there) builds a new root on one size-capped
  tmpfs with read-only bind mounts of just the interpreter's files (`root_layout()`),
  a minimal /dev and a fresh /proc, and pivots into it (see `_rootfs`).
- `bwrap`: bubblewrap with the same namespaces, building the same layout itself (the
  machine this was developed on has none installed: checked with a bubblewrap 0.8
  binary put on PATH).
- `none`: plain child processes in a fresh host temporary directory. It has no network
  isolation, so it is refused unless the caller passes `allow_unsafe_exec=True`.

On top of either namespace kind, when the evaluator is root the candidate runs under a
dedicated unprivileged uid per pool slot and the tester under another
(`candidate_uid` / `tester_uid`): the candidate cannot signal, trace or read the tester
or the runner, and RLIMIT_NPROC binds. When not root, the namespaces are entered through
a user namespace instead, with no uid to drop to: the candidate gives up its
capabilities and the trusted processes are non-dumpable (untested here: this machine
runs as root).
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from proctor.errors import UserError
from proctor.sandbox import cgroups
from proctor.sandbox.layout import outermost, root_layout

#: first of 512 uids for sandbox slots (Debian's "allocated on demand" range 60000-64999):
#: candidates use BASE + slot, testers BASE + 256 + slot. They must belong to no real
#: account, as RLIMIT_NPROC counts all of a uid's processes.
SANDBOX_UID_BASE = 64000
SLOTS = 256


def candidate_uid(slot: int) -> int:
    """Return the uid the candidate of pool slot `slot` runs under."""
    return SANDBOX_UID_BASE + slot


def tester_uid(slot: int) -> int:
    """Return the uid the tester of pool slot `slot` runs under."""
    return SANDBOX_UID_BASE + SLOTS + slot


class Isolation(str, enum.Enum):
    """The ways a sandbox run can be isolated (see the module docstring)."""

    BWRAP = "bwrap"
    NAMESPACES = "namespaces"
    NONE = "none"


@dataclass(frozen=True)
class SandboxInfo:
    """What a sandbox run is isolated by; `describe()` is what a run's metrics carry."""

    isolation: Isolation
    drops_uid: bool                     # program runs as SANDBOX_UID_BASE + slot
    cgroups: tuple[str, ...] = ()       # controllers limiting each run, e.g. ("pids", "memory")

    @property
    def network_isolated(self) -> bool:
        """Whether the run is cut off from the network: every isolation but `none`."""
        return self.isolation is not Isolation.NONE

    def describe(self) -> str:
        """Return the isolation as a run's metrics carry it, e.g. "namespaces+uid-drop+rlimits+cgroup-pids"."""
        parts = [self.isolation.value, "uid-drop" if self.drops_uid else "same-uid", "rlimits"]
        parts += [f"cgroup-{c}" for c in self.cgroups]
        return "+".join(parts)


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _is_root() -> bool:
    return os.geteuid() == 0


def _uid_mapped(uid: int) -> bool:
    """Whether `uid` exists in this (possibly container's) user namespace."""
    try:
        with open("/proc/self/uid_map") as f:
            for line in f:
                inside, _outside, count = (int(x) for x in line.split())
                if inside <= uid < inside + count:
                    return True
    except OSError:
        return False
    return False


@lru_cache(maxsize=1)
def interpreter_dirs() -> tuple[str, ...]:
    """Return the directories the sandbox must be able to read in the `none` isolation.

    They are the interpreter's, `python -I`'s import path and the runner script's
    (outermost directories only).
    """
    out = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                         capture_output=True, text=True, check=True, env={"PATH": os.defpath})
    wanted = {*json.loads(out.stdout), sys.prefix, sys.base_prefix,
              os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.abspath(__file__))}
    return outermost(p for p in wanted if p and os.path.isdir(p))


def _blocking_ancestor(path: str) -> Optional[str]:
    """Return the highest ancestor of `path` that other users cannot enter (e.g. /root, mode 700)."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return ancestor
    return None


def exposures() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Return each (ancestor, interpreter dirs under it) that keeps the sandbox uid from those dirs.

    Only a new root gets past such an ancestor, as it creates every parent 0755 itself.
    """
    plan: dict[str, list[str]] = {}
    for d in interpreter_dirs():
        ancestor = _blocking_ancestor(d)
        if ancestor is not None:
            plan.setdefault(ancestor, []).append(d)
    return tuple((a, tuple(ds)) for a, ds in plan.items())


RUNNER_FILES = ("_runner.py", "_candidate.py", "_confine.py", "_rootfs.py", "_tester.py", "_wire.py")
BWRAP_RUNNER_DIR = "/.proctor-runner"   # where bwrap shows the runner (and nothing else of proctor)


def runner_path(info: SandboxInfo) -> str:
    """Return the path of `_runner.py` as the sandbox sees it."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(BWRAP_RUNNER_DIR if info.isolation is Isolation.BWRAP else here, "_runner.py")


def bwrap_prefix(root: bool) -> list[str]:
    """Build the bwrap command: the namespaces, the read-only root layout and the runner's files.

    Without `root`, bwrap also makes a user namespace.
    """
    layout = root_layout()
    here = os.path.dirname(os.path.abspath(__file__))
    prefix = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
              "--die-with-parent", "--new-session", "--dev", "/dev", "--proc", "/proc",
              "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    made = set()
    for path in (*layout.dirs, *layout.files):
        # --dir makes each parent 0755 (bwrap would create missing parents 0700)
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            parent = "/" + "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                prefix += ["--dir", parent]
        prefix += ["--ro-bind", path, path]
    for h in layout.hidden:
        prefix += ["--tmpfs", h, "--remount-ro", h]
    prefix += ["--dir", BWRAP_RUNNER_DIR]
    for name in RUNNER_FILES:
        prefix += ["--ro-bind", os.path.join(here, name), f"{BWRAP_RUNNER_DIR}/{name}"]
    if not root:
        prefix.insert(1, "--unshare-user")
    return prefix


def unshare_prefix(root: bool) -> list[str]:
    """Build the unshare command for the new namespaces; without `root`, as root of a new user namespace."""
    prefix = ["unshare", "--net", "--pid", "--mount", "--ipc", "--uts", "--fork", "--kill-child"]
    if not root:
        prefix.insert(1, "--map-root-user")
    return prefix


@lru_cache(maxsize=1)
def detect() -> SandboxInfo:
    """Return the strongest isolation that works here (probed once per process)."""
    root = _is_root()
    drops_uid = root and _uid_mapped(tester_uid(SLOTS - 1))
    controllers = cgroups.available()
    if shutil.which("unshare") and _works(unshare_prefix(root) + ["true"]):
        return SandboxInfo(Isolation.NAMESPACES, drops_uid, controllers)
    # bwrap's root holds the interpreter and nothing else to run
    if shutil.which("bwrap") and _works(bwrap_prefix(root) + [sys.executable, "-I", "-c", ""]):
        return SandboxInfo(Isolation.BWRAP, drops_uid, controllers)
    # Without a mount namespace nothing can make a stdlib under e.g. /root readable to
    # another uid, and a program that cannot import `math` would fail every test.
    return SandboxInfo(Isolation.NONE, drops_uid and not exposures(), controllers)


def command_prefix(info: SandboxInfo) -> list[str]:
    """Return the launcher command, its path resolved here, as the sandbox's own PATH is minimal."""
    root = _is_root()
    if info.isolation is Isolation.BWRAP:
        prefix = bwrap_prefix(root)
    elif info.isolation is Isolation.NAMESPACES:
        prefix = unshare_prefix(root)
    else:
        return []
    return [shutil.which(prefix[0]) or prefix[0], *prefix[1:]]


def require(info: SandboxInfo, allow_unsafe_exec: bool) -> None:
    """Refuse to run untrusted code without network isolation unless explicitly allowed."""
    if info.network_isolated or allow_unsafe_exec:
        return
    raise UserError(
        "cannot isolate generated code from the network here (neither bubblewrap nor "
        "`unshare --net` works); install bubblewrap or allow namespaces, or pass "
        "--allow-unsafe-exec to run it anyway with only rlimits"
        + (" and a separate uid" if info.drops_uid else ""))

