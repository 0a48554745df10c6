r"""HF `evaluate`'s `code_eval` metric, each program judged by trusted tests in proctor's sandbox.

lm-eval's code tasks (humaneval*, mbpp*, humaneval_infilling) score with
`evaluate.load("code_eval")`, a hub script (unreachable offline) that runs each program
candidate + "\\n" + reference with `exec` in a child of this process and passes it when it
runs to its end. Such a program judges itself: code can forge the pass from inside
(patch `json.dumps` or `AssertionError`, return an always-equal object, swap itself in
with `sys.settrace`, exit early). While the bridge builds lm-eval's tasks
(`sandboxed_code_eval`), `evaluate.load("code_eval")` gives a `CodeEval` instead, whose
`compute` takes code_eval's arguments and returns its pass@k (the unbiased estimator of
Chen et al. (2021) averaged over the references) and per-program results, shaped as
code_eval returns them, with a 3 s `timeout` — but never runs the tests inside the
program: each prediction is a `sandbox.Candidate`, run in the sandboxed candidate
process, and the reference's tests run in the separate tester process, which reaches the
candidate only by calls through a plain-data proxy (`proctor.sandbox.judge_many`, as
proctor's own humaneval). The verdict is the tester's.

A reference is split into its tests (`split_reference`) in one of two shapes:

- HumanEval's (humaneval, humaneval_instruct, humaneval_plus, humaneval_64*,
  humaneval_*_infilling): `<test code defining check>\\ncheck(<entry point>)`. The tester
  runs the trusted prelude, binds the entry point's name to the proxy and calls
  `check(proxy)`. The prelude is the problem's prompt (helpers some tests call, e.g.
  `poly`), taken from the task's documents, never from the prediction: the bridge
  registers each document's `prompt` under its reference (`register_prompts`), and a
  prediction that starts with a registered prompt (lm-eval's predictions are prompt +
  completion) is judged with it as prelude (an infilling prompt, cut inside the function,
  up to its last whole top-level statement). A prediction that starts with none is judged
  with an empty prelude: what the tests need of the prompt is then missing (a NameError
  for `poly`) and that candidate fails, as the tests alone would.
- MBPP's (mbpp, mbpp_instruct, mbpp_plus*): lines of `assert`, calling one function of the
  program (the entry point). The tester runs them in `check` with that name bound to the
  proxy, standard-library modules they name (`math`) imported. Asserts that name more of
  the program than one function (a class of it, a second function), or call none that is
  not a builtin's name, cannot be reached through the proxy: each candidate for such a
  reference fails, with a detail that says so.

A reference of neither shape is refused with one line (`UserError`), when the run starts
(`arm`) or at `compute`, rather than run as a program that judges itself. Calls carry plain
values only (`proctor.sandbox._wire`): a candidate that returns anything else (a
generator, an object of its own class) fails where code_eval's `list(f(x))` might pass.
As in code_eval, the program's `if __name__ == "__main__":` block does not run. The tester
imports the standard library only (`proctor.sandbox.layout`): tests that import numpy (as
evalplus's humaneval_plus tests may) fail to load there, and every candidate fails.

Who may run what follows proctor's humaneval: the run's `preflight` arms the task's
CodeEvals with its --allow-unsafe-exec (`arm`), refused where the sandbox cannot cut the
network off. While the task is built, the only programs are the task module's own
self-test (lm-eval's utils.py runs `compute` at import), code already running in this
process, so they run whatever the isolation.
"""

from __future__ import annotations

import ast
import builtins
import importlib.abc
import importlib.util
import sys
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from proctor import sandbox
from proctor.errors import UserError
from proctor.harness.library import quiet

NAME = "code_eval"
#: code_eval's defaults
TIMEOUT_S = 3.0
KS = (1, 10, 100)
WORKERS = 4
SHAPES = ("the tests of HumanEval (`<test code defining check>\\ncheck(<entry point>)`) or of MBPP "
          "(`assert <function>(...) == ...` lines)")


@dataclass(frozen=True)
class Tests:
    """A reference split for the tester: the function under test, the trusted code that tests it.

    `unreachable`: why no candidate can pass these tests through the proxy (None: they can).
    """

    entry_point: str
    test: str                # defines check(candidate)
    prelude: str = ""        # trusted code the tests need before them (MBPP: imports)
    uses_prompt: bool = False  # HumanEval's shape: the problem's prompt is the prelude
    unreachable: Optional[str] = None


class CodeEval:
    """code_eval's `compute`, each program judged by trusted tests in a separate sandboxed process."""

    name = NAME

    def __init__(self, allow_unsafe_exec: bool = False):
        self.allow_unsafe_exec = allow_unsafe_exec
        #: reference -> the prompts of the documents with that reference (`register_prompts`)
        self.prompts: dict[str, set[str]] = defaultdict(set)

    def register(self, reference: str, prompt: str) -> None:
        """Trust `prompt` (a document's, from the task's data) as the prelude of `reference`'s tests."""
        self.prompts[reference].add(prompt)

    def candidate(self, prediction: str, reference: str) -> tuple[sandbox.Candidate, Optional[str]]:
        """Return the Candidate judging `prediction` by `reference`'s tests, and why it cannot pass (None: it can).

        UserError for a reference of neither shape (`split_reference`).
        """
        tests = split_reference(reference)
        prelude = tests.prelude
        if tests.uses_prompt:
            prompts = [p for p in self.prompts.get(reference, ()) if prediction.startswith(p)]
            prelude = leading_code(max(prompts, key=len)) if prompts else ""
        return sandbox.Candidate(prediction, tests.entry_point, prelude, tests.test), tests.unreachable

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
        made = [(i, j, *self.candidate(prediction, reference))
                for i, (candidates, reference) in enumerate(zip(predictions, references))
                for j, prediction in enumerate(candidates)]
        runnable = [c for _, _, c, unreachable in made if unreachable is None]
        runs = iter(sandbox.judge_many(runnable, sandbox.Limits(wall_s=timeout), workers=num_workers,
                                       allow_unsafe_exec=self.allow_unsafe_exec))
        results: dict[int, list] = defaultdict(list)
        for i, j, _, unreachable in made:
            passed, result = (False, f"failed: {unreachable}") if unreachable is not None else _result(next(runs))
            results[i].append((j, {"task_id": i, "passed": passed, "result": result, "completion_id": j}))
        total = np.array([len(r) for r in results.values()])
        correct = np.array([sum(x["passed"] for _, x in r) for r in results.values()])
        scores = {f"pass@{n}": np.array([_pass_at_k(t, c, n) for t, c in zip(total, correct)]).mean()
                  for n in k if (total >= n).all()}
        return scores, results


def _result(run: sandbox.ExecResult) -> tuple[bool, str]:
    """Whether it passed, and code_eval's result text: "passed", "timed out" or "failed: <why>"."""
    if run.passed:
        return True, "passed"
    if run.outcome is sandbox.Outcome.TIMEOUT:
        return False, "timed out"
    return False, f"failed: {run.detail}"


def _pass_at_k(n: int, c: int, k: int) -> Any:
    """1 - comb(n - c, k) / comb(n, k), computed as code_eval does (a numpy float)."""
    import numpy as np

    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


# ---- references into tests -----------------------------------------------------------

def _refuse(reference: str, why: str) -> UserError:
    head = (reference.strip().splitlines() or [""])[0]
    return UserError(f"code_eval: this task's reference {head[:60]!r} is {why}, not {SHAPES}; proctor runs a "
                     "model's code only against tests in a process of their own, never as a program that "
                     "judges itself (its pass can be forged from inside)")


@lru_cache(maxsize=4096)
def split_reference(reference: str) -> Tests:
    """Split a code_eval reference into the tester's `Tests`; UserError if it is neither HumanEval's nor MBPP's."""
    try:
        module = ast.parse(reference)
    except (SyntaxError, ValueError) as e:
        raise _refuse(reference, f"not Python ({type(e).__name__})") from None
    body = module.body
    if body and all(isinstance(s, (ast.Assert, ast.Import, ast.ImportFrom)) for s in body) \
            and any(isinstance(s, ast.Assert) for s in body):
        return _asserts(reference, module)
    last = body[-1] if body else None
    if (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and not last.value.keywords
            and isinstance(last.value.func, ast.Name) and last.value.func.id == "check"
            and len(last.value.args) == 1 and isinstance(last.value.args[0], ast.Name)
            and last.col_offset == 0 and all((s.end_lineno or 0) < last.lineno for s in body[:-1])
            and any(isinstance(s, ast.FunctionDef) and s.name == "check" for s in body[:-1])):
        test = "".join(reference.splitlines(keepends=True)[:last.lineno - 1])
        return Tests(last.value.args[0].id, test, uses_prompt=True)
    raise _refuse(reference, "of another shape")


_BUILTINS = frozenset(dir(builtins))


def _asserts(reference: str, module: ast.Module) -> Tests:
    """MBPP's shape: the asserts become `check`'s body, the one function they call is the entry point."""
    loaded: set[str] = set()
    bound: set[str] = set()
    called: dict[str, None] = {}   # in the order met, outermost call first
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.setdefault(node.func.id)
    free = loaded - bound - _BUILTINS
    modules = sorted(n for n in free if n in sys.stdlib_module_names)
    program = sorted(free - set(modules))
    functions = [name for name in called if name in program]
    shell = ast.parse("def check(candidate):\n    pass\n")
    shell.body[0].body = list(module.body)   # type: ignore[attr-defined]
    test = ast.unparse(shell) + "\n"
    prelude = "".join(f"import {m}\n" for m in modules)
    unreachable = None
    if not functions:   # e.g. a function named like a builtin, which the tester keeps its own
        unreachable = "the tests call no function of the program that the separate process judging it can reach"
    elif len(program) > 1:
        unreachable = (f"the tests use {', '.join(program)} of the program, and only one function of it "
                       "can be called from the separate process that judges it")
    return Tests(functions[0] if functions else "_", test, prelude, unreachable=unreachable)


@lru_cache(maxsize=4096)
def leading_code(prompt: str) -> str:
    """Return the prompt, or (an infilling prompt, cut inside a function) its part up to the last whole top-level statement."""
    lines = prompt.splitlines(keepends=True)
    for end in range(len(lines), -1, -1):
        if end < len(lines) and lines[end][:1] in ("", " ", "\t", "\n", "\r", "#"):
            continue   # cut only where a top-level statement starts
        head = "".join(lines[:end])
        try:
            compile(head, "prompt.py", "exec")
        except (SyntaxError, ValueError):
            continue
        return head
    return ""


# ---- the bridge's hooks --------------------------------------------------------------

@contextmanager
def sandboxed_code_eval() -> Iterator[None]:
    """Within it, `evaluate.load("code_eval")` gives a `CodeEval`; any other name loads as evaluate loads it.

    `evaluate` is patched only when something imports it (a task module of lm-eval's code
    tasks): importing it costs seconds (it imports transformers' pipelines), which a run of
    MMLU should not pay.
    """
    made: list[CodeEval] = []
    patched: list[tuple[Any, Any]] = []

    def patch(evaluate: Any) -> None:
        original = evaluate.load

        def load(path: str, *args: Any, **kwargs: Any) -> Any:
            if path != NAME:
                return original(path, *args, **kwargs)
            made.append(CodeEval(allow_unsafe_exec=True))  # the module's own self-test (module docstring)
            return made[-1]

        evaluate.load = load
        patched.append((evaluate, original))

    hook = _OnImport("evaluate", patch)
    if "evaluate" in sys.modules:
        patch(sys.modules["evaluate"])
    else:
        sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
        for module, original in patched:
            module.load = original
        for metric in made:
            metric.allow_unsafe_exec = False


class _OnImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` right after the module `name` is first imported."""

    def __init__(self, name: str, then: Callable[[Any], None]):
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the search below must not find this finder again
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            run(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


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


def _references(task: Any, docs: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for doc in docs:
        reference = task.doc_to_target(doc)
        if isinstance(reference, str):
            yield reference, doc


def register_prompts(task: Any, docs: Iterable[Mapping[str, Any]]) -> None:
    """Give the task's CodeEvals the documents' prompts (trusted: the task's data), keyed by their reference."""
    metrics = code_evals(task)
    if not metrics:
        return
    for reference, doc in _references(task, docs):
        prompt = doc.get("prompt")
        if isinstance(prompt, str):
            for metric in metrics:
                metric.register(reference, prompt)


def arm(task: Any, allow_unsafe_exec: bool) -> bool:
    """Refuse as proctor's humaneval refuses, or a task whose references are of neither shape; let its CodeEvals run.

    False if the task has no CodeEval.
    """
    metrics = code_evals(task)
    if not metrics:
        return False
    sandbox.require(sandbox.detect(), allow_unsafe_exec)
    with quiet():   # a task's process_docs (datasets.map) may run here
        docs = list(task.eval_docs)
    for reference, _ in _references(task, docs):
        split_reference(reference)
    for metric in metrics:
        metric.allow_unsafe_exec = allow_unsafe_exec
    return True


def settings(task: Any) -> dict[str, Any]:
    """Return what a run records of the sandbox a task's code ran in (nothing for a task without code_eval)."""
    metrics = code_evals(task)
    if not metrics:
        return {}
    return {"sandbox": sandbox.detect().describe(), "allow_unsafe_exec": metrics[0].allow_unsafe_exec}
