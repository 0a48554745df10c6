"""Run untrusted generated code with limits, in the strongest isolation available.

`judge` / `judge_many` test a `Candidate` function with trusted tests run in a separate
process (HumanEval; lm-eval's code_eval through `proctor.harness.code_eval`); the verdict
is the tester's, never the candidate's. There is no mode that passes a whole program for
running to its end: a program that judges itself can forge its verdict (issue 36).
`detect()` says what isolates the runs (`SandboxInfo.describe()` is the string a run's
metrics record).
"""

from proctor.sandbox.isolation import Isolation, SandboxInfo, detect, require
from proctor.sandbox.records import Candidate, ExecResult, Limits, Outcome
from proctor.sandbox.run import judge, judge_many

__all__ = ["Candidate", "ExecResult", "Isolation", "Limits", "Outcome", "SandboxInfo", "detect",
           "judge", "judge_many", "require"]
