"""Run untrusted Python programs, one process each, under limits; many at once in a pool.

The evaluator side of a run: it starts `_runner.py` inside the isolation `detect()`
found, sends it the job (source, limits, nonce, uid) on stdin, reads the program's
output (keeping only the first `output_bytes`) and the runner's result records, and
turns them into an `ExecResult`. The runner enforces the wall-clock limit itself; the
evaluator kills the whole sandbox if even that is overrun.
"""

from __future__ import annotations

import enum
import json
import math
import os
import queue
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from proctor.sandbox import isolation
from proctor.sandbox.cgroups import RunCgroups
from proctor.sandbox.isolation import Isolation, SandboxInfo

RUNNER = str(Path(__file__).with_name("_runner.py"))
STARTUP_GRACE_S = 10.0   # interpreter + namespace start-up, on a loaded machine
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}

# One uid per slot, shared by every pool in the process, so concurrent runs never share one.
_SLOTS: "queue.Queue[int]" = queue.Queue()
for _slot in range(256):
    _SLOTS.put(_slot)


@dataclass(frozen=True)
class Limits:
    """Per-program limits. `wall_s` counts from the program's start (3 s, as human-eval)."""

    wall_s: float = 3.0
    cpu_s: Optional[int] = None     # default: wall_s rounded up
    memory_mb: int = 1024           # address space per process; the memory cgroup per run
    max_procs: int = 32             # processes of the run (RLIMIT_NPROC / pids cgroup)
    output_bytes: int = 64 * 1024   # stdout+stderr kept; the rest is read and dropped
    file_mb: int = 16               # largest file the program may write
    tmp_mb: int = 64                # each private tmpfs (/tmp with its work dir, /dev/shm)

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.memory_mb <= 0 or self.max_procs < 1:
            raise ValueError(f"sandbox limits must be positive, got {self}")


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"       # an exception, a failed assert, exiting early, a fatal signal
    TIMEOUT = "timeout"     # wall-clock or CPU limit
    MEMORY = "memory"       # MemoryError, or killed by the memory cgroup
    ERROR = "error"         # the sandbox itself could not run the program


@dataclass(frozen=True)
class ExecResult:
    outcome: Outcome
    detail: str             # short: the exception, the limit hit, the exit status
    output: str             # the first `output_bytes` of stdout+stderr
    output_truncated: bool
    elapsed_s: float        # the program's wall time as the runner measured it

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED


def _job(source: str, limits: Limits, info: SandboxInfo, slot: int, nonce: str,
         workdir: Optional[str], cgroup_procs: list[str]) -> dict:
    uid = isolation.SANDBOX_UID_BASE + slot if info.drops_uid else None
    return {
        "source": source, "nonce": nonce, "uid": uid, "gid": uid, "env": SANDBOX_ENV,
        "mount_tmp": info.isolation is Isolation.NAMESPACES, "workdir": workdir,
        "expose": isolation.exposures() if info.isolation is Isolation.NAMESPACES and uid else (),
        "cgroup_procs": cgroup_procs, "wall_s": limits.wall_s,
        "cpu_s": limits.cpu_s or math.ceil(limits.wall_s),
        "memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
        "tmp_bytes": limits.tmp_mb << 20,
        # RLIMIT_NPROC counts every process of the uid: only meaningful for our own uid.
        "max_procs": limits.max_procs if info.drops_uid else None,
    }


def _read_all(proc: subprocess.Popen, out_fd: int, res_fd: int, deadline: float,
              cap: int) -> tuple[bytes, bool, bytes, bool]:
    """Output (first `cap` bytes), whether more came, result records, whether we killed it."""
    out, res, truncated = bytearray(), bytearray(), False
    sel = selectors.DefaultSelector()
    sel.register(out_fd, selectors.EVENT_READ)
    sel.register(res_fd, selectors.EVENT_READ)
    killed = False
    while sel.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed = True
            break
        for key, _ in sel.select(remaining):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
            elif key.fd == out_fd:
                room = cap - len(out)
                out += data[:room]
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


def _records(raw: bytes, nonce: str) -> tuple[Optional[dict], Optional[dict]]:
    """(the program's record, the runner's record); lines without the nonce are ignored.

    Only the record of the runner's own child counts: a process the program forked also
    runs to the end of the source and would otherwise report a pass of its own.
    """
    runner, programs = None, []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or rec.get("nonce") != nonce:
            continue
        if rec.get("runner"):
            runner = runner or rec
        else:
            programs.append(rec)
    if runner is None:
        return None, None
    program = next((r for r in programs if r.get("pid") == runner["child_pid"]), None)
    return program, runner


def _verdict(program: Optional[dict], runner: Optional[dict], killed: bool, limits: Limits,
             cgroups: RunCgroups, returncode: Optional[int], output: str) -> tuple[Outcome, str]:
    if program is not None:
        return Outcome(program["outcome"]), program["detail"]
    if runner is None:
        if killed:
            return Outcome.TIMEOUT, f"sandbox overran the {limits.wall_s:g} s limit and was killed"
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return Outcome.ERROR, f"sandbox did not start (exit {returncode}): {tail[0][:200]}"
    if "setup_error" in runner:
        return Outcome.ERROR, f"sandbox setup failed: {runner['setup_error'][:200]}"
    if runner["timed_out"]:
        return Outcome.TIMEOUT, f"wall-clock limit of {limits.wall_s:g} s"
    code = runner["exit_code"]
    if code == -signal.SIGXCPU:
        return Outcome.TIMEOUT, "CPU time limit"
    if code == -signal.SIGKILL and cgroups.oom_killed():
        return Outcome.MEMORY, "killed by the memory cgroup"
    if code < 0:
        return Outcome.FAILED, f"killed by {signal.Signals(-code).name}"
    return Outcome.FAILED, f"exited with status {code} before the tests finished"


def _command(info: SandboxInfo, cgroups: RunCgroups, result_fd: int) -> list[str]:
    binds = []
    if info.isolation is Isolation.BWRAP:  # bwrap's / is read-only: let the runner join
        for procs in cgroups.procs_files:
            binds += ["--bind", str(Path(procs).parent), str(Path(procs).parent)]
    return [*isolation.command_prefix(info), *binds, sys.executable, "-I", RUNNER, str(result_fd)]


def _execute(info: SandboxInfo, cgroups: RunCgroups, job: dict,
             limits: Limits) -> tuple[bytes, bool, bytes, bool, int]:
    """Start the runner, hand it the job, collect everything: output, truncated, records,
    killed by us, launcher exit status."""
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
            proc.stdin.write((json.dumps(job) + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at start; its output says why
        deadline = time.monotonic() + limits.wall_s + STARTUP_GRACE_S
        out, truncated, raw, killed = _read_all(proc, out_r, res_r, deadline, limits.output_bytes)
        return out, truncated, raw, killed, proc.wait()
    finally:
        os.close(out_r)
        os.close(res_r)


def run_program(source: str, limits: Limits = Limits(), *, allow_unsafe_exec: bool = False) -> ExecResult:
    """Run one program in its own sandboxed process and judge how it ended."""
    info = isolation.detect()
    isolation.require(info, allow_unsafe_exec)
    slot = _SLOTS.get()
    workdir = cgroups = None
    try:
        cgroups = RunCgroups(limits.max_procs, limits.memory_mb << 20, enabled=bool(info.cgroups))
        if info.isolation is Isolation.NONE:  # no private /tmp: a host directory, removed below
            workdir = tempfile.mkdtemp(prefix="proctor-sandbox-")
        nonce = secrets.token_hex(16)
        job = _job(source, limits, info, slot, nonce, workdir, cgroups.procs_files)
        out, truncated, raw, killed, returncode = _execute(info, cgroups, job, limits)
        output = out.decode("utf-8", "replace")
        program, runner = _records(raw, nonce)
        outcome, detail = _verdict(program, runner, killed, limits, cgroups, returncode, output)
        elapsed = float(runner.get("elapsed_s", 0.0)) if runner else 0.0
        return ExecResult(outcome, detail, output, truncated, elapsed)
    finally:
        if cgroups is not None:
            cgroups.remove()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        _SLOTS.put(slot)


def default_workers() -> int:
    return max(2, min(16, os.cpu_count() or 2))


def run_many(sources: Sequence[str], limits: Limits = Limits(), *, workers: Optional[int] = None,
             allow_unsafe_exec: bool = False) -> list[ExecResult]:
    """`run_program` for each source, `workers` at a time; results in input order."""
    isolation.require(isolation.detect(), allow_unsafe_exec)  # refuse before starting any
    if not sources:
        return []
    n = min(workers or default_workers(), len(sources), 64)
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda s: run_program(s, limits, allow_unsafe_exec=allow_unsafe_exec),
                             sources))
