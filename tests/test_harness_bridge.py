"""lm-eval's own tasks on proctor's engine (`lm_eval:<task>` specs, proctor/harness/).

The reference is lm-eval itself: `simple_evaluate` with its HFLM over the same model
object and the same local rows, its per-document samples compared with the bridge's records.
"""

import json
import sys

import pytest

import proctor
from proctor.cli import main
from proctor.errors import UserError
from proctor.pipeline import PromptOptions, plan

SLOW = pytest.mark.slow  # lm-eval (and, in some, the real SmolLM2)


def test_without_lm_eval_an_lm_eval_spec_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` raises ImportError
    assert main(["run", "--model", "smollm2-135m", "--tasks", "lm_eval:arc_easy", "--output",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'proctor[lm-eval]'" in err
    assert not (tmp_path / "out").exists()


def bridged(spec, data_dir, limit, num_fewshot=None):
    return plan([spec], data_dir, limit, PromptOptions(num_fewshot=num_fewshot))


def requests_of(evaluation):
    return [[r.to_dict() for r in inst.requests] for run in evaluation.tasks.values() for inst in run.instances]


@SLOW
@pytest.mark.parametrize("native, spec, shots, limit", [
    ("arc_challenge::leaderboard", "lm_eval:arc_challenge", 25, 4),
    ("mmlu_anatomy::leaderboard", "lm_eval:mmlu_anatomy", 5, 6),
    ("truthfulqa_mc1::leaderboard", "lm_eval:truthfulqa_mc1", None, 4),
    ("truthfulqa_mc2::leaderboard", "lm_eval:truthfulqa_mc2", None, 4),
    ("bbh_boolean_expressions:cot::lm_eval", "lm_eval:bbh_cot_fewshot_boolean_expressions", None, 3),
])
def test_the_bridge_asks_what_proctors_own_lm_eval_formats_ask(data_dir, native, spec, shots, limit):
    ours = bridged(native, data_dir, limit, shots)
    theirs = bridged(spec, data_dir, limit, shots)
    assert requests_of(theirs) == requests_of(ours)
    (run,) = theirs.tasks.values()
    assert [i.query_id for i in run.instances] == [f"{spec}#{k}" for k in range(limit)]


@SLOW
@SLOW
@pytest.mark.parametrize("native, spec, shots", [
    ("arc_challenge::leaderboard", "lm_eval:arc_challenge", 3),
    ("mmlu_anatomy::leaderboard", "lm_eval:mmlu_anatomy", 2),
    ("bbh_boolean_expressions:cot::lm_eval", "lm_eval:bbh_cot_fewshot_boolean_expressions", None),
])
@pytest.mark.parametrize("layout", [{"chat": True}, {"chat": True, "fewshot_as_multiturn": False},
                                    {"chat": True, "system_instruction": "Be brief."},
                                    {"system_instruction": "Be brief."}])
def test_chat_prompts_and_system_instructions_ask_what_the_native_formats_ask(data_dir, native, spec, shots,
                                                                                layout):
    ours = plan([native], data_dir, 2, PromptOptions(num_fewshot=shots, **layout))
    theirs = plan([spec], data_dir, 2, PromptOptions(num_fewshot=shots, **layout))
    assert requests_of(theirs) == requests_of(ours)


@SLOW
def test_a_group_is_a_suite_of_its_members_and_a_bad_name_is_one_line(data_dir):
    evaluation = bridged("lm_eval:mmlu_humanities", data_dir, 1)
    assert len(evaluation.tasks) == 13 and all(n.startswith("lm_eval:mmlu_") for n in evaluation.tasks)
    from proctor.tasks.registry import suite
    s = suite("lm_eval:mmlu_humanities")
    assert s.primary == "size_weighted" and len(s.members) == 13
    with pytest.raises(UserError, match=r"unknown lm-eval task.*'arc_esay'.*did you mean lm_eval:arc_easy"):
        bridged("lm_eval:arc_esay", data_dir, 1)


@SLOW
def test_few_shot_examples_from_a_split_the_data_dir_lacks_are_refused(data_dir):
    with pytest.raises(UserError, match=r"lm_eval:hellaswag: 10-shot prompts draw examples from the train split"):
        bridged("lm_eval:hellaswag", data_dir, 2, 10)
    assert len(bridged("lm_eval:hellaswag", data_dir, 2).tasks["lm_eval:hellaswag"].instances) == 2


@SLOW
def test_a_dataset_that_cannot_be_found_offline_is_one_line(monkeypatch, capsys, tmp_path, data_dir):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    assert main(["run", "--model", "smollm2-135m", "--tasks", "lm_eval:piqa", "--data-dir", str(data_dir),
                 "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lm_eval:piqa: its dataset" in err and "HF datasets cache" in err


#: proctor's option -> lm-eval's simple_evaluate keyword of the same meaning
LM_EVAL_NAMES = {"chat_template": "apply_chat_template", "system_instruction": "system_instruction",
                 "gen_kwargs": "gen_kwargs", "fewshot_as_multiturn": "fewshot_as_multiturn"}


def hflm(backend):
    """lm-eval's own HF model over the backend's model object."""
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=8, max_length=2048)


def evaluate_with(lm, data_dir, task, limit, **options):
    """lm-eval's own run of one task on `lm`, rows from data_dir: its per-document samples and results."""
    import lm_eval

    from proctor.harness.offline import local_datasets

    with local_datasets(data_dir):
        out = lm_eval.simple_evaluate(model=lm, tasks=[task], limit=limit, log_samples=True, bootstrap_iters=0,
                                      **options)
    return out["samples"][task], out["results"][task]


def lm_eval_samples(backend, data_dir, task, limit, num_fewshot=None, **options):
    """lm-eval's own run: simple_evaluate + HFLM over the backend's model, proctor's options by lm-eval's names."""
    return evaluate_with(hflm(backend), data_dir, task, limit, num_fewshot=num_fewshot,
                         **{LM_EVAL_NAMES[k]: v for k, v in options.items()})


@SLOW
@pytest.mark.parametrize("task, limit, shots, options", [
    ("arc_easy", 10, None, {}), ("mmlu_anatomy", 8, 5, {}), ("hellaswag", 5, None, {}), ("gsm8k", 2, None, {}),
    ("arc_easy", 4, None, {"chat_template": True}),
    ("mmlu_anatomy", 3, 2, {"chat_template": True, "fewshot_as_multiturn": False, "system_instruction": "Be brief."}),
    ("gsm8k", 2, 2, {"chat_template": True, "system_instruction": "Think.", "gen_kwargs": {"max_gen_toks": 48}}),
])
def test_per_document_metrics_equal_lm_evals_own_run_on_smollm2(data_dir, smollm2_backend, task, limit, shots,
                                                                options):
    samples, results = lm_eval_samples(smollm2_backend, data_dir, task, limit, shots, **options)
    result = proctor.evaluate(smollm2_backend, tasks=[f"lm_eval:{task}"], limit=limit, num_fewshot=shots,
                              data_dir=data_dir, **options)
    record = result.tasks[f"lm_eval:{task}"]
    by_filter = {}
    for s in samples:
        by_filter.setdefault(s["filter"], {})[s["doc_id"]] = s
    worst = 0.0
    for doc in record.records:
        for filter_key, theirs in by_filter.items():
            ref = theirs[doc.doc_id]
            for metric in ref["metrics"]:
                key = metric if filter_key == "none" else f"{metric},{filter_key}"
                assert doc.metrics[key] == ref[metric], (doc.query_id, key)
            expected = json.loads(json.dumps(ref["filtered_resps"]))
            if doc.sum_logits():  # (log-likelihood, is_greedy) per choice: the numbers within 1e-4
                assert [g for _, g in doc.filtered[filter_key]] == [g for _, g in expected], doc.query_id
                assert [v for v, _ in doc.filtered[filter_key]] == pytest.approx([v for v, _ in expected], abs=1e-4)
            else:
                assert doc.filtered[filter_key] == expected, doc.query_id
        for out, resp in zip(doc.model_output, samples[doc.doc_id]["resps"]):
            if "sum_logits" in out:
                worst = max(worst, abs(out["sum_logits"] - resp[0][0]))
            else:
                assert [s["text"] for s in out["samples"]] == resp, doc.query_id
    assert worst <= 1e-4
    for key, summary in record.metrics.items():
        name = key if "," in key else f"{key},none"
        assert summary.mean == pytest.approx(results[name], abs=1e-9), key


@pytest.fixture(scope="module")
def smollm2_backend():
    from proctor.backends import load_backend

    return load_backend("smollm2-135m", device="cpu", dtype="float32", max_length=2048)


@SLOW
def test_a_bridged_run_directory_reads_back_reports_and_resumes(tmp_path, data_dir, capsys):
    out = tmp_path / "run"
    args = ["run", "--model", "smollm2-135m", "--tasks", "lm_eval:ai2_arc", "--limit", "3",
            "--data-dir", str(data_dir), "--output", str(out)]
    assert main(args) == 0
    assert "3/3 [" not in capsys.readouterr().err  # lm-eval's own progress bar of request building
    run = proctor.read_run(out)
    assert set(run.tasks) == {"lm_eval:arc_easy", "lm_eval:arc_challenge"}
    task = run.tasks["lm_eval:arc_easy"]
    assert task.kind == "harness" and task.harness["task"] == "arc_easy"
    assert len(task.harness["config_sha256"]) == 64 and "config_source" not in task.harness["config"]["metadata"]
    assert [r.query_id for r in task.records] == [f"lm_eval:arc_easy#{i}" for i in range(3)]
    assert main(["report", str(out), "--output", str(tmp_path / "r.html")]) == 0
    again = tmp_path / "again"
    assert main([*args[:-1], str(again)]) == 0  # every request from the result cache
    for name in ("lm_eval-arc_easy/predictions.jsonl", "query_metadata.jsonl"):
        assert (out / name).read_bytes() == (again / name).read_bytes()


@SLOW  # subprocesses, SIGKILL and rerun
def test_a_bridged_mmlu_run_killed_midway_resumes_to_byte_identical_files(data_dir, tmp_path):
    from killed_runs import finish, kill_when_stored, outputs, start_run
    from tinylm import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")

    def args(out):
        return ["--model", str(model), "--tasks", "lm_eval:mmlu_stem", "--limit", "6", "--num-fewshot", "5",
                "--batch-size", "2", "--data-dir", str(data_dir), "--output", str(out), "--no-progress"]

    out, cache = tmp_path / "run", tmp_path / "cache"
    # every run on one thread: float sums differ in the last digits between thread counts
    stored = kill_when_stored(start_run(args(out), cache, OMP_NUM_THREADS="1"), cache, "loglikelihood", 30)
    assert 0 < stored < 19 * 6 * 4 and not out.exists()
    resumed = start_run(args(out), cache, OMP_NUM_THREADS="1")
    fresh_out = tmp_path / "fresh"
    fresh = start_run(args(fresh_out), tmp_path / "fresh-cache", OMP_NUM_THREADS="1")
    finish(resumed)
    finish(fresh)
    resumed_files, fresh_files = outputs(out), outputs(fresh_out)
    assert len([n for n in fresh_files if n.endswith("predictions.jsonl")]) == 19
    assert resumed_files == fresh_files


def own_task_dir(root):
    """A task of one's own in lm-eval's format: a shipped task `include:`d, a `!function` from a local utils.py."""
    import lm_eval

    arc_easy = f"{lm_eval.__path__[0]}/tasks/arc/arc_easy.yaml"
    root.mkdir()
    (root / "my_arc.yaml").write_text(f"include: {arc_easy}\ntask: my_arc\ntag: []\n"
                                      "doc_to_text: !function utils.question_first\n")
    (root / "utils.py").write_text("def question_first(doc):\n"
                                   "    return 'Question: ' + doc['question'].strip() + '\\nMy answer:'\n")
    return root


@SLOW
def test_a_task_of_ones_own_in_lm_evals_yaml_format_runs_via_include(tmp_path, data_dir, capsys):
    from tinylm import build_tiny_model

    tasks = own_task_dir(tmp_path / "my_tasks")
    out = tmp_path / "run"
    assert main(["run", "--model", str(build_tiny_model(tmp_path / "tiny")), "--include", str(tasks),
                 "--tasks", "lm_eval:my_arc", "--limit", "3", "--data-dir", str(data_dir), "--output", str(out),
                 "--save-requests", "--no-progress"]) == 0
    assert f"--include {tasks}: read 1 lm-eval YAML task(s) (lm_eval:my_arc)" in capsys.readouterr().err
    run = proctor.read_run(out)
    record = run.tasks["lm_eval:my_arc"]
    assert [r.query_id for r in record.records] == [f"lm_eval:my_arc#{i}" for i in range(3)]
    assert record.harness["task"] == "my_arc" and "question_first" in record.harness["config"]["doc_to_text"]
    rows = [json.loads(line) for line in (out / "lm_eval-my_arc" / "requests.jsonl").read_text().splitlines()]
    contexts = [r["request"]["context"] for r in rows]
    assert len(contexts) >= 9 and all(c.startswith("Question: ") and c.endswith("\nMy answer:") for c in contexts)


@SLOW
@pytest.mark.parametrize("yaml_text, message", [
    ("task: my_bad\ndataset_path: allenai/ai2_arc\ndataset_name: ARC-Easy\ntest_split: test\n"
     "doc_to_txt: '{{question}}'\ndoc_to_target: answerKey\n",
     r"lm_eval:my_bad \(.*my_bad\.yaml\): lm-eval could not build the task: TypeError: .*'doc_to_txt'"),
    ("include: no_such_base.yaml\ntask: my_bad\n",
     r"my_bad\.yaml: lm-eval cannot read this task file: FileNotFoundError: .*no_such_base\.yaml"),
    ("task: my_bad\ndoc_to_text: !function helpers.nothing_here\n",
     r"my_bad\.yaml: lm-eval cannot read this task file: ImportError: Cannot import module 'helpers'"),
])
def test_a_broken_lm_eval_task_file_is_one_line(tmp_path, data_dir, capsys, yaml_text, message):
    import re

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "my_bad.yaml").write_text(yaml_text)
    assert main(["run", "--model", "smollm2-135m", "--include", str(tmp_path / "tasks"), "--tasks",
                 "lm_eval:my_bad", "--data-dir", str(data_dir), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.search(message, err[-1]) and not err[-1].startswith("Traceback"), err
    assert not (tmp_path / "out").exists()


@SLOW
def test_gen_kwargs_update_the_tasks_generation_kwargs_and_need_an_lm_eval_spec(data_dir):
    evaluation = plan(["lm_eval:gsm8k"], data_dir, 1, PromptOptions(gen_kwargs={"max_gen_toks": 7, "until": ["Q:"]}))
    (request,) = evaluation.tasks["lm_eval:gsm8k"].instances[0].requests
    assert request.max_gen_toks == 7 and request.stop == ("Q:",)
    with pytest.raises(UserError, match="generation_kwargs num_beams have no proctor equivalent"):
        plan(["lm_eval:gsm8k"], data_dir, 1, PromptOptions(gen_kwargs={"num_beams": 4}))
    with pytest.raises(UserError, match="--gen-kwargs sets lm-eval's generation_kwargs of lm_eval: specs"):
        plan(["gsm8k::olmes"], data_dir, 1, PromptOptions(gen_kwargs={"max_gen_toks": 7}))


@SLOW
def test_a_bare_lm_eval_name_runs_lm_evals_own_task_under_a_name_of_its_own(tmp_path, data_dir, capsys):
    from tinylm import build_tiny_model

    evaluation = plan(["hellaswag", "mmlu_anatomy"], data_dir, 2)
    assert [sp.spec for sp in evaluation.specs] == ["lm_eval:hellaswag", "lm_eval:mmlu_anatomy"]
    assert evaluation.tasks["lm_eval:hellaswag"].config.num_shots == 0  # lm-eval's own default
    out = tmp_path / "run"
    assert main(["run", "--model", str(build_tiny_model(tmp_path / "tiny")), "--tasks", "arc_challenge",
                 "arc_challenge::leaderboard", "--num-fewshot", "1", "--limit", "2", "--data-dir", str(data_dir),
                 "--output", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "arc_challenge is lm-eval's task: its results are under lm_eval:arc_challenge" in captured.err
    assert "Map:" not in captured.err  # the datasets.map progress bars of lm-eval's tasks
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["primary_scores"]) == ["lm_eval:arc_challenge", "arc_challenge::leaderboard"]
    run = proctor.read_run(out)
    assert [r.query_id for r in run.tasks["lm_eval:arc_challenge"].records] == ["lm_eval:arc_challenge#0",
                                                                                "lm_eval:arc_challenge#1"]
    assert (out / "lm_eval-arc_challenge").is_dir() and (out / "arc_challenge-leaderboard").is_dir()
    with pytest.raises(UserError, match=r"unknown task spec 'hellaswg'; did you mean"):
        plan(["hellaswg"], data_dir, 1)


def test_without_lm_eval_a_bare_name_proctor_does_not_know_names_the_install(monkeypatch, data_dir):
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(UserError, match=r"unknown task spec 'hellaswag'; did you mean 'hellaswag::leaderboard'.*"
                                        r"pip install 'proctor\[lm-eval\]'"):
        plan(["hellaswag"], data_dir, 1)
    assert list(plan(["arc_challenge::leaderboard"], data_dir, 1).tasks) == ["arc_challenge::leaderboard"]


@SLOW
def test_a_groups_score_and_stderr_are_lm_evals(data_dir, smollm2_backend):
    import lm_eval

    from proctor.harness.offline import local_datasets

    with local_datasets(data_dir):
        theirs = lm_eval.simple_evaluate(model=hflm(smollm2_backend), tasks=["mmlu_humanities"], limit=2)["results"]
    ours = proctor.evaluate(smollm2_backend, tasks=["lm_eval:mmlu_humanities"], limit=2, data_dir=data_dir)
    group = ours.primary_scores["lm_eval:mmlu_humanities"]
    assert group.aggregation == "size_weighted" and group.num_instances == 26
    assert group.score == pytest.approx(theirs["mmlu_humanities"]["acc,none"], abs=1e-12)
    assert group.stderr == pytest.approx(theirs["mmlu_humanities"]["acc_stderr,none"], abs=1e-12)
    for name in ("mmlu_philosophy", "mmlu_world_religions"):  # a member's stderr: lm-eval's mean_stderr
        assert ours.tasks[f"lm_eval:{name}"].metrics["acc"].stderr == pytest.approx(
            theirs[name]["acc_stderr,none"], abs=1e-12)


# ---- proctor as an lm-eval model (proctor/harness/lm.py, proctor/harness/cli.py) ------------


@SLOW
@pytest.mark.parametrize("task, limit, options", [("arc_easy", 8, {}), ("gsm8k", 2, {}),
                                                  ("arc_easy", 3, {"apply_chat_template": True})])
def test_lm_evals_own_run_on_proctorlm_equals_its_run_on_hflm(data_dir, smollm2_backend, task, limit, options):
    from proctor.harness.lm import ProctorLM

    theirs, their_results = evaluate_with(hflm(smollm2_backend), data_dir, task, limit, **options)
    with ProctorLM(smollm2_backend, cache=False) as lm:
        ours, our_results = evaluate_with(lm, data_dir, task, limit, **options)
    assert [s["arguments"] for s in ours] == [s["arguments"] for s in theirs]  # the same prompts
    for mine, ref in zip(ours, theirs):
        for metric in ref["metrics"]:
            assert mine[metric] == ref[metric], (mine["doc_id"], metric)
        if isinstance(ref["resps"][0][0], str):
            assert mine["resps"] == ref["resps"]
        else:
            assert [r[0][1] for r in mine["resps"]] == [r[0][1] for r in ref["resps"]]
            assert [r[0][0] for r in mine["resps"]] == pytest.approx([r[0][0] for r in ref["resps"]], abs=1e-4)
    assert {k: v for k, v in our_results.items() if k != "alias"} == pytest.approx(
        {k: v for k, v in their_results.items() if k != "alias"}, abs=1e-12)


@SLOW
def test_proctorlm_refuses_an_option_it_does_not_take():
    from proctor.harness.lm import ProctorLM

    with pytest.raises(UserError, match="ProctorLM does not take pretrained; it takes proctor's model options"):
        ProctorLM.create_from_arg_string("pretrained=gpt2")


@SLOW  # a subprocess importing lm-eval
def test_lm_evals_command_line_runs_proctors_model(tmp_path, data_dir):
    import subprocess

    from tinylm import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "proctor", "lm-eval", "--data-dir", str(data_dir), "run", "--model", "proctor",
         "--model_args", f"model={model},max_length=512", "--tasks", "arc_easy", "--limit", "3",
         "--output_path", str(out)],
        capture_output=True, text=True, env={**__import__("os").environ, "PROCTOR_CACHE_DIR": str(tmp_path / "c"),
                                             "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    (results,) = out.rglob("results_*.json")
    reported = json.loads(results.read_text())
    assert reported["config"]["model"] == "proctor" and reported["results"]["arc_easy"]["acc,none"] >= 0
    assert "|arc_easy|" in done.stdout


def test_proctor_lm_eval_without_lm_eval_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    assert main(["lm-eval", "run", "--model", "proctor", "--tasks", "arc_easy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'proctor[lm-eval]'" in err


@SLOW  # imports lm-eval
def test_lm_evals_task_index_is_kept_in_the_cache_and_rebuilt_when_a_file_changes(tmp_path, monkeypatch):
    import os

    from lm_eval.tasks._index import TaskIndex

    from proctor.harness import index_cache

    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    tasks = own_task_dir(tmp_path / "my_tasks")
    builds = []

    def build(paths, *, resolve_includes=True):
        builds.append(paths)
        return TaskIndex.build(paths, resolve_includes=resolve_includes)

    def index():
        return index_cache.cached_build(build, [tasks], True)

    first = index()
    assert list(first) == ["my_arc"] and len(builds) == 1
    again = index()
    assert len(builds) == 1 and {k: (e.kind, e.yaml_path, e.cfg) for k, e in again.items()} == {
        k: (e.kind, e.yaml_path, e.cfg) for k, e in first.items()}
    (tasks / "my_arc.yaml").write_text((tasks / "my_arc.yaml").read_text().replace("my_arc", "my_arc2"))
    os.utime(tasks / "my_arc.yaml", ns=(1, 1))  # a changed file, whatever the clock's resolution
    assert list(index()) == ["my_arc2"] and len(builds) == 2
    (cached,) = (tmp_path / "cache" / "lm_eval").iterdir()
    cached.write_bytes(b"\x00garbage{")  # a damaged cache file is rebuilt, never trusted
    assert list(index()) == ["my_arc2"] and len(builds) == 3
    assert list(index()) == ["my_arc2"] and len(builds) == 3


@SLOW
def test_an_lm_eval_task_that_runs_generated_code_needs_allow_unsafe_exec(tmp_path, data_dir, capsys):
    """lm-eval's `unsafe_code` tasks run the model's code in-process, outside proctor's sandbox."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "my_code.yaml").write_text("task: my_code\ndataset_path: openai/openai_humaneval\ntest_split: test\n"
                                        "output_type: generate_until\ndoc_to_text: '{{prompt}}'\n"
                                        "doc_to_target: '{{test}}'\nunsafe_code: true\n"
                                        "generation_kwargs:\n  until: ['\\nclass']\n  max_gen_toks: 8\n")
    args = ["run", "--model", "smollm2-135m", "--include", str(tasks), "--tasks", "lm_eval:my_code", "--limit", "1",
            "--data-dir", str(data_dir), "--output", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "lm_eval:my_code: lm-eval's task runs the model's generated code" in err and "--allow-unsafe-exec" in err
    assert not (tmp_path / "out").exists()


@SLOW
def test_a_task_whose_metric_script_is_on_the_hub_is_one_line_offline(tmp_path, data_dir, capsys, monkeypatch):
    """lm-eval's tasks that load an `evaluate` metric (bleu, rouge, ...) at import; code_eval is proctor's own."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "utils.py").write_text("import evaluate\n\nbleu = evaluate.load('bleu')\n\n\n"
                                    "def score(references, predictions):\n    return 0.0\n")
    (tasks / "my_bleu.yaml").write_text("task: my_bleu\ndataset_path: openai/openai_humaneval\ntest_split: test\n"
                                        "output_type: generate_until\ndoc_to_text: '{{prompt}}'\n"
                                        "doc_to_target: '{{test}}'\nmetric_list:\n  - metric: !function utils.score\n"
                                        "    aggregation: mean\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # evaluate looks for ./bleu/bleu.py first
    assert main(["run", "--model", "smollm2-135m", "--include", str(tasks), "--tasks", "lm_eval:my_bleu",
                 "--data-dir", str(data_dir), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "my_bleu.yaml: the task scores with the Hugging Face `evaluate` metric 'bleu'" in err


@SLOW
def test_proctor_lm_eval_keeps_lm_evals_own_models(capsys):
    from lm_eval.api.registry import get_model

    from proctor.harness.cli import run_lm_eval
    from proctor.harness.lm import ProctorLM

    assert run_lm_eval(["run", "--help"]) == 0
    assert "--model_args" in capsys.readouterr().out
    assert get_model("proctor") is ProctorLM and get_model("hf").__name__ == "HFLM"
