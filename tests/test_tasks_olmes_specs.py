"""OLMES specs `hellaswag:mc::olmes`, `socialiqa:rc::xlarge` and the `<task>::olmes` suites.

References are allenai/olmes (read at upstream commit 5a51f502, via the fork
behzadshomali/olmes; see the research notes for line numbers). The expected renders below
are re-derived here from what that code does; they are not calls into proctor's prompt
helpers.
"""

import math
import random
import re

import pytest

from proctor.data import load_fewshot, load_split
from proctor.metrics import MeanStat
from proctor.outputs.records import SpecScore
from proctor.scores import TaskResult, best_of_mc_rc, spec_entry
from proctor.tasks.counts import official_item_count
from proctor.tasks.mmlu import SUBJECTS
from proctor.tasks.catalog import OLMES_MC_TASKS
from proctor.tasks.registry import is_known, leaf_specs, resolve, suite, task_config, task_rows
from proctor.tasks.suite import Suite

OLMES_SUITES = ("arc_easy::olmes", "arc_challenge::olmes", "hellaswag::olmes",
                "socialiqa::olmes", "mmlu::olmes")


# ---- re-derived OLMES renders ----------------------------------------------------------------

def olmes_hellaswag_clean(text: str) -> str:
    """`HellaSwag.preprocess` (allenai/olmes oe_eval/tasks/oe_eval_tasks/hellaswag.py): strip
    the ends, `.? [title]` becomes ". ", other bracketed markup goes, one pass of "  " -> " "."""
    text = re.sub(r"\.? \[title\]", ". ", text.strip())
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def olmes_hellaswag_mc_query(row: dict) -> str:
    """`HellaSwagMC._process_doc` (allenai/olmes oe_eval/tasks/oe_eval_tasks/hellaswag.py):
    `make_mcq_prompt` (oe_eval/tasks/utils.py) with question_prefix "" and choices_prefix
    "Choose the best continuation:\\n" over the raw endings, then preprocess over the whole."""
    head = row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize()
    options = [" " + "ABCD"[i] + ". " + ending for i, ending in enumerate(row["endings"])]
    return olmes_hellaswag_clean(head + "\nChoose the best continuation:\n" + "\n".join(options) + "\nAnswer:")


def olmes_siqa_rc_query(row: dict) -> str:
    """`SocialIQA._process_doc` (allenai/olmes oe_eval/tasks/oe_eval_tasks/siqa.py):
    `make_cloze_prompt(context + " " + question)` = "Question: ...\\nAnswer:"."""
    return "Question: " + row["context"] + " " + row["question"] + "\nAnswer:"


def olmes_fewshot_prompt(shots: list[str], doc_text: str) -> str:
    """`Task.fewshot_context`, plain text (allenai/olmes oe_eval/tasks/base_task.py): the first
    k shots as text + target joined by blank lines, a blank line, then the doc's text."""
    return "".join(shot + "\n\n" for shot in shots) + doc_text


# ---- hellaswag:mc::olmes ---------------------------------------------------------------------

def test_hellaswag_mc_config():
    """allenai/olmes oe_eval/configs/tasks.py "hellaswag:mc::olmes": validation, 5 shots from
    OLMES:hellaswag, limit 1000; primary acc_raw is HellaSwagMC's default."""
    c = task_config("hellaswag:mc::olmes")
    assert (c.split, c.num_shots, c.sample_limit, c.primary_metric, c.fewshot_source) == \
        ("validation", 5, 1000, "acc_raw", "OLMES:hellaswag")
    assert official_item_count(c) == 1000


def test_hellaswag_mc_first_shots_literal(data_dir):
    """The first shot (WikiHow, empty ctx_b) and the third (ActivityNet) as OLMES renders them:
    markup cleaned over the whole MC query, the space that `ctx_a + " " + ""` leaves before
    the newline kept (strip only touches the ends), target " " + gold letter."""
    task = resolve("hellaswag:mc::olmes")[0]
    shot1 = ("Health: How to cope with suicidal thoughts. Put off any plans. Promise yourself that "
             "you'll wait 48 hours before doing anything. Remember, thoughts don't have the power "
             "to force you to act. \nChoose the best continuation:\n"
             " A. Even when you do, there may be a small image of the future still lurking around "
             "your brain. For instance, don't tell yourself that you can't make it.\n"
             " B. You're doing something, and no one can force you to act. It's completely natural "
             "to feel negative thoughts before you act.\n"
             " C. Do not panic if people talk to you (even if it's about quitting smoking). Have a "
             "plan for how you're going to react to a group of people who bring on suicidal thoughts.\n"
             " D. Sometimes extreme pain can distort our perception. Waiting before taking action "
             "will give your mind time to clear.\nAnswer: D")
    shot3 = ("Baking cookies: A female chef in white uniform shows a stack of baking pans in a large "
             "kitchen presenting them. The pans are filled with pastries and loaded into the oven. "
             "A knife\nChoose the best continuation:\n"
             " A. is seen moving on a board and cutting out its contents.\n"
             " B. hits the peeled cheesecake, followed by sliced custard and still cooked ice cream.\n"
             " C. etches a shape into the inside of the baked pans.\n"
             " D. is used to cut cylinder shaped dough into rounds.\nAnswer: D")
    blocks = task.prompt_prefix(data_dir).split("\n\n")
    assert len(blocks) == 6 and blocks[-1] == ""
    assert blocks[0] == shot1 and blocks[2] == shot3
    # shot 2's endings begin with markup: "[step] Water" -> "Water", "[title] Set" -> "Set"
    assert "\n A. Water changes state" in blocks[1] and "\n D. Set a timer" in blocks[1]


def test_hellaswag_mc_prompts_match_olmes(data_dir):
    """Every doc: the same 1,000 seeded docs as hellaswag:rc::olmes, prompt = 5 OLMES shots +
    the MC query, continuations " A".." D" (base_task.py MultipleChoiceTask.construct_requests:
    " {}".format(choice)), no unconditioned requests (HellaSwagMC.unconditioned_prompt None)."""
    mc = resolve("hellaswag:mc::olmes")[0].instances(data_dir)
    rc = resolve("hellaswag:rc::olmes")[0].instances(data_dir)
    assert len(mc) == 1000
    assert [(i.doc_id, i.native_id, i.label) for i in mc] == [(i.doc_id, i.native_id, i.label) for i in rc]
    rows = load_split("Rowan/hellaswag", None, "validation", data_dir)
    positions = random.Random(1234).sample(range(len(rows)), 1000)
    # the native id: the dataset's `ind` (a saved copy of the hub's rows), else the row's index
    assert [i.native_id for i in mc] == [rows[p].get("ind", p) for p in positions]
    shots = [olmes_hellaswag_mc_query(r) + " " + "ABCD"[int(r["label"])]
             for r in load_fewshot("OLMES:hellaswag", 5, data_dir)[:5]]
    for inst, position in zip(mc, positions):
        row = rows[position]
        assert inst.prompt == olmes_fewshot_prompt(shots, olmes_hellaswag_mc_query(row))
        assert inst.continuations == (" A", " B", " C", " D")
        assert inst.choices == ("A", "B", "C", "D") and inst.label == int(row["label"])
        assert inst.uncond_context is None and not inst.uncond_requests
    assert not mc[0].prompt.startswith("Question:")


# ---- socialiqa:rc::xlarge --------------------------------------------------------------------

def test_socialiqa_rc_xlarge_config():
    """allenai/olmes oe_eval/configs/tasks.py "socialiqa:rc::xlarge": split all, limit 10_000,
    5 shots from OLMES:social_i_qa, primary acc_per_char."""
    c = task_config("socialiqa:rc::xlarge")
    assert (c.split, c.num_shots, c.sample_limit, c.primary_metric, c.fewshot_source) == \
        ("all", 5, 10000, "acc_per_char", "OLMES:social_i_qa")
    assert official_item_count(c) == 10000


def test_socialiqa_rc_xlarge_prompts_match_olmes(data_dir):
    """The 10,000 docs sampled with Random(1234) from validation + train (base_task.py
    get_eval_docs), as in :mc::xlarge. Cloze prompts after 5 shots with target " " + answer
    text, continuations " " + answer text, and the unconditioned context "Answer:"
    (SocialIQA.unconditioned_prompt)."""
    rc_task = resolve("socialiqa:rc::xlarge")[0]
    rc = rc_task.instances(data_dir)
    mc = resolve("socialiqa:mc::xlarge")[0].instances(data_dir)
    assert len(rc) == 10000
    assert [(i.native_id, i.label) for i in rc] == [(i.native_id, i.label) for i in mc]
    shots_rows = load_fewshot("OLMES:social_i_qa", 5, data_dir)[:5]
    shots = [olmes_siqa_rc_query(r) + " " + r["answer" + "ABC"[int(r["label"]) - 1]] for r in shots_rows]
    assert shots[0] == ("Question: Cameron decided to have a barbecue and gathered her friends "
                        "together. How would Others feel as a result?\nAnswer: like attending")
    splits = {s: load_split("allenai/social_i_qa", None, s, data_dir) for s in ("validation", "train")}
    docs = rc_task.docs(data_dir)
    for inst, doc in zip(rc, docs):
        row = splits[doc["split"]][doc["native_id"]]
        answers = (row["answerA"], row["answerB"], row["answerC"])
        assert inst.prompt == olmes_fewshot_prompt(shots, olmes_siqa_rc_query(row))
        assert inst.continuations == tuple(" " + a for a in answers)
        assert inst.label == int(row["label"]) - 1 and inst.uncond_context == "Answer:"
    ids, dups = rc_task.query_ids(data_dir)
    assert dups == 167 and len(set(ids)) == 10000


# ---- <task>::olmes suites --------------------------------------------------------------------

def test_olmes_suites_declared():
    """allenai/olmes oe_eval/configs/task_suites.py: for each of OLMES_MC_TASKS,
    `<task>::olmes` = [<task>:mc::olmes, <task>:rc::olmes] with primary "mc_or_rc"."""
    for name in OLMES_SUITES:
        s = suite(name)
        task = name.removesuffix("::olmes")
        assert s.members == (f"{task}:mc::olmes", f"{task}:rc::olmes")
        assert (s.aggregations, s.primary) == (("mc_or_rc",), "mc_or_rc")
    assert len(leaf_specs("mmlu::olmes")) == 2 * 57
    assert leaf_specs("arc_challenge::olmes") == ["arc_challenge:mc::olmes", "arc_challenge:rc::olmes"]
    rows = {r.spec: r for r in task_rows("::olmes")}
    assert (rows["arc_challenge::olmes"].items, rows["arc_challenge::olmes"].primary_metric) == \
        (2 * 1172, "mc_or_rc(mixed)")
    assert rows["mmlu::olmes"].items == 2 * 14042
    with pytest.raises(ValueError, match="two members"):
        Suite("x::olmes", ("a", "b", "c"), aggregations=("mc_or_rc",), primary="mc_or_rc")


def _two(mc: list[float], rc: list[float], task: str = "arc_easy") -> dict[str, TaskResult]:
    return {f"{task}:mc::olmes": TaskResult.of(task_config(f"{task}:mc::olmes"), MeanStat.of(mc)),
            f"{task}:rc::olmes": TaskResult.of(task_config(f"{task}:rc::olmes"), MeanStat.of(rc))}


def test_mc_or_rc_takes_the_better_member():
    """allenai/olmes oe_eval/tasks/aggregate_tasks.py: primary_score = max of the two members'
    primary scores; num_instances = their sum. By hand: MC [1,0,1,1] has mean 0.75 and
    stderr sqrt(((3 - 4*0.75^2)/3)/4) = 0.25; RC [1,1,0,0] has mean 0.5."""
    entry = spec_entry("arc_easy::olmes", _two([1, 0, 1, 1], [1, 1, 0, 0]))
    assert (entry["aggregation"], entry["score"], entry["stderr"]) == ("mc_or_rc", 0.75, 0.25)
    assert entry["mc_or_rc"] == 0.75 and entry["num_instances"] == 8 and entry["num_tasks"] == 2
    assert entry["metric"] == "mixed" and "macro" not in entry and "micro" not in entry
    assert entry["members"]["arc_easy:rc::olmes"]["score"] == 0.5

    # RC better: 0.6 beats 0.4; RC [1,1,1,0,0] stderr = sqrt((3 - 5*0.36)/4/5) = sqrt(0.06)
    entry = spec_entry("hellaswag::olmes", _two([1, 0, 0, 1, 0], [1, 1, 1, 0, 0], "hellaswag"))
    assert entry["score"] == 0.6 and math.isclose(entry["stderr"], math.sqrt(0.06))


def test_mc_or_rc_tie_goes_to_mc():
    """The loop keeps the first maximum (strict `>`), and MC is listed first. Both have mean
    0.5 here; MC [1,0] has stderr 0.5, RC [1,1,0,0] has sqrt((2 - 4*0.25)/3/4) = sqrt(1/12)."""
    entry = spec_entry("socialiqa::olmes", _two([1, 0], [1, 1, 0, 0], "socialiqa"))
    assert (entry["score"], entry["stderr"]) == (0.5, 0.5)
    assert best_of_mc_rc({"mc": {"score": 0.5, "stderr": 0.1}, "rc": {"score": 0.5, "stderr": 0.2}}) == (0.5, 0.1)
    assert best_of_mc_rc({"mc": {"score": None, "stderr": None}, "rc": {"score": 0.3, "stderr": 0.2}}) == (0.3, 0.2)


def test_mmlu_olmes_compares_the_macro_scores():
    """mmlu::olmes compares mmlu:mc::olmes and mmlu:rc::olmes by their primary (macro) scores,
    because OLMES aggregates the member groups first. Here MC's macro beats RC's, but RC's
    micro beats MC's.
    - MC: abstract_algebra scores [1, 1]; the other 56 subjects score [0, 0]. macro = micro =
      2/114 = 1/57.
    - RC: abstract_algebra scores [1, 1, 0, 0]; the others score [0]. macro = 0.5/57,
      micro = 2/60.
    """
    results = {}
    for s in SUBJECTS:
        first = s == "abstract_algebra"
        results[f"mmlu_{s}:mc::olmes"] = TaskResult.of(task_config(f"mmlu_{s}:mc::olmes"),
                                                       MeanStat.of([1.0, 1.0] if first else [0.0, 0.0]))
        results[f"mmlu_{s}:rc::olmes"] = TaskResult.of(task_config(f"mmlu_{s}:rc::olmes"),
                                                       MeanStat.of([1.0, 1.0, 0.0, 0.0] if first else [0.0]))
    entry = spec_entry("mmlu::olmes", results)
    mc, rc = entry["members"]["mmlu:mc::olmes"], entry["members"]["mmlu:rc::olmes"]
    assert math.isclose(mc["score"], 1 / 57) and math.isclose(rc["score"], 0.5 / 57)
    assert math.isclose(entry["score"], 1 / 57) and entry["stderr"] == mc["stderr"]
    assert math.isclose(spec_entry("mmlu:rc::olmes", results)["micro"], 2 / 60)
    assert math.isclose(spec_entry("mmlu:mc::olmes", results)["micro"], 1 / 57)
    assert entry["num_instances"] == 2 * 57 + 4 + 56 and entry["num_tasks"] == 114
    # the record type round-trips the new aggregation
    score = SpecScore.from_dict(entry)
    assert score.aggregation == "mc_or_rc" and math.isclose(score.aggregations["mc_or_rc"], 1 / 57)
    assert SpecScore.from_dict(score.to_dict()) == score


# ---- the other sizes: ::olmes:full, ::olmes:val, ::large, ::xlarge (proctor.tasks.olmes_sizes) ----

def test_the_nine_tasks_other_sizes_are_olmes_task_configs():
    """allenai/olmes oe_eval/configs/tasks.py: `::olmes:full` = the `::olmes` config without its limit;
    `::large`/`::xlarge` read split "all", 5,000/10,000 sampled (ARC and OpenBookQA: every document)."""
    for task in OLMES_MC_TASKS[:9]:
        for fmt in ("mc", "rc"):
            base = task_config(f"{task}:{fmt}::olmes")
            full = task_config(f"{task}:{fmt}::olmes:full")
            assert (full.split, full.sample_limit, full.primary_metric, full.num_shots, full.fewshot_source) == \
                (base.split, None, base.primary_metric, 5, base.fewshot_source)
            everything = task in ("arc_easy", "arc_challenge", "openbookqa")
            for size, limit in (("large", 5000), ("xlarge", 10000)):
                c = task_config(f"{task}:{fmt}::{size}")
                assert (c.split, c.sample_limit) == ("all", None if everything else limit)
                assert c.primary_metric == ("acc_per_char" if (task, fmt) == ("arc_challenge", "rc")
                                            else base.primary_metric)
            has_val = is_known(f"{task}:{fmt}::olmes:val")
            assert has_val == (base.split == "test")
            if has_val:
                assert (task_config(f"{task}:{fmt}::olmes:val").split,
                        task_config(f"{task}:{fmt}::olmes:val").sample_limit) == ("validation", None)


def test_olmes_full_suites_mirror_the_sampled_ones():
    assert suite("core_9mcqa:rc::olmes:full").members == tuple(f"{t}:rc::olmes:full" for t in OLMES_MC_TASKS[:9])
    assert suite("core_9mcqa::olmes:full").members == tuple(f"{t}::olmes:full" for t in OLMES_MC_TASKS[:9])
    piqa = suite("piqa::olmes:full")
    assert piqa.members == ("piqa:mc::olmes:full", "piqa:rc::olmes:full") and piqa.primary == "mc_or_rc"
    assert suite("arc:rc::xlarge").members == ("arc_easy:rc::xlarge", "arc_challenge:rc::xlarge")


def test_bpb_aliases_score_the_gold_continuations_bits_per_byte(data_dir):
    """allenai/olmes tasks.py: each alias `X::Y` has `X:bpb::Y`, primary `bits_per_byte_corr`, the same requests."""
    for task in OLMES_MC_TASKS[:9]:
        for fmt in ("mc", "rc"):
            for variant in ("olmes", "olmes:full"):
                base, bpb = task_config(f"{task}:{fmt}::{variant}"), task_config(f"{task}:{fmt}:bpb::{variant}")
                assert bpb.primary_metric == "bits_per_byte_corr"
                assert (bpb.split, bpb.sample_limit, bpb.num_shots) == (base.split, base.sample_limit, base.num_shots)
    (plain,), (bpb,) = resolve("arc_easy:rc::olmes"), resolve("arc_easy:rc:bpb::olmes")
    assert bpb.is_mc is False and resolve("arc_easy:mc:bpb::olmes")[0].is_mc
    assert [(i.prompt, i.continuations, i.label) for i in bpb.instances(data_dir, 3)] == \
        [(i.prompt, i.continuations, i.label) for i in plain.instances(data_dir, 3)]
    assert suite("arc:rc:bpb::olmes:full").members == ("arc_easy:rc:bpb::olmes:full", "arc_challenge:rc:bpb::olmes:full")


def test_a_bpb_primary_is_the_mean_gold_bits_per_byte_and_records_show_the_raw_prediction(data_dir):
    from proctor.requests import LoglikelihoodResult

    (task,) = resolve("piqa:rc:bpb::olmes")
    instances = task.instances(data_dir, 4)
    results = {}
    for inst in instances:
        for i, request in enumerate(inst.requests):   # the first choice always the likeliest
            results[request.key] = LoglikelihoodResult(-1.0 - i, 2, False)
        for request in inst.uncond_requests:
            results[request.key] = LoglikelihoodResult(-3.0, 2, False)
    scored = task.score_docs(instances, results)
    expected = [(1.0 + inst.label) / len(inst.continuations[inst.label].encode()) / math.log(2) for inst in instances]
    assert scored.metrics["bits_per_byte_corr"].mean == pytest.approx(sum(expected) / 4)
    assert all(r.metrics.predicted_index_raw == 0 for r in scored.records)
