"""Issue 13's reader findings, one regression each, on real files copied into tmp dirs.

Class 5: a malformed or empty file is one UserError naming file:line (or file and item)
and the field, raised while the plan is built (`proctor.pipeline.plan`, before any model
loads). Class 6: what would change the protocol silently (too few few-shot rows, a BOM in
the first prompt, a GSM8K answer without '####', a gold label that names no choice) is
refused, or made harmless. Class 7: valid files that used to be rejected now read.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from proctor.data import load_fewshot, load_split
from proctor.errors import UserError
from proctor.pipeline import plan
from proctor.factual.bank import read_bank, write_bank
from proctor.factual.validate import read_jsonl, validate_generations
from proctor.tasks.registry import resolve

SIQA = "social_i_qa/socialiqa-train-dev"
ODD_SEPARATORS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c"


def copy_real(data_dir: Path, root: Path, *relatives: str) -> Path:
    """Copy real files (or directories) from the shared data into `root`, same layout."""
    for relative in relatives:
        src, dst = data_dir / relative, root / relative
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
    return root


def refused(specs, root: Path, *fragments: str) -> str:
    """The plan refuses with one single-line UserError holding every fragment."""
    with pytest.raises(UserError) as info:
        plan(list(specs), root, None)
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def jsonl_lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def edit_json(path: Path, change) -> Path:
    obj = json.loads(path.read_text(encoding="utf-8"))
    change(obj)
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def siqa(data_dir, tmp_path) -> Path:
    return copy_real(data_dir, tmp_path / "data", f"{SIQA}/dev.jsonl", f"{SIQA}/dev-labels.lst", "fewshot")


# ---- class 5: one UserError at plan time, naming file, line/item and field ------------------

def test_empty_mmlu_test_csv_is_refused_at_plan_time_naming_spec_and_file(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "mmlu/dev/astronomy_dev.csv")
    (root / "mmlu/test").mkdir(parents=True)
    (root / "mmlu/test/astronomy_test.csv").write_text("")
    refused(["mmlu_astronomy:mc::olmes"], root, "mmlu_astronomy:mc::olmes",
            str(root / "mmlu/test/astronomy_test.csv"), "no rows")


def test_a_task_whose_rows_all_drop_out_has_no_documents(tmp_path):
    task = tmp_path / "bigbench/original_task_json/date_understanding/task.json"
    task.parent.mkdir(parents=True)
    task.write_text(json.dumps({"examples": [{"input": "q", "target": "a"}]}))  # no choices
    refused(["bigbench_date_understanding::leaderboard"], tmp_path,
            "bigbench_date_understanding::leaderboard", "no documents to evaluate")


def test_socialiqa_context_of_the_wrong_type(siqa):
    rows = jsonl_lines(siqa / SIQA / "dev.jsonl")
    rows[3]["context"] = 12345
    write_jsonl(siqa / SIQA / "dev.jsonl", rows)
    refused(["socialiqa:mc::olmes"], siqa, f"{siqa / SIQA / 'dev.jsonl'}:4:", "'context'",
            "found a number")


def test_bigbench_target_scores_holding_a_string(data_dir, tmp_path):
    rel = "bigbench/original_task_json/date_understanding/task.json"
    root = copy_real(data_dir, tmp_path / "data", rel)
    edit_json(root / rel, lambda t: t["examples"][2].update(target_scores="05/01/2021"))
    refused(["bigbench_date_understanding::leaderboard"], root, str(root / rel), "examples[2]",
            "'target_scores'", "found a string")
    edit_json(root / rel, lambda t: t["examples"][2].update(target_scores={"05/01/2021": "yes"}))
    refused(["bigbench_date_understanding::leaderboard"], root, "examples[2]", "'target_scores'",
            "at key '05/01/2021'")


@pytest.mark.parametrize("field,value,fragment", [
    ("id", 7, "'id'"), ("answerKey", None, "'answerKey'"), ("question", "a stem", "'question.choices'"),
])
def test_arc_fields(data_dir, tmp_path, field, value, fragment):
    rel = "ai2_arc/ARC-Easy/ARC-Easy-Test.jsonl"
    root = copy_real(data_dir, tmp_path / "data", rel, "fewshot")
    rows = jsonl_lines(root / rel)
    rows[9][field] = value
    write_jsonl(root / rel, rows)
    refused(["arc_easy:mc::olmes"], root, f"{root / rel}:10:", fragment)


def test_arc_choice_text_of_the_wrong_type(data_dir, tmp_path):
    rel = "ai2_arc/ARC-Challenge/ARC-Challenge-Test.jsonl"
    root = copy_real(data_dir, tmp_path / "data", rel, "fewshot")
    rows = jsonl_lines(root / rel)
    rows[0]["question"]["choices"][2]["text"] = ["a", "list"]
    write_jsonl(root / rel, rows)
    refused(["arc_challenge:rc::olmes"], root, f"{root / rel}:1:", "question.choices[2]", "'text'")


def test_gsm8k_bbh_humaneval_and_foundry_fields(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "gsm8k/test.jsonl", "fewshot", "bbh",
                     "bigbench/llm-foundry/bigbench_novel_concepts.jsonl")
    rows = jsonl_lines(root / "gsm8k/test.jsonl")
    rows[5]["question"] = {"text": "q"}
    write_jsonl(root / "gsm8k/test.jsonl", rows)
    refused(["gsm8k::olmes"], root, f"{root / 'gsm8k/test.jsonl'}:6:", "'question'", "found an object")

    edit_json(root / "bbh/bbh/navigate.json", lambda o: o["examples"][4].pop("target"))
    refused(["bbh_navigate:cot::lm_eval"], root, "navigate.json", "examples[4]", "'target'", "missing")

    foundry = root / "bigbench/llm-foundry/bigbench_novel_concepts.jsonl"
    rows = jsonl_lines(foundry)
    rows[1]["gold"] = True
    write_jsonl(foundry, rows)
    refused(["bigbench_novel_concepts::leaderboard"], root, f"{foundry}:2:", "'gold'", "found a boolean")
    rows[1]["gold"] = 4
    write_jsonl(foundry, rows)
    refused(["bigbench_novel_concepts::leaderboard"], root, f"{foundry}:2:", "gold 4")

    (root / "humaneval").mkdir()
    rows = jsonl_lines(data_dir / "humaneval/HumanEval.jsonl.gz")
    rows[2]["test"] = 3
    write_jsonl(root / "humaneval/HumanEval.jsonl", rows)
    refused(["humaneval::greedy"], root, "HumanEval.jsonl:3:", "'test'")
    rows[2]["test"], rows[2]["entry_point"] = "def check(f): pass", "not a name"
    write_jsonl(root / "humaneval/HumanEval.jsonl", rows)
    refused(["humaneval::greedy"], root, "HumanEval.jsonl:3:", "entry_point 'not a name'")


def test_truthfulqa_items(data_dir, tmp_path):
    rel = "truthfulqa/data/v0/mc_task.json"
    root = copy_real(data_dir, tmp_path / "data", rel)
    edit_json(root / rel, lambda items: items[3].update(mc1_targets=["a list"]))
    refused(["truthfulqa_mc1::leaderboard"], root, str(root / rel), "item 3", "'mc1_targets'")
    edit_json(root / rel, lambda items: items[3].update(mc1_targets={"yes": "1"}))
    refused(["truthfulqa_mc1::leaderboard"], root, "item 3", "at key 'yes'")


def test_fewshot_list_entries_are_checked(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "fewshot", "hellaswag")
    path = root / "fewshot/OLMES_hellaswag.json"
    edit_json(path, lambda o: o["examples"][1].update(endings="one ending"))
    refused(["hellaswag:rc::olmes"], root, str(path), "examples[1]", "'endings'", "found a string")
    edit_json(root / "fewshot/OLMES_social_i_qa.json", lambda o: o["examples"][0].pop("answerB"))
    with pytest.raises(UserError, match=r"OLMES_social_i_qa.json: examples\[0\] has no string 'answerB'"):
        load_fewshot("OLMES:social_i_qa", 5, root)


def test_bbh_cot_prompt_without_shots(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "bbh")
    (root / "bbh/cot-prompts/navigate.txt").write_text("canary\n-----\nJust a description.\n")
    refused(["bbh_navigate:cot::lm_eval"], root, "bbh_navigate:cot::lm_eval", "navigate.txt",
            "no 'Q: ...' shots")


@pytest.mark.parametrize("relative,spec", [
    ("fewshot/OLMES_ARC-Easy.json", "arc_easy:mc::olmes"),
    ("bigbench/original_task_json/strategyqa/task.json", "bigbench_strategyqa::leaderboard"),
])
def test_deeply_nested_json_file(data_dir, tmp_path, relative, spec):
    root = copy_real(data_dir, tmp_path / "data", "ai2_arc/ARC-Easy", "fewshot")
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_text("[" * 100_000 + "]" * 100_000)
    refused([spec], root, str(root / relative), "nested too deeply")


def test_deeply_nested_json_bank_and_generations(tmp_path):
    bank = tmp_path / "bank.jsonl"
    bank.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(UserError, match="lines that are not JSON: 1 \\(line 1\\)"):
        read_bank(bank)
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"query_id": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    report = validate_generations([], list(read_jsonl(gens)))
    assert report.bad_types == ["line 1: not valid JSON (nested too deeply to read)"]


def test_a_blank_line_does_not_shift_the_line_named(siqa):
    path = siqa / SIQA / "dev.jsonl"
    lines = path.read_text().split("\n")
    lines.insert(1, "")
    lines[4] = lines[4].replace('"context"', '"kontext"')
    path.write_text("\n".join(lines))
    refused(["socialiqa:mc::olmes"], siqa, f"{path}:5:", "'context'", "missing")


# ---- class 6: the protocol never changes silently --------------------------------------------

def test_mmlu_dev_split_with_fewer_rows_than_shots(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "mmlu/test/astronomy_test.csv")
    dev = root / "mmlu/dev/astronomy_dev.csv"
    dev.parent.mkdir(parents=True)
    dev.write_bytes(b"".join((data_dir / "mmlu/dev/astronomy_dev.csv").read_bytes().splitlines(True)[:1]))
    message = refused(["mmlu_astronomy:mc::olmes"], root, "mmlu_astronomy:mc::olmes", "dev split",
                      "needs 5 few-shot examples", "only 1 rows")
    assert message.startswith("mmlu_astronomy:mc::olmes: ")
    refused(["mmlu_astronomy::leaderboard"], root, "mmlu_astronomy::leaderboard", "dev split",
            "needs 5 few-shot examples", "only 1 rows")
    (task,) = resolve("mmlu_astronomy:mc::olmes", num_shots=1)
    assert task.instances(root, 1)  # one shot asked for, one there: fine


def test_fewshot_list_shorter_than_the_shots(data_dir, tmp_path, siqa):
    edit_json(siqa / "fewshot/OLMES_social_i_qa.json", lambda o: o.update(examples=o["examples"][:2]))
    refused(["socialiqa:mc::olmes"], siqa, "socialiqa:mc::olmes", "OLMES_social_i_qa.json",
            "has 2 examples, the spec needs 5")


def test_a_utf8_bom_never_reaches_a_prompt(data_dir, tmp_path, siqa):
    spec = "mmlu_astronomy:mc::olmes"
    root = copy_real(data_dir, tmp_path / "bom", "mmlu/test/astronomy_test.csv", "mmlu/dev/astronomy_dev.csv")
    for name in ("test/astronomy_test.csv", "dev/astronomy_dev.csv"):
        path = root / "mmlu" / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    plain = resolve(spec)[0].instances(data_dir, 3)
    with_bom = resolve(spec)[0].instances(root, 3)
    assert [i.prompt for i in with_bom] == [i.prompt for i in plain]
    assert "\ufeff" not in with_bom[0].prompt
    # JSONL rows, few-shot lists and BBH prompts too
    before = resolve("socialiqa:mc::olmes")[0].instances(siqa, 2)
    for rel in (f"{SIQA}/dev.jsonl", f"{SIQA}/dev-labels.lst", "fewshot/OLMES_social_i_qa.json"):
        (siqa / rel).write_bytes(b"\xef\xbb\xbf" + (siqa / rel).read_bytes())
    after = resolve("socialiqa:mc::olmes")[0].instances(siqa, 2)
    assert [i.prompt for i in after] == [i.prompt for i in before]
    bbh = copy_real(data_dir, tmp_path / "bbh", "bbh")
    cot = bbh / "bbh/cot-prompts/navigate.txt"
    cot.write_bytes(b"\xef\xbb\xbf" + cot.read_bytes())
    assert (resolve("bbh_navigate:cot::lm_eval")[0].instances(bbh, 1)[0].prompt
            == resolve("bbh_navigate:cot::lm_eval")[0].instances(data_dir, 1)[0].prompt)


def test_gsm8k_answer_without_a_gold_marker(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "gsm8k/test.jsonl", "fewshot")
    rows = jsonl_lines(root / "gsm8k/test.jsonl")
    rows[7]["answer"] = rows[7]["answer"].replace("####", "=>")
    write_jsonl(root / "gsm8k/test.jsonl", rows)
    refused(["gsm8k::olmes"], root, f"{root / 'gsm8k/test.jsonl'}:8:", "####")
    rows[7]["answer"] = "She sells them all. #### "
    write_jsonl(root / "gsm8k/test.jsonl", rows)
    refused(["gsm8k::olmes"], root, f"{root / 'gsm8k/test.jsonl'}:8:", "no gold answer")


def test_gold_labels_that_name_no_choice(data_dir, tmp_path):
    rel = "ai2_arc/ARC-Easy/ARC-Easy-Test.jsonl"
    root = copy_real(data_dir, tmp_path / "data", rel, "fewshot", "truthfulqa/data/v0/mc_task.json")
    rows = jsonl_lines(root / rel)
    rows[0]["answerKey"] = "F"
    write_jsonl(root / rel, rows)
    refused(["arc_easy:mc::olmes"], root, f"{root / rel}:1:", "answerKey 'F'")
    rows[0]["answerKey"] = rows[0]["question"]["choices"][0]["label"]
    rows[0]["question"]["choices"][1]["label"] = "D"   # A, D, C, D: a choice is missing
    write_jsonl(root / rel, rows)
    refused(["arc_easy:mc::olmes"], root, f"{root / rel}:1:", "choice labels")
    edit_json(root / "fewshot/OLMES_hellaswag.json", lambda o: o["examples"][0].update(label="4"))
    with pytest.raises(UserError, match=r"examples\[0\] has label '4'"):
        load_fewshot("OLMES:hellaswag", 5, root)
    tqa = root / "truthfulqa/data/v0/mc_task.json"
    edit_json(tqa, lambda items: items[0].update(mc2_targets=dict(reversed(items[0]["mc2_targets"].items()))))
    refused(["truthfulqa_mc2::leaderboard"], root, "item 0", "the first answer true")


# ---- class 7: valid files read -----------------------------------------------------------

def test_jsonl_strings_with_unicode_line_separators(data_dir, tmp_path, siqa):
    path = siqa / SIQA / "dev.jsonl"
    rows = jsonl_lines(path)
    rows[0]["context"] = "Tracy" + ODD_SEPARATORS + rows[0]["context"]
    write_jsonl(path, rows)   # raw characters, not \u escapes
    assert "\u2028" in path.read_text(encoding="utf-8")
    read = load_split("allenai/social_i_qa", None, "validation", siqa)
    assert len(read) == 1954 and read[0]["context"] == rows[0]["context"]
    gsm = copy_real(data_dir, tmp_path / "gsm", "gsm8k/test.jsonl")
    lines = jsonl_lines(gsm / "gsm8k/test.jsonl")
    lines[1]["question"] += "\u0085\x0c"
    write_jsonl(gsm / "gsm8k/test.jsonl", lines)
    assert len(load_split("openai/gsm8k", "main", "test", gsm)) == 1319


def test_crlf_jsonl_and_cot_prompts(data_dir, tmp_path):
    root = copy_real(data_dir, tmp_path / "data", "gsm8k/test.jsonl", "bbh")
    path = root / "gsm8k/test.jsonl"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert load_split("openai/gsm8k", "main", "test", root) == load_split("openai/gsm8k", "main", "test", data_dir)
    cot = root / "bbh/cot-prompts/navigate.txt"
    cot.write_bytes(cot.read_bytes().replace(b"\n", b"\r\n"))
    assert (resolve("bbh_navigate:cot::lm_eval")[0].instances(root, 1)[0].prompt
            == resolve("bbh_navigate:cot::lm_eval")[0].instances(data_dir, 1)[0].prompt)


def test_form_feed_in_the_hellaswag_text_form(data_dir, tmp_path, without_bundled_data):
    import bz2

    text = bz2.decompress((data_dir / "hellaswag/hellaswag_val_full.txt.bz2").read_bytes()).decode()
    lines = text.split("\n")
    lines[2] = lines[2] + "\x0c page two\u2028"
    (tmp_path / "hellaswag").mkdir()
    (tmp_path / "hellaswag/hellaswag_val_full.txt").write_text("\n".join(lines), encoding="utf-8")
    rows = load_split("Rowan/hellaswag", None, "validation", tmp_path)
    assert len(rows) == 10042 and rows[0]["endings"][0].endswith("\x0c page two\u2028")


def test_bank_and_generations_with_unicode_separators(data_dir, tmp_path):
    from proctor.factual.bank import build_bank
    from proctor.factual.generate import _check_final
    from proctor.factual.prompts import build_prompt

    built = build_bank(data_dir, facts_per_relation=1, languages=("fr",), sources=("rome",)).rows
    facts = {r["fact_id"] for r in built[:1]}
    rows = [r for r in built if r["fact_id"] in facts]
    rows[0] = dict(rows[0], aliases=[*rows[0]["aliases"], "x\u2028y\u0085"])
    bank = tmp_path / "bank.jsonl"
    write_bank(bank, rows)
    assert read_bank(bank).rows == rows
    gens = tmp_path / "gens.jsonl"
    main = [r for r in rows if r["use_for_main_forward"]]
    out = [{"query_id": r["query_id"], "fact_id": r["fact_id"], "condition_family": r["condition_family"],
            "model": "m", "prompt": build_prompt(r), "raw_response": " A\u2028B\u0085",
            "generated_tokens": 3, "finish_reason": "stop"} for r in main]
    gens.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in out).encode())
    report = validate_generations(main, list(read_jsonl(gens)))
    assert report.ok, report.lines()
    gens.write_bytes(gens.read_bytes()[3:])
    _check_final(gens, [r["query_id"] for r in main], "m", None)   # proctor's own file: accepted
