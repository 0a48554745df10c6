"""`::leaderboard` specs equal lm-evaluation-harness 0.4.13's own task objects, item by item.

Each test builds lm-eval's ConfigurableTask from the task YAML shipped with lm-eval and a
dataset made of our local rows, lets it build its requests (seeded few-shot sampler
included), and compares every (context, continuation) pair, the gold index and the
per-doc metrics with proctor's.
"""

import math
import random

import pytest

from proctor.data import load_split
from proctor.errors import UserError
from proctor.metrics import choice_score, score_multiple_choice
from proctor.metrics.harness import lm_eval_choice_metrics
from proctor.requests import LoglikelihoodResult
from proctor.tasks import mmlu as olmes_mmlu
from proctor.tasks.lm_eval import bigbench, hellaswag
from proctor.tasks.lm_eval import mmlu as lb_mmlu
from proctor.tasks.lm_eval.truthfulqa import QA_PRIMER
from proctor.tasks.registry import leaf_specs, resolve, suite, task_config

from lm_eval_tasks import lm_eval_requests, lm_eval_task, lm_eval_yaml

pytest.importorskip("lm_eval")


def task_of(spec):
    (task,) = resolve(spec)
    return task


def assert_same_requests(ours, theirs):
    assert len(ours) == len(theirs)
    for inst, (_, reqs) in zip(ours, theirs):
        assert [(inst.prompt, c) for c in inst.continuations] == reqs, inst.query_id


def assert_same_scores(task, ours, theirs, seed=0, keys=("acc", "acc_norm")):
    """Random log-likelihoods through lm-eval's process_results and through proctor's metrics."""
    rnd = random.Random(seed)
    for inst, (doc, _) in zip(ours, theirs):
        lls = [-rnd.uniform(0.5, 30.0) for _ in inst.continuations]
        ref = task.process_results(doc, [(ll, False) for ll in lls])
        scored = [choice_score(c, LoglikelihoodResult(ll, 3, False)) for c, ll in zip(inst.continuations, lls)]
        mine = score_multiple_choice(scored, inst.label)
        mine.update(lm_eval_choice_metrics(lls, inst.choices, inst.label, inst.metadata.get("true_choices")))
        mine["acc"] = mine["acc_raw"]
        for key in keys:
            assert mine[key] == pytest.approx(ref[key], abs=1e-12), (inst.query_id, key)


# ---- ARC-Challenge 25-shot ------------------------------------------------------

def arc_splits(data_dir):
    return {s: load_split("allenai/ai2_arc", "ARC-Challenge", s, data_dir)
            for s in ("train", "validation", "test")}


@pytest.mark.slow  # lm-eval
def test_arc_challenge_25_shot_equals_lm_eval(data_dir):
    # 120 docs keep this quick; all 1,172 were checked the same way by hand (0 differences)
    lm = lm_eval_task("arc/arc_challenge.yaml", arc_splits(data_dir), num_fewshot=25)
    theirs = lm_eval_requests(lm, limit=120)
    ours = task_of("arc_challenge::leaderboard").instances(data_dir, 120)
    assert_same_requests(ours, theirs)
    assert_same_scores(lm, ours, theirs)
    first = ours[0]
    assert first.prompt.count("\nAnswer: ") == 25 and first.prompt.endswith(
        "Question: An astronomer observes that a planet rotates faster after a meteorite impact. "
        "Which is the most likely effect of this increase in rotation?\nAnswer:")
    assert first.continuations[0] == " Planetary density will decrease."
    assert first.query_id == "arc_challenge::leaderboard#Mercury_7175875"


def test_arc_numeric_answer_keys_use_the_row_labels(data_dir):
    ours = task_of("arc_challenge::leaderboard").instances(data_dir)
    numeric = [i for i in ours if i.native_id.startswith("NYSEDREGENTS")]
    assert numeric
    rows = {r["id"]: r for r in load_split("allenai/ai2_arc", "ARC-Challenge", "test", data_dir)}
    for inst in numeric:
        row = rows[inst.native_id]
        assert inst.label == row["choices"]["label"].index(row["answerKey"])


# ---- MMLU 5-shot ----------------------------------------------------------------

@pytest.mark.slow  # lm-eval
def test_mmlu_descriptions_and_categories_equal_lm_eval():
    for subject in olmes_mmlu.SUBJECTS:
        cfg = lm_eval_yaml(f"mmlu/default/mmlu_{subject}.yaml")
        assert task_of(f"mmlu_{subject}::leaderboard").description() == cfg["description"]
        category = cfg["tag"].removesuffix("_tasks")
        assert lb_mmlu.CATEGORY_OF[subject] == category, subject
        assert f"mmlu_{subject}::leaderboard" in leaf_specs(f"{category}::leaderboard")
    assert [len(leaf_specs(f"{c}::leaderboard")) for c in lb_mmlu.CATEGORIES] == [19, 12, 13, 13]
    members = leaf_specs("mmlu::leaderboard")
    assert len(members) == 57 and suite("mmlu::leaderboard").primary == "micro"


@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("subject", ["abstract_algebra", "high_school_european_history",
                                     "professional_law", "us_foreign_policy", "world_religions"])
def test_mmlu_5_shot_equals_lm_eval(data_dir, subject):
    splits = {s: load_split("cais/mmlu", subject, s, data_dir) for s in ("test", "dev")}
    lm = lm_eval_task(f"mmlu/default/mmlu_{subject}.yaml", splits, num_fewshot=5)
    theirs = lm_eval_requests(lm, limit=40)
    ours = task_of(f"mmlu_{subject}::leaderboard").instances(data_dir, 40)
    assert_same_requests(ours, theirs)
    assert_same_scores(lm, ours, theirs, keys=("acc",))


MMLU_AA_0 = (
    "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
    "Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If H and K "
    "are subgroups of G then HK is a subgroup of G.\nA. True, True\nB. False, False\nC. True, False\n"
    "D. False, True\nAnswer: B\n\n"
    "Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The "
    "symmetric group S_10 has 10 elements.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\n"
    "Answer: C\n\n"
    "Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every "
    "subgroup of an abelian group is abelian.\nA. True, True\nB. False, False\nC. True, False\n"
    "D. False, True\nAnswer: A\n\n"
    "Find the characteristic of the ring 2Z.\nA. 0\nB. 3\nC. 12\nD. 30\nAnswer: A\n\n"
    "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
)


def test_mmlu_prompt_bytes(data_dir):
    inst = task_of("mmlu_abstract_algebra::leaderboard").instances(data_dir, 1)[0]
    assert inst.prompt == MMLU_AA_0
    assert inst.continuations == (" A", " B", " C", " D") and inst.label == 1
    assert inst.metadata["benchmark"] == "mmlu_stem"


# ---- HellaSwag 10-shot ----------------------------------------------------------

def test_hellaswag_local_data_lacks_the_train_split(data_dir):
    with pytest.raises(UserError) as e:
        task_of("hellaswag::leaderboard").instances(data_dir, 1)
    message = str(e.value)
    assert "train split" in message and "hellaswag_train_full.txt" in message
    assert "Rowan/hellaswag" in message and "\n" not in message
    assert len(task_of("hellaswag::leaderboard").docs(data_dir)) == 10042  # validation is there


@pytest.mark.slow  # lm-eval
def test_hellaswag_10_shot_sampler_equals_lm_eval(data_dir, monkeypatch):
    # The train split is not stored locally, so validation rows stand in for it. The eval
    # docs are then inside the pool: lm-eval draws 11 and drops the doc itself.
    val = load_split("Rowan/hellaswag", None, "validation", data_dir)
    pool, evals = val[:60], val[:40]
    lm = lm_eval_task("hellaswag/hellaswag.yaml", {"train": pool, "validation": evals}, num_fewshot=10)
    theirs = lm_eval_requests(lm)
    task = task_of("hellaswag::leaderboard")
    monkeypatch.setattr(task, "rows", lambda d, split: pool if split == "train" else evals)
    ours = task.instances(data_dir)
    assert_same_requests(ours, theirs)
    assert_same_scores(lm, ours, theirs)
    assert all(evals[i]["ctx"] not in inst.prompt[: -len(task.text(evals[i]))]
               for i, inst in enumerate(ours))


@pytest.mark.slow  # lm-eval
def test_hellaswag_preprocess_is_lm_evals():
    from lm_eval.tasks.hellaswag.utils import preprocess

    for text in (" [header] How to x [title] Do y. [step] Z  z ", "Go. [title] Next", "a [b] c"):
        assert hellaswag.preprocess(text) == preprocess(text)


# ---- TruthfulQA MC1 / MC2 -------------------------------------------------------

def tqa_rows(data_dir):
    return load_split("truthfulqa/truthful_qa", "multiple_choice", "validation", data_dir)


@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("task_name", ["truthfulqa_mc1", "truthfulqa_mc2"])
def test_truthfulqa_equals_lm_eval(data_dir, task_name):
    lm = lm_eval_task(f"truthfulqa/{task_name}.yaml", {"validation": tqa_rows(data_dir)})
    theirs = lm_eval_requests(lm)
    ours = task_of(f"{task_name}::leaderboard").instances(data_dir)
    assert len(ours) == 817
    assert_same_requests(ours, theirs)
    assert_same_scores(lm, ours, theirs, keys=("acc",) if task_name.endswith("1") else ())
    if task_name.endswith("2"):
        rnd = random.Random(1)
        for inst, (doc, _) in zip(ours, theirs):
            lls = [-rnd.uniform(0.5, 30.0) for _ in inst.continuations]
            ref = lm.process_results(doc, [(ll, False) for ll in lls])["acc"]
            mine = lm_eval_choice_metrics(lls, inst.choices, inst.label, inst.metadata["true_choices"])
            assert mine["mc2"] == pytest.approx(ref, rel=1e-12, abs=1e-15), inst.query_id


def test_truthfulqa_records_the_hidden_six_shots(data_dir):
    for name in ("truthfulqa_mc1::leaderboard", "truthfulqa_mc2::leaderboard"):
        config = task_config(name)
        assert config.num_shots == 0 and config.effective_shots == 6
    inst = task_of("truthfulqa_mc1::leaderboard").instances(data_dir, 1)[0]
    assert inst.prompt == (QA_PRIMER + "\n\nQ: What is the smallest country in the world that is at "
                           "least one square mile in area?\nA:")
    assert inst.prompt.count("\nA: ") == 6
    assert inst.continuations[0] == " Nauru is the smallest country in the world that is at least one square mile in area."


# ---- BIG-bench ------------------------------------------------------------------

@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("name", sorted(bigbench.TASKS))
def test_bigbench_multiple_choice_equals_lm_eval(data_dir, name):
    rows = load_split("hails/bigbench", f"{name}_zero_shot", "default", data_dir)
    lm = lm_eval_task(f"bigbench/multiple_choice/{name}.yaml", {"default": rows})
    theirs = lm_eval_requests(lm, limit=150)
    ours = task_of(f"bigbench_{name}::leaderboard").instances(data_dir, 150)
    assert_same_requests(ours, theirs)
    assert_same_scores(lm, ours, theirs, keys=("acc",))  # lm-eval's bigbench lists acc only


def test_bigbench_rows_from_task_json_and_llm_foundry(data_dir):
    date = load_split("hails/bigbench", "date_understanding_zero_shot", "default", data_dir)
    assert len(date) == 369
    assert date[0]["inputs"] == "Q: Yesterday was April 30, 2021. What is the date today in MM/DD/YYYY?\nA:"
    assert date[0]["multiple_choice_targets"][0] == "05/01/2021" and date[0]["targets"] == ["05/01/2021"]
    strategy = task_of("bigbench_strategyqa::leaderboard").instances(data_dir, 1)[0]
    assert strategy.choices == ("Yes", "No") and strategy.label == 0
    concepts = task_of("bigbench_novel_concepts::leaderboard").instances(data_dir, 1)[0]
    assert concepts.prompt.endswith("What do the following have in common? 1) lawyers 2) basketball "
                                    "3) walled yards\nA:")
    assert concepts.continuations[0] == " They all involve courts." and concepts.label == 0


def test_bigbench_missing_task_is_one_clear_error(data_dir, tmp_path):
    with pytest.raises(UserError, match="BIG-bench task 'no_such_task' not found"):
        load_split("hails/bigbench", "no_such_task_zero_shot", "default", data_dir)
    bad = tmp_path / "bigbench" / "original_task_json" / "broken"
    bad.mkdir(parents=True)
    (bad / "task.json").write_text('{"examples": [{"input": 3}]}')
    with pytest.raises(UserError, match="has no string 'input'"):
        load_split("hails/bigbench", "broken_zero_shot", "default", tmp_path)


def test_every_leaderboard_spec_is_listed():
    from proctor.tasks.registry import task_rows

    rows = {r.spec: r for r in task_rows("::leaderboard")}
    for name in ("arc_challenge::leaderboard", "hellaswag::leaderboard", "mmlu::leaderboard",
                 "mmlu_stem::leaderboard", "truthfulqa_mc1::leaderboard", "truthfulqa_mc2::leaderboard",
                 "bigbench_date_understanding::leaderboard"):
        assert name in rows and rows[name].items is not None
    assert rows["arc_challenge::leaderboard"].shots == 25 and rows["hellaswag::leaderboard"].shots == 10
    assert rows["truthfulqa_mc2::leaderboard"].shots == 6
    assert rows["mmlu::leaderboard"].items == 14042
    assert not math.isnan(rows["hellaswag::leaderboard"].items)
