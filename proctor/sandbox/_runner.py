"""The trusted supervisor of one sandboxed run.

It is executed as `python -I -S _runner.py RESULT_FD` (-S: `site` would import the host's
.pth hooks, 30 ms a run; the builtins it adds for programs, exit/quit/help/..., are added
here instead).

It runs inside the namespaces the evaluator set up (usually as PID 1 of a new PID
namespace, root of a new mount namespace) and reads its job from stdin as `_wire`
messages: first the public part (limits, identities, the candidate's source), then the
tests, only after the candidate's process exists. Then:

1. joins the per-run cgroups, builds the new root and pivots into it (`_rootfs`);
2. forks the candidate (`_candidate`): its own fds, rlimits and uid (`_confine`); it
   never holds stdin, the result fd or the tester's verdict fd, and it was forked before
   the tests were read, so they are nowhere in its memory;
3. forks the tester (`_tester`) under another uid, which runs the tests against a proxy
   of the candidate and writes the verdict on a pipe of its own;
4. waits for the verdict within the wall-clock limit, kills every process of the run,
   and writes one JSON record to RESULT_FD.

There is no run that passes a program for reaching its end: the verdict is the
tester's, written where the candidate cannot reach.

stdin stays open for the whole run: its end-of-file means the evaluator died, and the
run is killed at once. When this process exits as PID 1, the kernel kills everything
left in the namespace. Standard library only: it must not import proctor.
"""

import _sitebuiltins
import _socket
import builtins
import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _candidate  # noqa: E402
import _confine  # noqa: E402
import _rootfs  # noqa: E402
import _tester  # noqa: E402
import _wire  # noqa: E402

del sys.path[0]    # nothing is imported from the project's directory after this
LIFELINE = 0       # stdin

# What `site` gives every program (site.setquit, sethelper, setcopyright), minus the files.
builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
builtins.help = _sitebuiltins._Helper()
builtins.copyright = _sitebuiltins._Printer("copyright", sys.copyright)
builtins.credits = _sitebuiltins._Printer("credits", "See https://www.python.org/.")


class EvaluatorGone(Exception):
    pass


def _report(fd: int, record: dict) -> None:
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    except OSError:
        pass


def _prepare(job: dict) -> str:
    """Join the cgroups, set up the root filesystem and the work directory; return the work directory."""
    for procs_file in job["cgroup_procs"]:
        with open(procs_file, "w") as f:
            f.write("0")   # "0" = this process; its children inherit the cgroup
    if job["root"] is not None:
        workdir = _rootfs.build(job["root"], job["tmp_bytes"], job["uid"], job["gid"],
                                proc=job["pid_namespace"])
    else:
        workdir = job["workdir"]   # a host directory (no mount namespace), or one in bwrap's /tmp
        os.makedirs(workdir, exist_ok=True)
        if job["uid"] is not None:
            os.chown(workdir, job["uid"], job["gid"])
        os.chmod(workdir, 0o700)
    if job["import_dirs"] is not None:
        # Import only from the read-only bound dirs: a path that does not exist in the new
        # root could otherwise be created by the candidate and imported by the tester.
        bound = job["import_dirs"]
        sys.path[:] = [p for p in sys.path if any(_rootfs.under(p, d) for d in bound)]
        sys.path_importer_cache.clear()
    return workdir


def _confined(job: dict, uid: int | None, cwd: str, env: dict, max_procs: int | None) -> None:
    _confine.confine(uid=uid, gid=uid, cwd=cwd, env=env, parent=job["runner_pid"],
                     cpu_s=job["cpu_s"], memory_bytes=job["memory_bytes"],
                     file_bytes=job["file_bytes"], max_procs=max_procs)


def _fork_candidate(job: dict, workdir: str, fd: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        _confine.oom_score_adj(1000)   # over the memory limit, the candidate goes first
        _confine.keep_only_fds({3: fd})
        _confined(job, job["uid"], workdir, {**job["env"], "HOME": workdir, "TMPDIR": workdir},
                  job["max_procs"])
        _candidate.serve(job["source"], job["entry_point"], 3)
    except BaseException as e:
        print(f"sandbox: candidate setup failed: {e!r}", file=sys.stderr)
    os._exit(70)


def _fork_tester(job: dict, trusted: dict, fd: int, verdict_fd: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        _confine.keep_only_fds({3: fd, 4: verdict_fd})
        _confined(job, job["tester_uid"], "/", {**job["env"], "HOME": "/", "TMPDIR": "/tmp"}, None)
        _tester.main(job["entry_point"], trusted["prelude"], trusted["test"], 3, 4)
    except BaseException as e:
        print(f"sandbox: tester setup failed: {e!r}", file=sys.stderr)
    os._exit(70)


def _collect(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Read `fd` until EOF.

    Return what was read and whether the deadline came first. Raises EvaluatorGone.
    """
    data = bytearray()
    watched = [fd, LIFELINE]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(data), True
        ready, _, _ = select.select(watched, [], [], remaining)
        if LIFELINE in ready and not os.read(LIFELINE, 4096):
            raise EvaluatorGone()
        if fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return bytes(data), False
            if len(data) < 65536:
                data += chunk


def _exit_status(pid: int) -> int | None:
    """Return the exit code if `pid` has already ended (negative: the signal), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def _exit_status_within(pid: int, seconds: float = 0.2) -> int | None:
    """`_exit_status`, waiting up to `seconds` for a process that is about to end."""
    for _ in range(round(seconds / 0.002)):
        code = _exit_status(pid)
        if code is not None:
            return code
        time.sleep(0.002)
    return _exit_status(pid)


def _kill_uid(uid: int) -> None:
    """Kill every process of `uid` from a forked helper: with that uid it can signal exactly that uid's processes."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _children() -> list[int]:
    me, out = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rpartition(")")[2].split()[1] == me:
                        out.append(int(entry))
            except (OSError, IndexError):
                pass
    return out


def _kill_everything(job: dict, pids: list[int]) -> None:
    if job["pid_namespace"]:   # in a PID namespace, kill(-1) is everyone but us (and its init)
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
    # No PID namespace: each child leads its own session; the run's uids are killed by
    # uid; orphans come back to us (the subreaper) and are killed as our children.
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    for uid in (job["uid"], job["tester_uid"]):
        if uid is not None:
            _kill_uid(uid)
    for _ in range(1000):
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.001)


def _run_check(job: dict, workdir: str, deadline: float, pids: list[int]) -> dict:
    ours, theirs = (s.detach() for s in _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM))
    candidate = _fork_candidate(job, workdir, theirs)
    pids.append(candidate)
    os.close(theirs)
    trusted = _wire.recv(LIFELINE)   # only now: the candidate's memory never held the tests
    verdict_r, verdict_w = os.pipe()
    tester = _fork_tester(job, trusted, ours, verdict_w)
    pids.append(tester)
    os.close(verdict_w)
    os.close(ours)
    raw, timed_out = _collect(verdict_r, deadline)
    os.close(verdict_r)
    try:
        verdict = json.loads(raw) if raw and not timed_out else None
    except ValueError:
        verdict = None
    # a candidate the tester saw die may not be reaped yet: its end (a CPU-limit signal,
    # say) decides the outcome, so wait for it as for the tester, which exits right after
    # its verdict
    died = isinstance(verdict, dict) and bool(verdict.get("candidate_died"))
    record = {"mode": "check", "verdict": verdict, "timed_out": timed_out,
              "candidate_exit": _exit_status_within(candidate) if died else _exit_status(candidate),
              "tester_exit": None if timed_out else _exit_status_within(tester)}
    return record


def main() -> None:
    result_fd = int(sys.argv[1])
    _confine.prctl(_confine.PR_SET_DUMPABLE, 0)
    _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)
    _confine.oom_score_adj(-1000)   # the runner (and the tester it forks) outlive a memory hog
    try:
        job = _wire.recv(LIFELINE)
    except (EOFError, _wire.WireError):
        sys.exit(1)
    job["runner_pid"] = os.getpid()
    try:
        workdir = _prepare(job)
    except BaseException as e:
        _report(result_fd, {"setup_error": repr(e)})
        sys.exit(1)
    start = time.monotonic()
    deadline = start + job["wall_s"]
    pids: list[int] = []
    try:
        record = _run_check(job, workdir, deadline, pids)
    except (EvaluatorGone, EOFError, _wire.WireError):
        _kill_everything(job, pids)
        os._exit(1)
    elapsed = time.monotonic() - start
    _kill_everything(job, pids)
    _report(result_fd, {**record, "elapsed_s": round(elapsed, 3)})


if __name__ == "__main__":
    main()
