"""Spec parsing, suites, resolution, listing and counts."""

import dataclasses

import pytest

from proctor.errors import UserError
from proctor.tasks import catalog, registry
from proctor.tasks.counts import MMLU_TEST
from proctor.tasks.mmlu import CATEGORIES, SUBJECTS
from proctor.tasks.registry import (Suite, all_specs, all_suites, leaf_specs, parse_spec, resolve,
                                    suite, task_rows)


def test_parse_spec():
    assert parse_spec("mmlu_stem:mc::olmes") == ("mmlu_stem", "mc", "olmes")
    assert parse_spec("gsm8k::olmo3:n8:v2") == ("gsm8k", None, "olmo3:n8:v2")
    assert parse_spec("socialiqa") == ("socialiqa", None, None)
    assert parse_spec("arc_easy:rc:bpb::olmes:full") == ("arc_easy", "rc:bpb", "olmes:full")  # OLMES's BPB alias
    for malformed in ("a:b::", "a:b:c", "a:b:"):
        with pytest.raises(UserError, match="malformed task spec"):
            parse_spec(malformed)


def test_all_specs():
    specs = all_specs()
    assert len(SUBJECTS) == 57
    for s in SUBJECTS:
        assert f"mmlu_{s}:mc::olmes" in specs and f"mmlu_{s}:rc::olmes" in specs
        assert f"mmlu_{s}::leaderboard" in specs
    for s in ("socialiqa:mc::xlarge", "socialiqa:mc::olmes", "socialiqa:rc::olmes",
              "arc_challenge:mc::olmes", "arc_challenge:rc::olmes", "arc_challenge:mc::xlarge",
              "arc_easy:mc::olmes", "arc_easy:rc::olmes", "arc_easy:mc::xlarge",
              "hellaswag:rc::olmes", "hellaswag:rc::xlarge",
              "gsm8k::olmo3:n8:v2", "gsm8k::olmes", "humaneval::greedy", "humaneval::n64",
              "arc_challenge::leaderboard", "hellaswag::leaderboard",
              "truthfulqa_mc1::leaderboard", "truthfulqa_mc2::leaderboard"):
        assert s in specs
    # exact counts per family module: a spec added or lost anywhere shows here
    counts = {family.__name__.removeprefix("proctor.tasks."): len(family.configs())
              for family in catalog.FAMILIES}
    assert counts == {
        "mmlu": 57 * 3, "socialiqa": 2, "arc": 4, "hellaswag": 2,    # OLMES MC/RC (+ MMLU's ::tulu)
        "boolq": 2, "csqa": 2, "openbookqa": 2,                       # OLMES MC/RC
        "piqa": 2, "winogrande": 2, "sciq": 3, "basic_skills": 12,    # OLMES MC/RC (SciQ: ::olmo3, ::olmo1)
        "naturalqs": 1, "lambada": 1, "medmcqa": 2, "yesno": 4,       # gold-answer BPB; MedMCQA, Qasper, SciRIFF
        "medqa": 2, "mt_mbpp": 17, "minerva_bpb": 8, "humaneval_bpb": 2, "mbpp_bpb": 1, "gsm8k_bpb": 1,
        "lab_bench": 4, "copycolors": 2, "jeopardy": 1, "reading_bpb": 3,   # LAB-Bench MC/RC; CoQA, DROP, SQuAD BPB
        "gsm8k": 3, "bbh": 27, "bbh_olmes": 2 * 27, "humaneval": 2,   # generation (+ BBH's ::tulu)
        "lm_eval.arc": 1, "lm_eval.hellaswag": 1, "lm_eval.mmlu": 57,
        "lm_eval.truthfulqa": 2, "lm_eval.bigbench": 9,              # lm-eval formats
        "perplexity": 1 + 16,                                         # c4_en + each Paloma source
    }
    # the nine OLMES-v0.1 tasks' other sizes (proctor.tasks.olmes_sizes): :full, ::large and ::xlarge
    # of each MC and RC spec, and :val where the spec reads test (ARC-Easy, ARC-Challenge, OpenBookQA)
    # and OLMES's BPB-only aliases of ::olmes and ::olmes:full (`<task>:<fmt>:bpb::olmes`), and of
    # MMLU's subjects and the basic skills' sets ::olmes
    sizes = 9 * 2 * 3 + 3 * 2 + 9 * 2 * 2 + (57 + 6) * 2
    assert len(specs) == sum(counts.values()) + sizes == 648


def test_every_suite_member_resolves():
    tasks, suites = set(all_specs()), {s.name: s for s in all_suites()}
    assert len(suites) == 61
    assert not tasks & set(suites)
    for s in suites.values():
        assert s.members and len(set(s.members)) == len(s.members), s.name
        for member in s.members:
            assert member in tasks or member in suites, (s.name, member)
        for member, aggregation in s.member_aggregation:
            assert member in s.members and aggregation in suites[member].aggregations, s.name
        if s.primary is not None:
            assert s.primary in s.aggregations
        leaves = leaf_specs(s.name)
        assert leaves and set(leaves) <= tasks
        assert [t.config.name for t in resolve(s.name)] == leaves


def test_proctor_tasks_lists_every_spec(capsys):
    from proctor.cli import main

    rows = task_rows()
    names = [r.spec for r in rows]
    assert sorted(names) == sorted(all_specs() + [s.name for s in all_suites()])
    assert [r.kind for r in rows] == ["suite"] * 61 + ["task"] * 648
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    listed = {line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")}
    assert listed == set(names)


def test_seed_suites_resolve_and_list():
    seed = suite("data_attribution::olmo3")
    assert seed.members == ("socialiqa:mc::xlarge", "mmlu_social_sciences:mc::olmes",
                            "mmlu_stem:mc::olmes", "gsm8k::olmo3:n8:v2")
    assert seed.primary is None and seed.aggregations == ()
    leaves = leaf_specs("data_attribution::olmo3")
    assert len(leaves) == 1 + 12 + 18 + 1 and leaves[0] == "socialiqa:mc::xlarge"
    assert leaves[-1] == "gsm8k::olmo3:n8:v2"
    row = next(r for r in task_rows("data_attribution"))
    assert (row.kind, row.items, row.primary_metric) == ("suite", 10000 + 3077 + 3018 + 1319,
                                                         "each member's (mixed)")

    table = suite("slimpajama_dc::leaderboard")
    assert table.members == ("arc_challenge::leaderboard", "hellaswag::leaderboard",
                             "mmlu::leaderboard", "truthfulqa_mc2::leaderboard",
                             "bigbench::leaderboard", "humaneval::greedy")
    assert (table.primary, table.aggregations) == ("member_mean", ("member_mean", "rrgs"))
    assert table.aggregation_of("mmlu::leaderboard") == "macro"
    assert len(leaf_specs("slimpajama_dc::leaderboard")) == 1 + 1 + 57 + 1 + 9 + 1
    row = next(r for r in task_rows("slimpajama_dc"))
    assert (row.items, row.primary_metric) == (1172 + 10042 + 14042 + 817 + 5376 + 164,
                                               "member_mean(mixed)")


def test_suite_declarations_are_checked():
    with pytest.raises(ValueError, match="primary 'macro'"):
        Suite("x", ("a",), aggregations=("micro",), primary="macro")
    with pytest.raises(ValueError, match="known"):
        Suite("x", ("a",), aggregations=("median",), primary=None)


def test_suites_expand_recursively():
    stem = suite("mmlu_stem:mc::olmes")
    assert stem.primary == "macro" and stem.aggregations == ("macro", "micro")
    assert len(stem.members) == 18
    tasks = resolve("mmlu:mc::olmes")
    assert len(tasks) == 57 and len({t.config.name for t in tasks}) == 57
    assert [t.config.name for t in tasks[:2]] == ["mmlu_abstract_algebra:mc::olmes",
                                                  "mmlu_astronomy:mc::olmes"]
    assert len(leaf_specs("mmlu_social_sciences:mc::olmes")) == 12
    assert len(leaf_specs("mmlu_humanities:rc::olmes")) == 13
    assert len(leaf_specs("mmlu_other:mc::olmes")) == 14
    assert {s.name for s in all_suites()} >= {f"{c}:mc::olmes" for c in CATEGORIES} | {"mmlu:mc::olmes"}
    assert suite("socialiqa:mc::xlarge") is None


def test_task_configs():
    c = registry.task_config("arc_easy:mc::olmes")
    assert (c.split, c.sample_limit, c.primary_metric, c.fewshot_source) == ("test", 1000, "acc_raw", "OLMES:ARC-Easy")
    assert registry.task_config("arc_challenge:rc::olmes").primary_metric == "acc_uncond"
    assert registry.task_config("arc_easy:rc::olmes").primary_metric == "acc_per_char"
    assert registry.task_config("arc_challenge:mc::xlarge").split == "all"
    assert registry.task_config("mmlu_anatomy:rc::olmes").primary_metric == "acc_per_char"
    x = registry.task_config("socialiqa:mc::xlarge")
    assert (x.split, x.sample_limit, x.num_shots, x.primary_metric) == ("all", 10000, 5, "acc_raw")
    h = registry.task_config("hellaswag:rc::xlarge")
    assert (h.split, h.sample_limit) == ("all", 10000)


def test_unknown_spec_suggests():
    with pytest.raises(UserError) as e:
        resolve("mmlu_astronmy:mc::olmes")
    assert str(e.value) == ("unknown task spec 'mmlu_astronmy:mc::olmes'; did you mean "
                            "'mmlu_astronomy:mc::olmes'? (`proctor tasks` lists all)")
    with pytest.raises(UserError, match=r"did you mean 'socialiqa:mc::large', .*'socialiqa::olmes:full'\?"):
        resolve("socialiqa")
    with pytest.raises(UserError, match=r"unknown task spec 'zzz'; \(`proctor tasks` lists all\)"):
        resolve("zzz")


def test_num_shots_override():
    task = resolve("arc_easy:mc::olmes", num_shots=2)[0]
    assert task.config.num_shots == 2
    again = type(task)(dataclasses.replace(task.config, num_shots=3))
    assert again.config.num_shots == 3 and again.config.name == task.config.name


def test_arc_counts(data_dir):
    sizes = {spec: len(resolve(spec)[0].docs(data_dir)) for spec in (
        "arc_challenge:mc::olmes", "arc_easy:mc::olmes", "arc_challenge:mc::xlarge", "arc_easy:mc::xlarge")}
    assert sizes == {"arc_challenge:mc::olmes": 1172, "arc_easy:mc::olmes": 1000,
                     "arc_challenge:mc::xlarge": 1172 + 299 + 1119,
                     "arc_easy:mc::xlarge": 2376 + 570 + 2251}
    docs = resolve("arc_challenge:mc::xlarge")[0].docs(data_dir)
    assert [d["split"] for d in (docs[0], docs[1172], docs[-1])] == ["test", "validation", "train"]


def test_mmlu_counts_match_official_table(data_dir):
    for t in resolve("mmlu:mc::olmes"):
        assert len(t.docs(data_dir)) == MMLU_TEST[t.config.subject], t.config.name
    assert sum(MMLU_TEST.values()) == 14042


def test_hellaswag_counts(data_dir):
    assert len(resolve("hellaswag:rc::olmes")[0].docs(data_dir)) == 1000
    with pytest.raises(UserError, match="HellaSwag train split not found"):
        resolve("hellaswag:rc::xlarge")[0].docs(data_dir)


def test_task_rows_official_and_data(data_dir):
    rows = {r.spec: r for r in task_rows("mmlu_stem")}
    assert rows["mmlu_stem:mc::olmes"].kind == "suite"
    assert rows["mmlu_stem:mc::olmes"].items == 3018
    assert rows["mmlu_stem:mc::olmes"].primary_metric == "macro(acc_raw)"
    assert rows["mmlu_stem:mc::olmes"].items_source == "official"
    rows = {r.spec: r for r in task_rows("socialiqa*", data_dir)}
    r = rows["socialiqa:mc::xlarge"]
    assert (r.kind, r.split, r.shots, r.primary_metric, r.items, r.items_source) == \
        ("task", "all", 5, "acc_raw", 10000, "data")
    assert {r.spec for r in task_rows("hellaswag", data_dir)} == {
        "hellaswag:rc::olmes", "hellaswag:mc::olmes", "hellaswag::leaderboard", "hellaswag::olmes",
        *(f"hellaswag:{fmt}::{size}" for fmt in ("mc", "rc") for size in ("olmes:full", "large", "xlarge")),
        *(f"hellaswag:{fmt}:bpb::{size}" for fmt in ("mc", "rc") for size in ("olmes", "olmes:full")),
        "hellaswag::olmes:full"}
    assert next(r for r in task_rows("hellaswag:rc::xlarge", data_dir)).items_source == "official"
    with pytest.raises(UserError, match="no task spec matches"):
        task_rows("no-such-thing")


def test_olmes_core_9_suites_are_olmes_own():
    suites = {s.name: s for s in all_suites()}
    nine = ("arc_easy", "arc_challenge", "boolq", "csqa", "hellaswag", "openbookqa", "piqa", "socialiqa", "winogrande")
    assert suites["core_9mcqa::olmes"].members == tuple(f"{t}::olmes" for t in nine)
    assert suites["core_9mcqa:rc::olmes"].members == tuple(f"{t}:rc::olmes" for t in nine)
    assert suites["core_9mcqa::olmes"].primary == suites["core_9mcqa:rc::olmes"].primary == "macro"
    for task in (*nine, "mmlu"):
        assert suites[f"{task}::olmes"].primary == "mc_or_rc"
