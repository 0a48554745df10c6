"""From the runner's record (and what the evaluator saw) to an (Outcome, detail).

A pass comes only from the tester's verdict; every other ending is a failure, a timeout,
a memory kill or a sandbox error.
"""

from __future__ import annotations

import signal
from typing import Optional

from proctor.sandbox.records import Limits, Outcome

_JUDGED = {o.value: o for o in (Outcome.PASSED, Outcome.FAILED, Outcome.MEMORY, Outcome.ERROR)}


def _ended(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _limit_hit(code: Optional[int], oom: bool) -> Optional[tuple[Outcome, str]]:
    """When a process's end was a limit rather than its own doing."""
    if code == -signal.SIGXCPU:
        return Outcome.TIMEOUT, "CPU time limit"
    if oom and code in (-signal.SIGKILL, None):
        return Outcome.MEMORY, "killed by the memory cgroup"
    return None


def _check(record: dict, oom: bool) -> tuple[Outcome, str]:
    verdict = record.get("verdict")
    candidate = record.get("candidate_exit")
    if not isinstance(verdict, dict) or verdict.get("outcome") not in _JUDGED:
        tester = record.get("tester_exit")
        limit = _limit_hit(tester, oom) or _limit_hit(candidate, oom)
        return limit or (Outcome.ERROR, f"the tester ended without a verdict ({_ended(tester)})")
    outcome, detail = _JUDGED[verdict["outcome"]], str(verdict.get("detail", ""))[:400]
    if outcome is Outcome.PASSED:
        return outcome, ""
    if verdict.get("candidate_died"):
        limit = _limit_hit(candidate, oom)
        if limit is not None:
            return limit
        detail += f" ({_ended(candidate)})"
    return outcome, detail


def judge(record: Optional[dict], *, killed: bool, oom: bool, limits: Limits,
          returncode: Optional[int], output: str) -> tuple[Outcome, str]:
    """Turn the runner's record, and what the evaluator saw of the run, into an (Outcome, detail).

    No record means the sandbox overran its time and was `killed`, or did not start.
    """
    if record is None:
        if killed:
            return Outcome.TIMEOUT, f"sandbox overran the {limits.wall_s:g} s limit and was killed"
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return Outcome.ERROR, f"sandbox did not start (exit {returncode}): {tail[0][:200]}"
    if "setup_error" in record:
        return Outcome.ERROR, f"sandbox setup failed: {str(record['setup_error'])[:200]}"
    if record.get("timed_out"):
        return Outcome.TIMEOUT, f"wall-clock limit of {limits.wall_s:g} s"
    return _check(record, oom)
