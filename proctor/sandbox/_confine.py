"""Turning a freshly forked child of the runner into a confined process.

It keeps only the file descriptors it is given, gets its rlimits and its own uid (or no
capabilities), with no way back. Standard library only (the runner imports it).
"""

import ctypes
import fcntl
import os
import resource
import signal

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
PR_CAPBSET_DROP, PR_SET_SECUREBITS = 24, 28
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS off, each with its lock bit
_SECUREBITS_NOROOT_LOCKED = 0x01 | 0x02 | 0x04 | 0x08 | 0x20
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _drop_capabilities() -> None:
    """Give up the process's capabilities for good: no CAP_KILL / CAP_SYS_PTRACE over the trusted processes.

    This is the least it does without a uid to drop to (a user namespace's single mapped uid).
    """
    try:
        prctl(PR_SET_SECUREBITS, _SECUREBITS_NOROOT_LOCKED)
    except OSError:
        pass
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()   # effective, permitted, inheritable (x2): all empty
    if _libc.capset(header, data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def keep_only_fds(keep: dict[int, int]) -> None:
    """Make the process's fds exactly {target: source} plus 0 = /dev/null; close the rest."""
    # Copy sources above every target first, so no target overwrites a pending source.
    floor = max([10, *keep]) + 1
    staged = {target: fcntl.fcntl(source, fcntl.F_DUPFD, floor) for target, source in keep.items()}
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    for target, fd in staged.items():
        os.dup2(fd, target)
    top = max([2, *keep])
    os.closerange(top + 1, 1 << 20)
    for fd in range(3, top + 1):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def oom_score_adj(value: int) -> None:
    """Best effort: which processes of the run the OOM killer takes first (-1000: never)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def set_limits(cpu_s: int, memory_bytes: int, file_bytes: int, max_procs: int | None) -> None:
    limits = [(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
              (resource.RLIMIT_AS, (memory_bytes, memory_bytes)),
              (resource.RLIMIT_FSIZE, (file_bytes, file_bytes)),
              (resource.RLIMIT_CORE, (0, 0))]
    if max_procs is not None:
        limits.append((resource.RLIMIT_NPROC, (max_procs, max_procs)))
    for which, value in limits:
        resource.setrlimit(which, value)


def confine(*, uid: int | None, gid: int | None, cwd: str, env: dict, parent: int, cpu_s: int,
            memory_bytes: int, file_bytes: int, max_procs: int | None = None) -> None:
    """Everything after the fds: cwd, env, rlimits, identity, then no privileges to regain.

    `parent` is the runner's pid: the process dies with it (PR_SET_PDEATHSIG is cleared by
    a uid change, so it is set last).
    """
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    set_limits(cpu_s, memory_bytes, file_bytes, max_procs)
    if uid is not None:
        assert gid is not None   # given together with the uid
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    else:
        _drop_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:   # the runner died before the line above
        os._exit(1)
