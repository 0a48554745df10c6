"""HumanEval: lm-eval 0.4.13's protocol, and verdicts from the real sandbox on the real file."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from proctor import sandbox
from proctor.errors import UserError
from proctor.metrics.sampling import pass_at_k
from proctor.requests import GenerateResult, Generation
from proctor.sandbox import Isolation, SandboxInfo
from proctor.tasks import humaneval
from proctor.tasks.registry import resolve, task_config

UNSAFE_OK = not sandbox.detect().network_isolated   # let the suite run where nothing isolates


def task(spec: str = "humaneval::greedy") -> humaneval.HumanEvalTask:
    t = resolve(spec)[0]
    t.allow_unsafe_exec = UNSAFE_OK
    return t


def results(*texts: str) -> GenerateResult:
    return GenerateResult(tuple(Generation(t, 1, "stop") for t in texts))


@pytest.fixture(scope="module")
def instances(data_dir):
    return task().instances(data_dir)


def _lm_eval_yaml(name: str) -> dict:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None:
        pytest.skip("lm-eval is not installed")
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    path = Path(spec.origin).parent / "tasks" / "humaneval" / f"{name}.yaml"
    return yaml.load(path.read_text(), Loader=Loader)


@pytest.mark.parametrize("spec,lm_eval_task", [("humaneval::greedy", "humaneval"),
                                               ("humaneval::n64", "humaneval_64")])
def test_requests_match_lm_eval_yaml(data_dir, spec, lm_eval_task):
    cfg = _lm_eval_yaml(lm_eval_task)
    base = _lm_eval_yaml("humaneval")
    gen = cfg["generation_kwargs"]
    inst = task(spec).instances(data_dir, limit=1)[0]
    req = inst.request
    assert inst.prompt == inst.target.prompt and base["doc_to_text"] == "{{prompt}}"
    assert req.stop == tuple(gen["until"]) and req.max_gen_toks == gen["max_gen_toks"]
    assert req.do_sample == gen["do_sample"] and req.repeats == cfg.get("repeats", base["repeats"])
    if req.do_sample:
        assert (req.temperature, req.top_p) == (gen["temperature"], gen["top_p"])
    lm_eval_ks = {f"pass_at_{k}" for k in cfg["metric_list"][0]["k"]}
    assert lm_eval_ks <= set(task(spec).metric_names)
    assert task_config(spec).num_shots == cfg.get("num_fewshot", base["num_fewshot"]) == 0


def test_program_is_prompt_completion_newline_lm_eval_target(instances, data_dir):
    jinja2 = pytest.importorskip("jinja2")
    target_tpl = _lm_eval_yaml("humaneval")["doc_to_target"]
    doc = task().docs(data_dir)[0]
    completion = "    return False\n"
    reference = jinja2.Template(target_tpl).render(**doc)   # lm-eval's doc_to_target
    # lm-eval's build_predictions (prompt + r), then HF code_eval (candidate + "\n" + reference)
    assert instances[0].target.program(completion) == doc["prompt"] + completion + "\n" + reference
    assert [i.native_id for i in instances[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert instances[0].query_id == "humaneval::greedy#HumanEval/0"


def test_samples_are_judged_split_never_as_one_self_reporting_program(instances):
    """The completed function runs in the sandbox; the prompt (its helpers) and the tests
    run in the trusted tester; the single lm-eval program is never run."""
    target = instances[0].target
    c = target.candidate("    return False\n")
    assert (c.source, c.prelude, c.test, c.entry_point) == (
        target.prompt + "    return False\n", target.prompt, target.test, "has_close_elements")
    assert not hasattr(sandbox, "run_many") and not hasattr(sandbox, "run_program")   # no such mode (issue 36)
    [score] = task().score_many([instances[0]], [results(target.canonical_solution)])
    assert score.is_correct


@pytest.mark.slow  # heavy: every canonical solution in the sandbox, over 3 s
def test_all_canonical_solutions_pass_and_all_bare_prompts_fail(instances):
    t = task()
    assert len(instances) == 164
    good = t.score_many(instances, [results(i.target.canonical_solution) for i in instances])
    failing = [(i.query_id, s.model_output[0].details["detail"]) for i, s in zip(instances, good)
               if not s.is_correct]
    assert failing == []
    assert all(s.metrics == {"pass_at_1": 1.0} for s in good)
    bare = t.score_many(instances, [results("") for _ in instances])
    assert not any(s.is_correct for s in bare)
    assert {s.model_output[0].details["outcome"] for s in bare} == {"failed"}


@pytest.mark.slow  # heavy: sandboxed runs, over 3 s
def test_wrong_and_hostile_completions_fail_with_the_right_verdict(instances):
    t = task()
    first = instances[0]  # has_close_elements(numbers, threshold) -> bool
    cases = {
        "    return True\n": "failed",                     # wrong answer
        "    return (\n": "failed",                        # not valid Python
        "    import sys\n    sys.exit(0)\n": "failed",     # exits when check() calls it
        "    while True:\n        pass\n": "timeout",
        "    x = bytearray(1 << 34)\n": "memory",
    }
    scores = t.score_many([first] * len(cases), [results(c) for c in cases])
    got = {c: s.model_output[0].details["outcome"] for c, s in zip(cases, scores)}
    assert got == cases
    assert "SyntaxError" in scores[1].model_output[0].details["detail"]
    out = scores[0].model_output[0].to_dict()
    assert out["sandbox"] == sandbox.detect().describe() and out["passed"] is False


def test_sampled_spec_reports_unbiased_pass_at_k(data_dir):
    t = task("humaneval::n64")
    inst = t.instances(data_dir, limit=1)[0]
    right, wrong = inst.target.canonical_solution, "    return True\n"
    texts = [right if i % 4 == 0 else wrong for i in range(64)]   # 16 of 64 pass
    score = t.score(inst, results(*texts))
    assert set(score.metrics) == {"pass_at_1", "pass_at_2", "pass_at_8", "pass_at_16",
                                  "pass_at_32", "pass_at_64"}
    for k in (1, 2, 8, 16, 32, 64):
        assert score.metrics[f"pass_at_{k}"] == pytest.approx(pass_at_k(64, 16, k))
    assert score.metrics["pass_at_1"] == 0.25 and score.is_correct
    assert sum(o.details["passed"] for o in score.model_output) == 16
    with pytest.raises(ValueError, match="64"):
        t.score(inst, results(right))


def test_refuses_without_network_isolation_unless_allowed(monkeypatch, instances):
    weak = SandboxInfo(Isolation.NONE, drops_uid=False)
    monkeypatch.setattr(sandbox.isolation, "detect", lambda: weak)
    monkeypatch.setattr(sandbox, "detect", lambda: weak)
    t = task()
    t.allow_unsafe_exec = False
    with pytest.raises(UserError, match="--allow-unsafe-exec"):
        t.preflight(t.allow_unsafe_exec)
    with pytest.raises(UserError, match="--allow-unsafe-exec"):
        t.score(instances[0], results(instances[0].target.canonical_solution))
    t.allow_unsafe_exec = True
    t.preflight(t.allow_unsafe_exec)


def test_malformed_local_file_is_one_clear_error(tmp_path):
    (tmp_path / "humaneval").mkdir()
    rows = [{"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "  pass\n",
             "test": "def check(c): pass", "entry_point": "f"},
            {"task_id": "HumanEval/1", "prompt": "def g():\n"}]
    with gzip.open(tmp_path / "humaneval" / "HumanEval.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(UserError, match=r"HumanEval.jsonl.gz:2: .*canonical_solution, test, entry_point"):
        task().docs(tmp_path)
