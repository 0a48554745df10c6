"""lm-eval's HumanEval tasks on the bridge, their programs run in proctor's sandbox (proctor/harness/code_eval.py).

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
from proctor.harness.code_eval import CodeEval, sandboxed_code_eval
from proctor.pipeline import PromptOptions, plan
from proctor.requests import Generate, GenerateResult, Generation

SLOW = pytest.mark.slow  # lm-eval
#: runs where the sandbox cannot cut the network off, as tests/test_sandbox.py does
UNSAFE_OK = not sandbox.detect().network_isolated

ADD = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"
RIGHT, WRONG = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b"
HANGS = "def add(a, b):\n    while True:\n        pass"
#: code that ends its process before the tests run, so that nothing reports a failure
FORGES = ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit(0)", "exit()",
          "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"]


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


def test_pass_at_k_and_verdicts_equal_hf_code_evals(reference_code_eval):
    reference = reference_code_eval
    predictions = [[RIGHT, WRONG, HANGS, *FORGES[:2]], [WRONG, RIGHT, RIGHT, WRONG, RIGHT]]
    ours, our_runs = CodeEval(allow_unsafe_exec=UNSAFE_OK).compute(predictions=predictions, references=[ADD, ADD],
                                                                   k=[1, 2, 5])
    theirs, their_runs = reference.compute(predictions=predictions, references=[ADD, ADD], k=[1, 2, 5])
    assert ours == theirs  # bit for bit: the same estimator, the same verdicts
    for task_id in (0, 1):
        assert [r["passed"] for _, r in our_runs[task_id]] == [r["passed"] for _, r in sorted(their_runs[task_id])]


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
