"""The trusted half of a sandboxed run: executed as `python -I _runner.py RESULT_FD`.

It runs inside the namespaces the evaluator set up (usually as PID 1 of a new PID
namespace, as root of it), reads its job as one JSON line on stdin, then:

1. mounts private size-limited tmpfs over /tmp, /var/tmp and /dev/shm (when asked:
   the namespaces are fresh and nothing else hides the host's world-writable dirs),
   makes the interpreter's import dirs reachable for the sandbox uid when they sit
   under an unreadable directory such as /root, and makes an empty work directory
   owned by the sandbox uid;
2. joins the per-run cgroups the evaluator created (pids, memory), if any;
3. forks the program's process, which sets its rlimits, drops to the sandbox uid and
   `exec`s the program source in-process; only when that returns normally does it
   write the job's nonce with "passed" to RESULT_FD (so `sys.exit(0)` or `os._exit(0)`
   before the tests finish is not a pass);
4. waits for it with the wall-clock limit, kills it on overrun, and reports how it ended.

When this process exits as PID 1, the kernel kills everything left in the namespace.
Standard library only: it must not import proctor.
"""

import ctypes
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time

MS_NOSUID, MS_NODEV, MS_BIND, MS_MOVE, MS_REC = 2, 4, 4096, 8192, 16384


def _report(fd: int, record: dict) -> None:
    # One short line per write: atomic on a pipe (< PIPE_BUF), so records never interleave.
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    except OSError:
        pass


def _mount(source: str, target: str, fstype: str, flags: int, opts: str = "") -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), flags, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _expose(ancestor: str, dirs: list) -> None:
    """Cover `ancestor` (unreadable to the sandbox uid) with a tmpfs, then put the
    interpreter's import dirs under it back in place, read through bind mounts."""
    staged = []
    for d in dirs:
        stage = tempfile.mkdtemp(prefix=".stage-", dir="/tmp")
        _mount(d, stage, "", MS_BIND | MS_REC)
        staged.append((stage, d))
    _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for stage, d in staged:
        os.makedirs(d, mode=0o755, exist_ok=True)
        _mount(stage, d, "", MS_MOVE)
        os.rmdir(stage)


def _prepare(job: dict) -> str:
    """Mounts, cgroups and the work directory; returns the work directory."""
    if job["mount_tmp"]:
        for target in ("/tmp", "/var/tmp", "/dev/shm"):
            if os.path.isdir(target):
                _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
                       f"size={job['tmp_bytes']},mode=1777")
        for ancestor, dirs in job["expose"]:
            _expose(ancestor, dirs)
    for procs_file in job["cgroup_procs"]:
        with open(procs_file, "w") as f:
            f.write("0")  # "0" = the writing process; its children inherit the cgroup
    workdir = job["workdir"] or tempfile.mkdtemp(prefix="work-", dir="/tmp")
    if job["uid"] is not None:
        os.chown(workdir, job["uid"], job["gid"])
    os.chmod(workdir, 0o700)
    return workdir


def _set_limits(job: dict) -> None:
    cpu = job["cpu_s"]
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (job["memory_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (job["file_bytes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if job["max_procs"] is not None:
        limits.append((resource.RLIMIT_NPROC, (job["max_procs"],) * 2))
    for which, value in limits:
        resource.setrlimit(which, value)


def _program(job: dict, workdir: str, fd: int) -> None:
    """The forked child: limits, uid drop, then the untrusted source. Never returns."""
    nonce = job["nonce"]
    try:
        os.setsid()
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(job["env"], HOME=workdir, TMPDIR=workdir)
        _set_limits(job)
        if job["uid"] is not None:
            os.setgroups([])
            os.setgid(job["gid"])
            os.setuid(job["uid"])
        code = compile(job["source"], "program.py", "exec")
    except SyntaxError as e:
        _report(fd, {"nonce": nonce, "pid": os.getpid(), "outcome": "failed",
                     "detail": f"SyntaxError: {e}"})
        os._exit(1)
    except BaseException as e:
        _report(fd, {"nonce": nonce, "pid": os.getpid(), "outcome": "error",
                     "detail": f"sandbox setup: {e!r}"})
        os._exit(1)
    job = None  # the nonce stays only in this frame's `nonce`
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except MemoryError:
        record = {"outcome": "memory", "detail": "MemoryError"}
    except SystemExit as e:
        record = {"outcome": "failed", "detail": f"SystemExit({e.code!r}) before the tests finished"}
    except BaseException as e:
        record = {"outcome": "failed", "detail": f"{type(e).__name__}: {e}"[:300]}
    else:
        record = {"outcome": "passed", "detail": ""}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    # The pid tells the runner's own child apart from processes the program forked.
    _report(fd, {"nonce": nonce, "pid": os.getpid(), **record})
    os._exit(0)


def _kill_leftovers(job: dict, child: int) -> None:
    """Outside a PID namespace nobody reaps the program's descendants for us."""
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    if job["uid"] is not None and os.getpid() != 1:
        # A helper with the sandbox uid can signal exactly that uid's processes.
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(job["gid"])
                os.setuid(job["uid"])
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def main() -> None:
    fd = int(sys.argv[1])
    job = json.loads(sys.stdin.readline())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the program reads an empty stdin
    try:
        workdir = _prepare(job)
    except BaseException as e:
        _report(fd, {"nonce": job["nonce"], "runner": True, "setup_error": repr(e)})
        sys.exit(1)
    start = time.monotonic()
    child = os.fork()
    if child == 0:
        _program(job, workdir, fd)
    pidfd = os.pidfd_open(child)
    ready, _, _ = select.select([pidfd], [], [], job["wall_s"])
    timed_out = not ready
    if timed_out:
        os.kill(child, signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    elapsed = time.monotonic() - start
    _kill_leftovers(job, child)
    _report(fd, {"nonce": job["nonce"], "runner": True, "child_pid": child, "timed_out": timed_out,
                 "exit_code": os.waitstatus_to_exitcode(status), "elapsed_s": round(elapsed, 3)})


if __name__ == "__main__":
    main()
