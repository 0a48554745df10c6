"""Run untrusted code under limits, one sandbox per run; many at once in a pool.

The evaluator side: it starts `_runner.py` inside the isolation `detect()` found, sends
it the job on stdin (which it keeps open: closing it, or dying, ends the run), reads
the output (keeping only the first `output_bytes`) and the runner's one result record,
and turns them into an `ExecResult` (`verdict.judge`). The runner enforces the
wall-clock limit itself; the evaluator kills the whole sandbox if even that is overrun.

`judge(candidate)` tests a function with trusted code in another process (HumanEval):
the only way to a pass is the tester's verdict. There is no mode that runs a whole
program and passes it for running to its end: such a program judges itself, and code
can forge that verdict from inside (patch what the tests call, return an always-equal
object, exit early), so tests always run in the tester (issue 36).

Each public entry first removes what dead runs left (`leftovers.sweep`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

from proctor.sandbox import _wire, isolation, leftovers, verdict
from proctor.sandbox.cgroups import RunCgroups
from proctor.sandbox.isolation import Isolation, SandboxInfo
from proctor.sandbox.records import Candidate, ExecResult, Limits, Outcome

__all__ = ["Candidate", "ExecResult", "Limits", "Outcome", "default_workers", "judge", "judge_many"]

STARTUP_GRACE_S = 10.0   # interpreter + namespace start-up, on a loaded machine
BWRAP_WORKDIR = "/tmp/sandbox"
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
T = TypeVar("T")

# One slot (so one pair of uids) per concurrent run, shared by every pool in the process.
_SLOTS: "queue.Queue[int]" = queue.Queue()
for _slot in range(isolation.SLOTS):
    _SLOTS.put(_slot)


def _job(source: str, entry_point: str, limits: Limits, info: SandboxInfo,
         slot: int, workdir: Optional[str], cgroup_procs: list[str]) -> dict:
    """Build the public part of a job: everything but the tests."""
    uid = isolation.candidate_uid(slot) if info.drops_uid else None
    return {
        "source": source, "entry_point": entry_point,
        "uid": uid, "gid": uid, "tester_uid": isolation.tester_uid(slot) if info.drops_uid else None,
        "env": SANDBOX_ENV, "workdir": workdir, "cgroup_procs": cgroup_procs,
        "root": isolation.root_layout().as_job() if info.isolation is Isolation.NAMESPACES else None,
        "import_dirs": list(isolation.root_layout().dirs) if info.isolation is not Isolation.NONE else None,
        "pid_namespace": info.isolation is not Isolation.NONE,
        "wall_s": limits.wall_s, "cpu_s": limits.cpu_s or math.ceil(limits.wall_s),
        "memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
        "tmp_bytes": limits.tmp_mb << 20,
        # RLIMIT_NPROC counts every process of the uid: only meaningful for our own uid.
        "max_procs": limits.max_procs if info.drops_uid else None,
    }


def _exchange(proc: subprocess.Popen, to_send: bytes, out_fd: int, res_fd: int, deadline: float,
              cap: int) -> tuple[bytes, bool, bytes, bool]:
    """Feed the job, then read the output (first `cap` bytes) and the result record until both pipes close.

    Return (output, truncated, record bytes, whether we had to kill it).
    """
    out, res, truncated, killed = bytearray(), bytearray(), False, False
    pending = memoryview(to_send)
    if proc.stdin is None:
        raise ValueError("the job's process must be started with stdin=PIPE")
    in_fd = proc.stdin.fileno()
    os.set_blocking(in_fd, False)
    sel = selectors.DefaultSelector()
    sel.register(out_fd, selectors.EVENT_READ)
    sel.register(res_fd, selectors.EVENT_READ)
    if pending:
        sel.register(in_fd, selectors.EVENT_WRITE)
    reading = 2
    while reading:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed = True
            break
        for key, _ in sel.select(remaining):
            if key.fd == in_fd:
                try:
                    pending = pending[os.write(in_fd, pending):]
                except BlockingIOError:
                    continue
                except BrokenPipeError:   # it died at start; its output says why
                    pending = pending[:0]
                if not pending:
                    sel.unregister(in_fd)
                continue
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
                reading -= 1
            elif key.fd == out_fd:
                room = cap - len(out)
                out += data[:max(room, 0)]
                truncated = truncated or len(data) > room
            elif len(res) < 65536:
                res += data
    sel.close()
    if killed:
        _kill(proc)
    return bytes(out), truncated, bytes(res), killed


def _kill(proc: subprocess.Popen) -> None:
    # The launcher leads its own process group; killing it takes the namespace down with it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def _command(info: SandboxInfo, cgroups: RunCgroups, result_fd: int) -> list[str]:
    binds = []
    if info.isolation is Isolation.BWRAP:  # bwrap's / is its own: let the runner join
        for procs in cgroups.procs_files:
            binds += ["--bind", str(Path(procs).parent), str(Path(procs).parent)]
    return [*isolation.command_prefix(info), *binds, sys.executable, "-I", "-S", isolation.runner_path(info),
            str(result_fd)]


def _record(raw: bytes) -> Optional[dict]:
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            return rec
    return None


def _run(source: str, entry_point: str, trusted: dict, limits: Limits, info: SandboxInfo) -> ExecResult:
    slot = _SLOTS.get()
    workdir = cgroups = None
    try:
        cgroups = RunCgroups(leftovers.run_name(), limits.max_procs, limits.memory_mb << 20,
                             enabled=bool(info.cgroups))
        if info.isolation is Isolation.NONE:   # no root of its own: a host directory, removed below
            workdir = leftovers.host_workdir()
        job = _job(source, entry_point, limits, info, slot,
                   BWRAP_WORKDIR if info.isolation is Isolation.BWRAP else workdir, cgroups.procs_files)
        try:
            to_send = _wire.frame(job) + _wire.frame(trusted)
        except _wire.WireError as e:
            return ExecResult(Outcome.ERROR, f"cannot hand the job to the sandbox: {e}", "", False, 0.0)
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            try:
                proc = subprocess.Popen(_command(info, cgroups, res_w), stdin=subprocess.PIPE,
                                        stdout=out_w, stderr=out_w, pass_fds=(res_w,),
                                        env=dict(SANDBOX_ENV), cwd="/", start_new_session=True)
            finally:
                os.close(res_w)
                os.close(out_w)
            try:
                deadline = time.monotonic() + limits.wall_s + STARTUP_GRACE_S
                out, truncated, raw, killed = _exchange(proc, to_send, out_r, res_r, deadline,
                                                        limits.output_bytes)
            finally:
                if proc.stdin is not None:   # always: started with stdin=PIPE
                    proc.stdin.close()       # the runner's lifeline: a run still going ends now
            returncode = proc.wait()
        finally:
            os.close(out_r)
            os.close(res_r)
        output = out.decode("utf-8", "replace")
        record = _record(raw)
        outcome, detail = verdict.judge(record, killed=killed, oom=cgroups.oom_killed(), limits=limits,
                                        returncode=returncode, output=output)
        elapsed = float(record.get("elapsed_s", 0.0)) if record else 0.0
        return ExecResult(outcome, detail, output, truncated, elapsed)
    finally:
        if cgroups is not None:
            cgroups.remove()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        _SLOTS.put(slot)


def _ready(allow_unsafe_exec: bool) -> SandboxInfo:
    info = isolation.detect()
    isolation.require(info, allow_unsafe_exec)
    leftovers.sweep()
    return info


def default_workers() -> int:
    """Return how many sandboxes run at once by default: the CPU count, kept within 2 to 16."""
    return max(2, min(16, os.cpu_count() or 2))


def _pooled(fn: Callable[[T], ExecResult], items: Sequence[T], workers: Optional[int]) -> list[ExecResult]:
    if not items:
        return []
    n = min(workers or default_workers(), len(items), 64)
    if n == 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="sandbox") as pool:
        return list(pool.map(fn, items))


def judge(candidate: Candidate, limits: Limits = Limits(), *, allow_unsafe_exec: bool = False) -> ExecResult:
    """Run `candidate.source` in the sandbox and its tests in a separate trusted process."""
    return judge_many([candidate], limits, workers=1, allow_unsafe_exec=allow_unsafe_exec)[0]


def judge_many(candidates: Sequence[Candidate], limits: Limits = Limits(), *,
               workers: Optional[int] = None, allow_unsafe_exec: bool = False) -> list[ExecResult]:
    """Run `judge` for each candidate, `workers` at a time; results in input order."""
    info = _ready(allow_unsafe_exec)   # refuse before starting any
    trusted = lambda c: {"prelude": c.prelude, "test": c.test}   # noqa: E731
    return _pooled(lambda c: _run(c.source, c.entry_point, trusted(c), limits, info), candidates, workers)
