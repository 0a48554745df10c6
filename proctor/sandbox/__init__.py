"""Run untrusted generated Python with limits, in the strongest isolation available.

`run_program` / `run_many` run each program in its own process; `detect()` says what
isolates it (`SandboxInfo.describe()` is the string a run's metrics record).
"""

from proctor.sandbox.isolation import Isolation, SandboxInfo, detect, require
from proctor.sandbox.run import ExecResult, Limits, Outcome, run_many, run_program

__all__ = ["ExecResult", "Isolation", "Limits", "Outcome", "SandboxInfo", "detect", "require",
           "run_many", "run_program"]
