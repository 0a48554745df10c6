"""Run untrusted generated code with limits, in the strongest isolation available.

`judge` / `judge_many` test a `Candidate` function with trusted tests run in a separate
process (HumanEval); `run_program` / `run_many` run whole programs that pass by running
to their end; `detect()` says what isolates them (`SandboxInfo.describe()` is the
string a run's metrics record).
"""

from proctor.sandbox.isolation import Isolation, SandboxInfo, detect, require
from proctor.sandbox.records import Candidate, ExecResult, Limits, Outcome
from proctor.sandbox.run import judge, judge_many, run_many, run_program

__all__ = ["Candidate", "ExecResult", "Isolation", "Limits", "Outcome", "SandboxInfo", "detect",
           "judge", "judge_many", "require", "run_many", "run_program"]
