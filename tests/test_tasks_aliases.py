"""lm-eval task names resolve to proctor specs of the same protocol, with lm-eval's shots.

The slow tests load each alias's lm-eval 0.4.13 YAML (its name, default num_fewshot and
group members) and, where the local data allows, build lm-eval's task object with its own
default shots and compare its requests with those of the alias.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

import proctor
from proctor.cli import main
from proctor.data import load_split
from proctor.errors import UserError
from proctor.metrics.aggregate import MeanStat
from proctor.pipeline import PromptOptions, ScoredPlan, plan, primary_scores
from proctor.tasks import aliases, bbh, catalog, registry
from proctor.tasks.aliases import all_aliases
from proctor.tasks.lm_eval import mmlu as lb_mmlu
from proctor.tasks.registry import alias_note, alias_of, leaf_specs, parse_spec, resolve

from lm_eval_tasks import lm_eval_requests, lm_eval_task


def lm_eval_tasks_dir() -> Path:
    """lm-eval's task YAMLs, found without importing lm-eval."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or spec.origin is None:
        pytest.skip("lm-eval is not installed")
    return Path(spec.origin).parent / "tasks"


def only(spec, num_shots=None):
    (task,) = resolve(spec, num_shots)
    return task


# ---- fast -----------------------------------------------------------------------

def test_every_alias_is_its_spec_with_lm_evals_shots():
    table = all_aliases()
    assert len(table) == 2 + 1 + 4 + 57 + 2 + 1 + 2 + 27 + 2 + 9
    tasks_dir = lm_eval_tasks_dir()
    for a in table:
        assert alias_of(a.name) == a, a.name            # no proctor spec or suite shadows it
        assert leaf_specs(a.name) == leaf_specs(a.spec), a.name
        assert {t.config.num_shots for t in resolve(a.name)} == {a.shots}, a.name
        assert (tasks_dir / a.yaml).is_file(), a.yaml
        assert aliases.lookup(f" {a.name} ") == a and a.note and "\n" not in a.note + a.differs


def test_lm_eval_names_and_their_protocols():
    expected = {   # name -> (spec, shots, leaves)
        "hellaswag": ("hellaswag::leaderboard", 0, 1), "arc_challenge": ("arc_challenge::leaderboard", 0, 1),
        "mmlu": ("mmlu::leaderboard", 0, 57), "mmlu_stem": ("mmlu_stem::leaderboard", 0, 19),
        "mmlu_anatomy": ("mmlu_anatomy::leaderboard", 0, 1), "gsm8k": ("gsm8k::lm_eval", 5, 1),
        "humaneval": ("humaneval::greedy", 0, 1), "humaneval_64": ("humaneval::n64", 0, 1),
        "truthfulqa_mc1": ("truthfulqa_mc1::leaderboard", 0, 1),
        "truthfulqa_mc2": ("truthfulqa_mc2::leaderboard", 0, 1),
        "bbh_cot_fewshot": ("bbh:cot::lm_eval", 3, 27), "bbh": ("bbh:cot::lm_eval", 3, 27),
        "bbh_cot_fewshot_navigate": ("bbh_navigate:cot::lm_eval", 3, 1),
        "bigbench_strategyqa_multiple_choice": ("bigbench_strategyqa::leaderboard", 0, 1),
    }
    for name, (spec, shots, leaves) in expected.items():
        tasks = resolve(name)
        assert alias_of(name).spec == spec and len(tasks) == leaves, name
        assert all(t.config.num_shots == shots for t in tasks), name
        assert [t.config.name for t in tasks] == leaf_specs(spec), name
    assert only("truthfulqa_mc2").config.effective_shots == 6        # the primer, as the spec's
    for name in ("arc_easy", "ai2_arc", "truthfulqa", "gsm8k_cot", "leaderboard_bbh"):
        assert alias_of(name) is None, name                           # no spec of that protocol


def test_alias_notes():
    assert alias_note("hellaswag").startswith("hellaswag → hellaswag::leaderboard (0-shot, lm-eval's default); "
                                              "differs from lm-eval: from a local data directory")
    assert alias_note("hellaswag", 10).startswith("hellaswag → hellaswag::leaderboard (10-shot, --num-fewshot);")
    assert alias_note("arc_challenge") == "arc_challenge → arc_challenge::leaderboard (0-shot, lm-eval's default)"
    assert alias_note("gsm8k") == "gsm8k → gsm8k::lm_eval (5-shot, lm-eval's default)"
    assert alias_note("bbh") == "bbh → bbh:cot::lm_eval (3-shot, lm-eval's default)"
    note = alias_note("bigbench_novel_concepts_multiple_choice")
    assert note.startswith("bigbench_novel_concepts_multiple_choice → bigbench_novel_concepts::leaderboard "
                           "(0-shot, lm-eval's default); differs from lm-eval: from a local data directory")
    assert alias_note("bigbench_date_understanding_multiple_choice").endswith("(0-shot, lm-eval's default)")
    assert alias_note("hellaswag::leaderboard") is None and alias_note("no_such_task") is None


def test_num_fewshot_replaces_an_alias_shots_and_changes_the_requests(data_dir):
    alias = only("arc_challenge").instances(data_dir, 2)
    zero = only("arc_challenge::leaderboard", 0).instances(data_dir, 2)
    spec = only("arc_challenge::leaderboard").instances(data_dir, 2)
    assert [i.prompt for i in alias] == [i.prompt for i in zero]
    assert [r.key for i in alias for r in i.requests] == [r.key for i in zero for r in i.requests]
    assert not {r.key for i in alias for r in i.requests} & {r.key for i in spec for r in i.requests}
    three = only("arc_challenge", 3)
    assert three.config.num_shots == 3 and three.instances(data_dir, 1)[0].prompt.count("\nAnswer: ") == 3
    assert {t.config.num_shots for t in resolve("mmlu", 1)} == {1}
    assert only("gsm8k", 0).instances(data_dir, 1)[0].prompt.startswith("Question: Janet")


def test_num_fewshot_errors():
    for bad in (-1, True, 1.5):
        with pytest.raises(UserError, match="--num-fewshot must be a whole number >= 0"):
            resolve("hellaswag", bad)
    with pytest.raises(UserError, match=r"num_fewshot \(--num-fewshot\) must be a whole number >= 0, got -2"):
        proctor.evaluate("no-such-model", tasks=["hellaswag"], num_fewshot=-2)
    with pytest.raises(UserError, match="humaneval::greedy takes no few-shot examples"):
        resolve("humaneval", 2)
    assert only("humaneval", 0).config.num_shots == 0
    # TruthfulQA's primer is in every doc text, each shot's included: 6 * (n + 1) + n examples
    assert only("truthfulqa_mc1", 2).config.effective_shots == 20


def test_cli_num_fewshot(data_dir, tmp_path, capsys):
    out = tmp_path / "prompts"
    assert main(["prompts", "--tasks", "arc_challenge", "mmlu_anatomy", "--num-fewshot", "2", "--limit", "1",
                 "--data-dir", str(data_dir), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "arc_challenge-leaderboard" / "requests.jsonl").open()]
    assert rows[0]["request"]["context"].count("\nAnswer: ") == 2
    mmlu = [json.loads(line) for line in (out / "mmlu_anatomy-leaderboard" / "requests.jsonl").open()]
    assert mmlu[0]["request"]["context"].count("\nAnswer: ") == 2
    capsys.readouterr()
    assert main(["run", "--tasks", "hellaswag", "--num-fewshot", "-1"]) == 2
    assert "argument --num-fewshot: must be 0 or more, got -1" in capsys.readouterr().err


def quoted(message: str) -> list[str]:
    return re.findall(r"'([^']+)'", message)[1:]


def test_unknown_names_suggest_every_close_spec():
    with pytest.raises(UserError) as e:
        resolve("mmlu_astronmy")
    assert str(e.value).startswith("unknown task spec 'mmlu_astronmy'; did you mean ")
    names = quoted(str(e.value))   # every form of the subject: OLMES's, lm-eval's, lm-eval's name
    assert {"mmlu_astronomy::leaderboard", "mmlu_astronomy:mc::olmes", "mmlu_astronomy:rc::olmes"} <= set(names)
    assert {parse_spec(n)[0] for n in names} == {"mmlu_astronomy"} and names[-1] == "mmlu_astronomy"
    assert str(e.value).endswith(" or 'mmlu_astronomy'? (`proctor tasks` lists all)")
    with pytest.raises(UserError) as e:
        resolve("mmlu_astronmy::leaderboard")
    assert quoted(str(e.value)) == ["mmlu_astronomy::leaderboard"]
    with pytest.raises(UserError) as e:
        leaf_specs("truthfulqa")
    assert quoted(str(e.value)) == ["truthfulqa_mc1::leaderboard", "truthfulqa_mc2::leaderboard",
                                    "truthfulqa_mc1", "truthfulqa_mc2"]
    with pytest.raises(UserError) as e:
        resolve("hellaswg")
    assert {"hellaswag::leaderboard", "hellaswag:rc::olmes", "hellaswag"} <= set(quoted(str(e.value)))
    with pytest.raises(UserError) as e:
        resolve("bbh_cot_fewshot_navigat")
    assert quoted(str(e.value)) == ["bbh_cot_fewshot_navigate"]
    with pytest.raises(UserError, match=r"^unknown task spec 'arc'; \(`proctor tasks` lists all\)$"):
        resolve("arc")


def test_a_spec_of_an_lm_eval_name_wins(monkeypatch):
    cls, config = registry._table()["gsm8k::olmes"]
    mine = type(config)(**{**config.__dict__, "name": "gsm8k"})
    monkeypatch.setitem(catalog._added, "gsm8k", (cls, mine))
    assert alias_of("gsm8k") is None and alias_note("gsm8k") is None
    assert leaf_specs("gsm8k") == ["gsm8k"]


def test_a_run_reports_each_name_as_typed(data_dir):
    evaluation = plan(["hellaswag", "mmlu_stem", "gsm8k"], data_dir, 2)
    assert list(evaluation.tasks)[0] == "hellaswag::leaderboard" and len(evaluation.tasks) == 1 + 19 + 1
    assert evaluation.tasks["hellaswag::leaderboard"].config.num_shots == 0
    stats = {name: MeanStat.of([1.0, 0.0]) for name in evaluation.tasks}
    scores = primary_scores(evaluation, ScoredPlan(tasks={}, primary=stats))
    assert list(scores) == ["hellaswag", "mmlu_stem", "gsm8k"]
    assert scores["hellaswag"].score == 0.5 and scores["hellaswag"].metric == "acc_norm"
    assert scores["gsm8k"].metric == "exact_match_strict"
    assert scores["mmlu_stem"].is_suite and scores["mmlu_stem"].aggregation == "micro"
    assert set(scores["mmlu_stem"].members) == {lb_mmlu.spec(s) for s in lb_mmlu.CATEGORIES["mmlu_stem"]}


def test_one_task_at_two_settings_in_one_run_is_refused(data_dir):
    with pytest.raises(UserError, match="'hellaswag::leaderboard' runs hellaswag::leaderboard 10-shot, "
                                        "'hellaswag' 0-shot: their results would share one name"):
        plan(["hellaswag", "hellaswag::leaderboard"], data_dir, 1)
    same = plan(["hellaswag", "hellaswag::leaderboard"], data_dir, 1, PromptOptions(num_fewshot=0))
    assert list(same.tasks) == ["hellaswag::leaderboard"]


# ---- slow: against lm-eval's YAML files and task objects --------------------------

def lm_yaml(relative: str) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(lm_eval_tasks_dir() / relative, resolve_func=False)


@pytest.mark.slow  # lm-eval
def test_alias_yaml_names_shots_and_groups():
    for a in all_aliases():
        cfg = lm_yaml(a.yaml)
        if "group" in cfg:
            assert cfg["group"] == a.name, a.yaml
            assert all(m.get("weight_by_size") for m in cfg["aggregate_metric_list"]), a.yaml
            assert registry.suite(a.spec).primary == "micro", a.name   # lm-eval weights by size
        else:
            assert cfg["task"] == a.name and (cfg.get("num_fewshot") or 0) == a.shots, a.yaml
    assert set(lm_yaml("mmlu/default/_mmlu.yaml")["task"]) == set(lb_mmlu.CATEGORIES)
    for group in ("bbh", "bbh_cot_fewshot"):
        members = lm_yaml(aliases.lookup(group).yaml)["task"]
        assert members == [f"bbh_cot_fewshot_{t}" for t in bbh.TASKS]


@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("name", ["humaneval", "humaneval_64"])
def test_humaneval_aliases_ask_what_lm_eval_asks(data_dir, name):
    cfg, base = lm_yaml(aliases.lookup(name).yaml), lm_yaml("humaneval/humaneval.yaml")
    gen = cfg["generation_kwargs"]
    r = only(name).instances(data_dir, 1)[0].request
    assert (list(r.stop), r.max_gen_toks, r.do_sample, r.repeats) == \
        (gen["until"], gen["max_gen_toks"], gen["do_sample"], cfg.get("repeats", base["repeats"]))
    assert (r.temperature, r.top_p) == (gen.get("temperature", 0.0), gen.get("top_p", 1.0))
    assert r.policy == "lm_eval" and r.context == load_split("openai/openai_humaneval", None, "test",
                                                             data_dir)[0]["prompt"]
    ks = {f"pass_at_{k}" for k in cfg["metric_list"][0]["k"]}
    assert ks <= set(only(name).metric_names)


def splits_of(name: str, data_dir) -> dict[str, list[dict]]:
    """Local rows for lm-eval's task of an alias, by the split names its YAML reads."""
    if name == "hellaswag":   # 0-shot: the train split is read by no prompt
        val = load_split("Rowan/hellaswag", None, "validation", data_dir)
        return {"train": val[:10], "validation": val}
    if name == "arc_challenge":
        return {s: load_split("allenai/ai2_arc", "ARC-Challenge", s, data_dir) for s in ("train", "validation", "test")}
    if name.startswith("mmlu_"):
        return {s: load_split("cais/mmlu", name.removeprefix("mmlu_"), s, data_dir) for s in ("test", "dev")}
    if name.startswith("truthfulqa"):
        return {"validation": load_split("truthfulqa/truthful_qa", "multiple_choice", "validation", data_dir)}
    if name == "gsm8k":
        return {s: load_split("openai/gsm8k", "main", s, data_dir) for s in ("train", "test")}
    if name.startswith("bbh_cot_fewshot_"):
        task = name.removeprefix("bbh_cot_fewshot_")
        return {"test": json.loads((data_dir / "bbh" / "bbh" / f"{task}.json").read_text())["examples"]}
    task = name.removeprefix("bigbench_").removesuffix("_multiple_choice")
    return {"default": load_split("hails/bigbench", f"{task}_zero_shot", "default", data_dir)}


@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("name", ["hellaswag", "arc_challenge", "mmlu_anatomy", "mmlu_high_school_us_history",
                                  "truthfulqa_mc1", "truthfulqa_mc2", "gsm8k", "bbh_cot_fewshot_date_understanding",
                                  "bigbench_date_understanding_multiple_choice"])
def test_alias_requests_equal_lm_evals_default_task(data_dir, name):
    limit = 8
    lm = lm_eval_task(aliases.lookup(name).yaml, splits_of(name, data_dir))   # its own num_fewshot
    theirs = lm_eval_requests(lm, limit=limit)
    ours = resolve(name)[0].instances(data_dir, limit)
    assert len(ours) == len(theirs) == limit
    for inst, (_, reqs) in zip(ours, theirs):
        if hasattr(inst, "continuations"):
            assert [(inst.prompt, c) for c in inst.continuations] == reqs, inst.query_id
        else:
            assert [inst.prompt] == [context for context, _ in reqs], inst.query_id
