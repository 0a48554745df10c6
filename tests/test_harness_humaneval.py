"""lm-eval's HumanEval tasks on the bridge, each program judged by trusted tests in a separate
sandboxed process (proctor/harness/code_eval.py), never by itself (issue 36).

The reference is HF evaluate's own code_eval where a copy of its script is on this machine
(its module cache); the product never reads it.
"""

import glob
import os
from pathlib import Path

import pytest

import proctor
from proctor import sandbox
from proctor.cli import main
from proctor.errors import UserError
from proctor.harness.code_eval import CodeEval, leading_code, sandboxed_code_eval, split_reference
from proctor.pipeline import PromptOptions, plan
from proctor.requests import Generate, GenerateResult, Generation

SLOW = pytest.mark.slow  # lm-eval
#: runs where the sandbox cannot cut the network off, as tests/test_sandbox.py does
UNSAFE_OK = not sandbox.detect().network_isolated

ADD = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"   # MBPP's shape
ADD_CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\ncheck(add)"
NEAR = "assert abs(add(2, 3) - 5) < 1e-9"
TYPED = "assert isinstance(add(2, 3), int) and add(2, 3) == 5"
REFERENCES = [ADD, ADD_CHECK, NEAR, TYPED]
RIGHT, WRONG = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b"
HANGS = "def add(a, b):\n    while True:\n        pass"
#: honest, and code_eval passes it: the `__main__` block does not run there
MAIN_BLOCK = RIGHT + "\n\nif __name__ == '__main__':\n    assert add(1, 1) == 3\n"
#: code that ends its process before the tests run, so that nothing reports a failure
FORGES = ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit(0)", "exit()",
          "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"]
SAME = "class Same:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n        return False\n"
SWAP = """
import sys
def _swap(frame, event, arg):
    frame.f_globals['add'] = lambda *a: Same()
    frame.f_globals['check'] = lambda candidate: None
    return _swap
sys._getframe().f_trace = _swap
sys.settrace(lambda *a: None)
"""
#: a wrong add that tries to pass anyway (issue 36), and the references HF's code_eval then passes it for
FORGERIES = {
    "patch_json_dumps": ("import json\njson.dumps = lambda *a, **k: '{\"outcome\": \"passed\", \"detail\": \"\"}'\n"
                         + WRONG, ()),
    "always_equal": (SAME + "def add(a, b):\n    return Same()\n", (ADD, ADD_CHECK)),
    "settrace_swaps_the_candidate": (SAME + WRONG + SWAP, (ADD, ADD_CHECK)),
    "patch_builtins": ("import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
                       "builtins.abs = lambda x: 0\n" + WRONG, (NEAR,)),
    "patch_isinstance": (SAME + "import builtins\nbuiltins.isinstance = lambda *a: True\n"
                         "def add(a, b):\n    return Same()\n", (TYPED,)),
    "os_exit_before_the_tests": ("import os\nos._exit(0)\n" + WRONG, ()),
    "sys_exit_before_the_tests": ("import sys\nsys.exit(0)\n" + WRONG, ()),
}


@pytest.fixture
def reference_code_eval(monkeypatch):
    """HF evaluate's own code_eval, from a copy of its script in the module cache; skip without one."""
    scripts = glob.glob(os.path.expanduser(
        "~/.cache/huggingface/modules/evaluate_modules/metrics/code_eval/*/code_eval.py"))
    if not scripts:
        pytest.skip("no local copy of HF evaluate's code_eval script")
    import evaluate

    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    return evaluate.load(scripts[0])


def test_right_wrong_hanging_and_forging_programs_score_as_code_eval_scores_them():
    scores, results = CodeEval(allow_unsafe_exec=UNSAFE_OK).compute(
        predictions=[[RIGHT, WRONG, HANGS, *FORGES], [RIGHT]], references=[ADD, ADD], k=[1, 2, 8])
    verdicts = [(r["passed"], r["result"].split(":")[0]) for _, r in results[0]]
    assert verdicts == [(True, "passed"), (False, "failed"), (False, "timed out")] + [(False, "failed")] * len(FORGES)
    assert [(n, r["task_id"], r["completion_id"]) for n, r in results[1]] == [(0, 1, 0)]
    n, c = 2 + len(FORGES) + 1, 1
    assert scores == {"pass@1": pytest.approx((c / n + 1.0) / 2)}  # no pass@2, pass@8: the second has 1 candidate


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_program_cannot_forge_its_pass(forgery):
    """Issue 36: the tests run in the tester, so what the program patches, returns or swaps is judged, not obeyed."""
    program, _ = FORGERIES[forgery]
    scores, results = CodeEval(allow_unsafe_exec=UNSAFE_OK).compute(
        predictions=[[program]] * len(REFERENCES), references=REFERENCES, k=[1])
    runs = [r for i in range(len(REFERENCES)) for _, r in results[i]]
    assert [r["passed"] for r in runs] == [False] * len(REFERENCES), runs
    assert all(r["result"].startswith("failed: ") for r in runs) and scores == {"pass@1": 0.0}, runs


def test_the_forgeries_pass_hf_code_eval(reference_code_eval):
    """They are real: each passes HF's code_eval, where the program judges itself, for the references named."""
    for forgery, (program, forged) in FORGERIES.items():
        for reference in forged:
            _, runs = reference_code_eval.compute(predictions=[[program]], references=[reference], k=[1])
            assert runs[0][0][1]["passed"], (forgery, reference)


def test_pass_at_k_and_verdicts_equal_hf_code_evals(reference_code_eval):
    predictions = [[RIGHT, WRONG, HANGS, *FORGES[:2], MAIN_BLOCK], [WRONG, RIGHT, RIGHT, WRONG, RIGHT, MAIN_BLOCK],
                   [RIGHT, WRONG, MAIN_BLOCK], [RIGHT, "def add(a, b):\n    return 5.0", RIGHT], [RIGHT, WRONG, RIGHT]]
    references = [ADD, ADD, ADD_CHECK, TYPED, "import math\nassert math.isclose(add(0.1, 0.2), 0.3)"]
    ours, our_runs = CodeEval(allow_unsafe_exec=UNSAFE_OK).compute(predictions=predictions, references=references,
                                                                   k=[1, 2, 3])
    theirs, their_runs = reference_code_eval.compute(predictions=predictions, references=references, k=[1, 2, 3])
    assert ours == theirs  # bit for bit: the same estimator, the same verdicts
    for task_id in range(len(references)):
        assert [r["passed"] for _, r in our_runs[task_id]] == [r["passed"] for _, r in sorted(their_runs[task_id])]


def test_a_humaneval_reference_is_judged_with_its_registered_prompt_as_prelude():
    prompt = 'def helper(x):\n    return x + 1\n\n\ndef add(a, b):\n    """a + b"""\n'
    reference = "def check(candidate):\n    assert candidate(2, 3) == helper(4)\n\ncheck(add)"
    metric = CodeEval(allow_unsafe_exec=UNSAFE_OK)
    metric.register(reference, prompt)
    right, wrong = prompt + "    return a + b\n", prompt + "    return a * b\n"
    detached = "def add(a, b):\n    return a + b\n"                        # does not start with the prompt
    forged = prompt + "    return a * b\n\n\nhelper = lambda x: 6\n"   # the tests' helper is the prompt's
    _, results = metric.compute(predictions=[[right, wrong, detached, forged]], references=[reference], k=[1])
    verdicts = [(r["passed"], r["result"]) for _, r in results[0]]
    assert verdicts[:2] == [(True, "passed"), (False, "failed: AssertionError: ")], verdicts
    assert verdicts[2] == (False, "failed: NameError: name 'helper' is not defined"), verdicts
    assert verdicts[3][0] is False, verdicts


def test_references_split_into_the_testers_tests():
    he = split_reference("\n\nMETADATA = {}\n\ndef check(candidate):\n    assert candidate(1) == 2\n\ncheck(inc)\n")
    assert (he.entry_point, he.uses_prompt, he.prelude) == ("inc", True, "")
    assert "check(inc)" not in he.test and "def check(candidate)" in he.test
    mbpp = split_reference("assert math.isclose(area(2), 12.56, rel_tol=0.01)\nassert sorted(area(1) for _ in [0]) == [3]")
    assert (mbpp.entry_point, mbpp.prelude, mbpp.unreachable) == ("area", "import math\n", None)
    assert mbpp.test.startswith("def check(candidate):\n    assert math.isclose(area(2)")
    two = split_reference("assert max_chain_length([Pair(5, 24)], 1) == 1")
    assert two.entry_point == "max_chain_length" and "Pair, max_chain_length" in (two.unreachable or "")
    assert "call no function of the program" in (split_reference("assert max([1]) == 1").unreachable or "")
    for other in ("print(1)", "def f(:", "x = 1\ncheck(f)", "check(f)", ""):
        with pytest.raises(UserError, match="not the tests of HumanEval .* or of MBPP") as refused:
            split_reference(other)
        assert "\n" not in str(refused.value)


def test_asserts_that_reach_more_of_the_program_than_one_function_fail_with_a_detail():
    reference = "assert area(Square(2)) == 4"
    program = "class Square:\n    def __init__(self, s):\n        self.s = s\n\ndef area(q):\n    return q.s ** 2\n"
    _, results = CodeEval(allow_unsafe_exec=UNSAFE_OK).compute(predictions=[[program]], references=[reference], k=[1])
    ((_, r),) = results[0]
    assert not r["passed"] and "the tests use Square, area of the program" in r["result"], r


def test_an_infilling_prompt_gives_its_whole_top_level_statements_as_prelude():
    prompt = "import math\n\n\ndef poly(xs, x):\n    return sum(xs)\n\n\ndef find_zero(xs):\n    a = 1\n    if a"
    assert leading_code(prompt) == "import math\n\n\ndef poly(xs, x):\n    return sum(xs)\n\n\n"
    whole = 'def f():\n    """doc\nat column 0"""\n'
    assert leading_code(whole) == whole


def test_outside_the_build_evaluate_load_is_evaluates_own():
    import evaluate

    original = evaluate.load
    with sandboxed_code_eval():
        made = evaluate.load("code_eval")
        assert isinstance(made, CodeEval) and made.allow_unsafe_exec  # the task module's own self-test
        with pytest.raises(FileNotFoundError):
            evaluate.load("no_such_metric_anywhere", module_type="metric")
    assert evaluate.load is original and not made.allow_unsafe_exec  # the run's preflight arms it


def harness_run(data_dir, spec, limit):
    evaluation = plan([spec], data_dir, limit, PromptOptions())
    return evaluation, evaluation.tasks[spec]


@SLOW
def test_per_document_pass_at_1_equals_code_evals_on_the_same_completions(data_dir, reference_code_eval):
    """Hand-made completions through lm-eval's filters and process_results: each document's pass@1 is code_eval's."""
    reference = reference_code_eval
    evaluation, run = harness_run(data_dir, "lm_eval:humaneval", 5)
    docs = [inst.doc for inst in run.instances]
    completions = [docs[0]["canonical_solution"], "    return None\n", "    while True:\n        pass\n",
                   "    import os\n    os._exit(0)\n", docs[4]["canonical_solution"]]
    results = {}
    for inst, text in zip(run.instances, completions):
        (request,) = inst.requests
        assert isinstance(request, Generate)
        results[request.key] = GenerateResult((Generation(text, 1, "stop"),))
    evaluation.preflight(UNSAFE_OK)
    scored = run.task.score_docs(run.instances, results)
    ours = [r.metrics["pass@1,create_test"] for r in scored.records]
    theirs = [float(reference.compute(predictions=[[d["prompt"] + c]], references=[f"{d['test']}\ncheck({d['entry_point']})"],
                                      k=[1])[0]["pass@1"]) for d, c in zip(docs, completions)]
    assert ours == theirs == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert scored.metrics["pass@1,create_test"].mean == pytest.approx(0.4)
    assert scored.harness["sandbox"] == sandbox.detect().describe()


@SLOW
def test_forged_completions_fail_through_the_bridge_where_code_eval_passes_them(data_dir, reference_code_eval):
    """Issue 36 through lm-eval's filters and process_results: completions that HF's code_eval passes fail."""
    evaluation, run = harness_run(data_dir, "lm_eval:humaneval", 2)
    docs = [inst.doc for inst in run.instances]
    always_equal = ("    class Same:\n        def __eq__(self, other):\n            return True\n"
                    "    return Same()\n")
    swaps_check = ("    return None\n\n\nimport sys\ndef _swap(frame, event, arg):\n"
                   "    frame.f_globals['check'] = lambda candidate: None\n    return _swap\n"
                   "sys._getframe().f_trace = _swap\nsys.settrace(lambda *a: None)\n")
    completions = [always_equal, swaps_check]
    results = {}
    for inst, text in zip(run.instances, completions):
        (request,) = inst.requests
        results[request.key] = GenerateResult((Generation(text, 1, "stop"),))
    evaluation.preflight(UNSAFE_OK)
    scored = run.task.score_docs(run.instances, results)
    theirs = [float(reference_code_eval.compute(predictions=[[d["prompt"] + c]],
                                                references=[f"{d['test']}\ncheck({d['entry_point']})"],
                                                k=[1])[0]["pass@1"]) for d, c in zip(docs, completions)]
    assert theirs == [1.0, 1.0]   # forged there
    assert [r.metrics["pass@1,create_test"] for r in scored.records] == [0.0, 0.0]


@SLOW
def test_the_primary_metric_is_the_key_lm_eval_reports(data_dir):
    for spec, primary in [("lm_eval:humaneval", "pass@1,create_test"), ("lm_eval:humaneval_instruct", "pass@1,create_test"),
                          ("lm_eval:humaneval_64", "pass@2,create_test")]:
        _, run = harness_run(data_dir, spec, 1)
        assert run.config.primary_metric == primary


@SLOW
def test_a_humaneval_run_writes_pass_at_1_records_offline_without_evaluates_cache(tmp_path, data_dir, monkeypatch):
    from tinylm import build_tiny_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "no-modules"))  # no cached code_eval script
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    monkeypatch.chdir(tmp_path)  # evaluate looks for ./code_eval/code_eval.py first
    out = tmp_path / "run"
    assert main(["run", "--model", str(build_tiny_model(tmp_path / "tiny")), "--tasks", "lm_eval:humaneval",
                 "--limit", "2", "--data-dir", str(data_dir), "--gen-kwargs", "max_gen_toks=16",
                 "--output", str(out)]) == 0
    task = proctor.read_run(out).tasks["lm_eval:humaneval"]
    assert task.primary_metric == "pass@1,create_test" and task.metrics["pass@1,create_test"].mean == 0.0
    assert [set(r.metrics) for r in task.records] == [{"pass@1,create_test"}] * 2
    assert task.harness["sandbox"] == sandbox.detect().describe() and task.harness["allow_unsafe_exec"] is False


@SLOW
def test_an_included_copy_of_lm_evals_humaneval_scores_in_the_sandbox_too(tmp_path, data_dir, monkeypatch):
    """`--include`d task files import their `!function`s when proctor checks them: code_eval is proctor's there too."""
    import lm_eval
    from tinylm import build_tiny_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    shipped = Path(lm_eval.__file__).parent / "tasks" / "humaneval"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "utils.py").write_text((shipped / "utils.py").read_text())
    (tasks / "my_humaneval.yaml").write_text((shipped / "humaneval.yaml").read_text().replace(
        "task: humaneval", "task: my_humaneval"))
    out = tmp_path / "run"
    assert main(["run", "--model", str(build_tiny_model(tmp_path / "tiny")), "--include",
                 str(tasks / "my_humaneval.yaml"), "--tasks", "lm_eval:my_humaneval", "--limit", "1", "--data-dir", str(data_dir),
                 "--gen-kwargs", "max_gen_toks=8", "--output", str(out)]) == 0
    task = proctor.read_run(out).tasks["lm_eval:my_humaneval"]
    assert task.primary_metric == "pass@1,create_test" and "sandbox" in task.harness


@SLOW
def test_refused_where_proctors_humaneval_is_refused(data_dir, monkeypatch):
    """No network isolation: --allow-unsafe-exec is needed, as for humaneval::greedy; the same one line."""
    none = sandbox.SandboxInfo(sandbox.Isolation.NONE, drops_uid=False)
    monkeypatch.setattr(sandbox, "detect", lambda: none)
    evaluation, _ = harness_run(data_dir, "lm_eval:humaneval", 1)
    with pytest.raises(UserError) as theirs:
        evaluation.preflight(False)
    native = plan(["humaneval::greedy"], data_dir, 1, PromptOptions())
    with pytest.raises(UserError) as ours:
        native.preflight(False)
    assert str(theirs.value) == str(ours.value) and "--allow-unsafe-exec" in str(theirs.value)
    evaluation.preflight(True)
    native.preflight(True)


@SLOW
def test_an_unsafe_task_whose_code_runs_outside_the_sandbox_is_still_refused(tmp_path, data_dir, capsys):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "utils.py").write_text("def passes(references, predictions):\n    exec(predictions[0])\n    return 1.0\n")
    (tasks / "my_exec.yaml").write_text(
        "task: my_exec\ndataset_path: openai/openai_humaneval\ntest_split: test\noutput_type: generate_until\n"
        "doc_to_text: '{{prompt}}'\ndoc_to_target: '{{test}}'\nunsafe_code: true\n"
        "metric_list:\n  - metric: !function utils.passes\n    aggregation: mean\n"
        "generation_kwargs:\n  until: ['\\nclass']\n  max_gen_toks: 8\n")
    assert main(["run", "--model", "smollm2-135m", "--include", str(tasks), "--tasks", "lm_eval:my_exec",
                 "--limit", "1", "--data-dir", str(data_dir), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "lm_eval:my_exec: lm-eval's task runs the model's generated code in this process" in err
    assert "--allow-unsafe-exec" in err


@SLOW
def test_a_code_eval_task_whose_references_are_of_another_shape_is_refused_before_the_run(tmp_path, data_dir, capsys,
                                                                                         monkeypatch):
    """Its programs would judge themselves: one line when the run starts, nothing run self-judged."""
    import lm_eval

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shipped = Path(lm_eval.__file__).parent / "tasks" / "humaneval"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "utils.py").write_text((shipped / "utils.py").read_text())
    (tasks / "my_selfjudged.yaml").write_text((shipped / "humaneval.yaml").read_text().replace(
        "task: humaneval", "task: my_selfjudged").replace(
        'doc_to_target: "{{test}}\\ncheck({{entry_point}})"', 'doc_to_target: "{{test}}\\nprint(check)"'))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--model", "smollm2-135m", "--include", str(tasks / "my_selfjudged.yaml"),
                 "--tasks", "lm_eval:my_selfjudged",
                 "--limit", "1", "--data-dir", str(data_dir), "--allow-unsafe-exec",
                 "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "code_eval: this task's reference" in err and "not the tests of HumanEval" in err, err


@SLOW
def test_an_included_directory_of_lm_eval_code_tasks_builds_offline_without_a_metric_cache(tmp_path, data_dir):
    """Its utils.py (evaluate.load('code_eval') at import) is lm-eval's !function module, not a proctor task module."""
    import shutil
    import subprocess
    import sys

    import lm_eval

    shipped = Path(lm_eval.__file__).parent / "tasks" / "humaneval"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.copy(shipped / "utils.py", tasks / "utils.py")
    (tasks / "my_humaneval.yaml").write_text((shipped / "humaneval.yaml").read_text()
                                             .replace("task: humaneval", "task: my_humaneval"))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PROCTOR_CACHE_DIR": str(tmp_path / "cache")}  # no cached code_eval script
    done = subprocess.run([sys.executable, "-m", "proctor", "prompts", "--include", str(tasks), "--tasks",
                           "lm_eval:my_humaneval", "--limit", "1", "--data-dir", str(data_dir), "--output",
                           str(tmp_path / "prompts")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "prompts" / "lm_eval-my_humaneval" / "requests.jsonl").is_file()


@SLOW
def test_a_task_that_does_not_score_code_does_not_import_evaluate(data_dir):
    """evaluate imports transformers' pipelines (seconds); only a task module that uses it should pay that."""
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from proctor.harness import specs; "
            f"specs.load('lm_eval:mmlu_anatomy', Path({str(data_dir)!r}), 5, None); "
            "assert 'evaluate' not in sys.modules, 'evaluate imported'")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
