r"""HF `evaluate`'s `code_eval` metric with every program run in proctor's sandbox.

lm-eval's code tasks (humaneval*, mbpp*, humaneval_infilling) score with
`evaluate.load("code_eval")`, a hub script (unreachable offline) that runs each program
with `exec` in a child of this process. While the bridge builds lm-eval's tasks
(`sandboxed_code_eval`), `evaluate.load("code_eval")` gives a `CodeEval` instead, whose
`compute` is code_eval's: program = candidate + "\\n" + reference; it passes when it runs
to its end within `timeout` (3 s); pass@k is the unbiased estimator of Chen et al. (2021)
averaged over the references, returned beside the per-program results, shaped as
code_eval returns them. The programs run in `proctor.sandbox.run_many`.

A program that exits early (`sys.exit`, `os._exit`) fails, as in code_eval. The sandbox
learns that a program ran to its end from the program's own process, as code_eval does:
like code_eval it is for scoring a model's code, not for code written to fool its judge
(proctor's own `humaneval::*` specs run the tests in a separate process instead).

Who may run what follows proctor's humaneval: the run's `preflight` arms the task's
CodeEvals with its --allow-unsafe-exec (`arm`), refused where the sandbox cannot cut the
network off. While the task is built, the only programs are the task module's own
self-test (lm-eval's utils.py runs `compute` at import), code already running in this
process, so they run whatever the isolation.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from proctor import sandbox

NAME = "code_eval"
#: code_eval's defaults
TIMEOUT_S = 3.0
KS = (1, 10, 100)
WORKERS = 4


class CodeEval:
    """code_eval's `compute`, run in proctor's sandbox."""

    name = NAME

    def __init__(self, allow_unsafe_exec: bool = False):
        self.allow_unsafe_exec = allow_unsafe_exec

    def compute(self, *, predictions: Sequence[Sequence[str]], references: Sequence[str],
                k: Sequence[int] = KS, num_workers: int = WORKERS,
                timeout: float = TIMEOUT_S) -> tuple[dict[str, Any], dict[int, list]]:
        """Return ({"pass@<k>": mean pass@k}, {reference index: [(n, result), ...]}), as code_eval does.

        `predictions[i]` are the candidates for `references[i]`; pass@k is given only for
        the k that every reference has at least k candidates for.
        """
        import numpy as np

        if len(predictions) != len(references):
            raise ValueError(f"code_eval: {len(predictions)} predictions for {len(references)} references")
        programs = [(i, j, candidate + "\n" + reference)
                    for i, (candidates, reference) in enumerate(zip(predictions, references))
                    for j, candidate in enumerate(candidates)]
        runs = sandbox.run_many([p for _, _, p in programs], sandbox.Limits(wall_s=timeout),
                                workers=num_workers, allow_unsafe_exec=self.allow_unsafe_exec)
        results: dict[int, list] = defaultdict(list)
        for (i, j, _), run in zip(programs, runs):
            results[i].append((j, {"task_id": i, "passed": run.passed, "result": _result(run), "completion_id": j}))
        total = np.array([len(r) for r in results.values()])
        correct = np.array([sum(x["passed"] for _, x in r) for r in results.values()])
        scores = {f"pass@{n}": np.array([_pass_at_k(t, c, n) for t, c in zip(total, correct)]).mean()
                  for n in k if (total >= n).all()}
        return scores, results


def _result(run: sandbox.ExecResult) -> str:
    """code_eval's result text: "passed", "timed out" or "failed: <why>"."""
    if run.passed:
        return "passed"
    if run.outcome is sandbox.Outcome.TIMEOUT:
        return "timed out"
    return f"failed: {run.detail}"


def _pass_at_k(n: int, c: int, k: int) -> Any:
    """1 - comb(n - c, k) / comb(n, k), computed as code_eval does (a numpy float)."""
    import numpy as np

    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


@contextmanager
def sandboxed_code_eval() -> Iterator[None]:
    """Within it, `evaluate.load("code_eval")` gives a `CodeEval`; any other name loads as evaluate loads it."""
    try:
        import evaluate
    except ImportError:  # lm-eval's code tasks then fail to import, as they would in lm-eval
        yield
        return
    original = evaluate.load
    made: list[CodeEval] = []

    def load(path: str, *args: Any, **kwargs: Any) -> Any:
        if path != NAME:
            return original(path, *args, **kwargs)
        made.append(CodeEval(allow_unsafe_exec=True))  # the module's own self-test (module docstring)
        return made[-1]

    evaluate.load = load
    try:
        yield
    finally:
        evaluate.load = original
        for metric in made:
            metric.allow_unsafe_exec = False


def code_evals(task: Any) -> list[CodeEval]:
    """Return the CodeEvals the task's metric functions (or its process_results) score with.

    They are found in the globals of the functions' modules (lm-eval's humaneval `utils.compute_`).
    """
    config = task.config
    functions = [m.get("metric") for m in config.metric_list or [] if isinstance(m, dict)]
    found: list[CodeEval] = []
    for function in [*functions, config.process_results]:
        for value in getattr(function, "__globals__", {}).values():
            if isinstance(value, CodeEval) and value not in found:
                found.append(value)
    return found


def arm(task: Any, allow_unsafe_exec: bool) -> bool:
    """Refuse as proctor's humaneval refuses, and let the task's CodeEvals run; False if it has none."""
    metrics = code_evals(task)
    if not metrics:
        return False
    sandbox.require(sandbox.detect(), allow_unsafe_exec)
    for metric in metrics:
        metric.allow_unsafe_exec = allow_unsafe_exec
    return True


def settings(task: Any) -> dict[str, Any]:
    """Return what a run records of the sandbox a task's code ran in (nothing for a task without code_eval)."""
    metrics = code_evals(task)
    if not metrics:
        return {}
    return {"sandbox": sandbox.detect().describe(), "allow_unsafe_exec": metrics[0].allow_unsafe_exec}
