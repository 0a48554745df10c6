"""The sandbox's records: what to run, under which limits, and how it ended.

They are `Candidate`, `Limits`, and `ExecResult` with an `Outcome`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Limits:
    """Per-run limits.

    `wall_s` counts from the start of the run's first process (3 s, as human-eval) and
    covers all of it: loading the candidate, the tests, every call.
    """

    wall_s: float = 3.0
    cpu_s: Optional[int] = None     # per process; default: wall_s rounded up
    memory_mb: int = 1024           # address space per process; the memory cgroup per run
    max_procs: int = 32             # processes of the run (RLIMIT_NPROC / pids cgroup)
    output_bytes: int = 64 * 1024   # stdout+stderr kept; the rest is read and dropped
    file_mb: int = 16               # largest file the program may write
    tmp_mb: int = 64                # all the run may write, in total (its root tmpfs; bwrap: each tmpfs)

    def __post_init__(self) -> None:
        """Refuse a limit that is not positive (`wall_s`, `memory_mb`, `max_procs`, `tmp_mb`)."""
        if self.wall_s <= 0 or self.memory_mb <= 0 or self.max_procs < 1 or self.tmp_mb <= 0:
            raise ValueError(f"sandbox limits must be positive, got {self}")


@dataclass(frozen=True)
class Candidate:
    """A function to test.

    `source` (untrusted: prompt + completion) runs in the sandboxed candidate process and
    must define `entry_point`; `prelude` (the problem's prompt: helpers the tests use) and
    `test` (defines `check(candidate)`) are trusted and run in a separate tester process
    that reaches the candidate only by calls.
    """

    source: str
    entry_point: str
    prelude: str
    test: str


class Outcome(str, enum.Enum):
    """How a sandboxed run ended."""

    PASSED = "passed"
    FAILED = "failed"       # an exception, a failed assert, exiting early, a fatal signal
    TIMEOUT = "timeout"     # wall-clock or CPU limit
    MEMORY = "memory"       # MemoryError, or killed by the memory cgroup
    ERROR = "error"         # the sandbox itself could not run the program


@dataclass(frozen=True)
class ExecResult:
    """The result of one sandboxed run: its outcome, why, and what it printed."""

    outcome: Outcome
    detail: str             # short: the exception, the limit hit, the exit status
    output: str             # the first `output_bytes` of stdout+stderr
    output_truncated: bool
    elapsed_s: float        # the run's wall time as the runner measured it

    @property
    def passed(self) -> bool:
        """Whether the run passed."""
        return self.outcome is Outcome.PASSED
