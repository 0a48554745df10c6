"""`proctor export bergson` and `proctor attribution join` on a tiny model's real run.

The export's rows must be the exact tokens the run scored (decoded, they are the request's
context + continuation; re-scored, they give the run's sum_logits); the join must map
Bergson's positional scores back onto query_id, and refuse scores that are not the export's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import proctor
from proctor.cli import main
from proctor.engine.tokens import split_trailing_space
from proctor.errors import UserError
from proctor.export.attribution import join_table, read_scores
from proctor.export.bergson import export_bergson, read_manifest
from tinylm import build_tiny_model

MC, RC, GEN = "arc_easy:mc::olmes", "arc_easy:rc::olmes", "gsm8k::olmo3:n8:v2"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("bergson")
    model = build_tiny_model(root / "tiny")
    proctor.evaluate(str(model), tasks=[MC, RC], limit=3, data_dir=data_dir, output=root / "run",
                     save_requests=True, progress=False, cache=False)
    return root


@pytest.fixture(scope="module")
def gen_run(tiny_run, data_dir):
    """GSM8K's eight samples of 512 tokens at most: ~10 s."""
    proctor.evaluate(str(tiny_run / "tiny"), tasks=[MC, GEN], limit=3, data_dir=data_dir, output=tiny_run / "gen",
                     save_requests=True, progress=False, cache=False, max_length=1024)
    return tiny_run / "gen"


def load(path: Path):
    from datasets import load_from_disk

    return load_from_disk(str(path))


def requests_of(run: Path, task: str) -> dict:
    rows = [json.loads(line) for line in (run / task.replace("::", "-").replace(":", "-") / "requests.jsonl")
            .read_text().splitlines()]
    return {(r["query_id"], r["idx"]): r["request"] for r in rows if not r["uncond"]}


@pytest.fixture(scope="module")
def gold(tiny_run):
    export_bergson(tiny_run / "run", tiny_run / "gold", target="gold")
    return tiny_run / "gold"


def test_rows_are_the_scored_tokens_and_rescore_to_the_runs_sum_logits(tiny_run, gold):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_run / "tiny"))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_run / "tiny"), dtype=torch.float32).eval()
    run = proctor.read_run(tiny_run / "run")
    rows = list(load(gold))
    choice_rows = [r for r in rows if r["task"] in (MC, RC)]
    assert len(choice_rows) == len(rows) == 6 and {r["target"] for r in rows} == {"gold"}
    for row in choice_rows:
        record = next(r for r in run.tasks[row["task"]].records if r.query_id == row["query_id"])
        assert row["choice"] == record.label and row["sample"] is None
        request = requests_of(tiny_run / "run", row["task"])[(row["query_id"], row["choice"])]
        ids, labels, n = row["input_ids"], row["labels"], row["context_tokens"]
        assert tokenizer.decode(ids) == request["context"] + request["continuation"]
        assert labels[:n] == [-100] * n and labels[n:] == ids[n:] and n < len(ids)
        assert tokenizer.decode(ids[n:]) == split_trailing_space(request["context"], request["continuation"])[1]
        with torch.inference_mode():
            logprobs = model(torch.tensor([ids])).logits[0].log_softmax(-1)
        rescored = sum(logprobs[t - 1, ids[t]].item() for t in range(n, len(ids)))
        assert rescored == pytest.approx(record.model_output[row["choice"]].sum_logits, abs=1e-4)
        assert row["sum_logits"] == record.model_output[row["choice"]].sum_logits


@pytest.mark.slow  # the GSM8K run
def test_generation_rows_continue_the_prompt_the_model_generated_from(tiny_run, gen_run, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_run / "tiny"))
    run = proctor.read_run(gen_run)
    export_bergson(gen_run, tmp_path / "samples", target="samples")
    export_bergson(gen_run, tmp_path / "gold", target="gold")
    all_samples = list(load(tmp_path / "samples"))
    assert [r["target"] for r in all_samples[:3]] == ["predicted"] * 3  # a choice task's one sample
    samples = [r for r in all_samples if r["task"] == GEN]
    records = run.tasks[GEN].records
    expected = [(rec.query_id, i, s.text) for rec in records for i, s in enumerate(rec.model_output) if s.text]
    assert [(r["query_id"], r["sample"], r["target_text"]) for r in samples] == expected and len(expected) > 3
    gold_rows = [r for r in load(tmp_path / "gold") if r["task"] == GEN]
    assert [(r["query_id"], r["target_text"]) for r in gold_rows] == [(rec.query_id, " " + rec.label) for rec in records]
    for row in samples[:3] + gold_rows:
        context = requests_of(gen_run, GEN)[(row["query_id"], 0)]["context"]
        ids, n = row["input_ids"], row["context_tokens"]
        decoded = tokenizer.decode(ids)
        # the window keeps the end of a prompt longer than the model's (1024 tokens here)
        assert (context + row["target_text"]).endswith(decoded) and len(ids) <= 1025
        assert tokenizer.decode(ids[n:]) == split_trailing_space(context, row["target_text"])[1]
        assert row["labels"][:n] == [-100] * n and row["sum_logits"] is None


def test_predicted_rows_are_the_choice_the_primary_metric_picked(tiny_run):
    run = proctor.read_run(tiny_run / "run")
    export_bergson(tiny_run / "run", tiny_run / "predicted", target="predicted")
    rows = list(load(tiny_run / "predicted"))
    manifest = read_manifest(tiny_run / "predicted")
    assert manifest.rows == len(rows) == 3 + 3 and manifest.tasks == {MC: 3, RC: 3}
    order = [(t.name, r.query_id) for t in run.tasks.values() for r in t.records]
    assert [(r["task"], r["query_id"]) for r in rows] == order
    for row in rows:
        task = run.tasks[row["task"]]
        record = next(r for r in task.records if r.query_id == row["query_id"])
        assert row["choice"] == record.prediction(task.primary_metric) and row["target"] == "predicted"
        sidecar = next(m for m in task.sidecar if m.query_id == row["query_id"])
        assert (row["is_correct"], row["benchmark"], row["doc_id"]) == (sidecar.is_correct, sidecar.benchmark,
                                                                        sidecar.doc_id)


def test_a_chat_runs_rows_are_its_rendered_prompts(tmp_path, data_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = build_tiny_model(tmp_path / "chat", chat=True)
    run = proctor.evaluate(str(model_dir), tasks=[MC], limit=2, data_dir=data_dir, output=tmp_path / "run",
                           save_requests=True, progress=False, cache=False, chat_template=True)
    export_bergson(tmp_path / "run", tmp_path / "export")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    for row, record in zip(load(tmp_path / "export"), run.tasks[MC].records):
        request = requests_of(tmp_path / "run", MC)[(row["query_id"], row["choice"])]
        assert isinstance(request["context"], dict) and "<|im_start|>" in request["rendered_context"]
        assert tokenizer.decode(row["input_ids"]) == request["rendered_context"] + request["continuation"]
        with torch.inference_mode():
            logprobs = model(torch.tensor([row["input_ids"]])).logits[0].log_softmax(-1)
        n, ids = row["context_tokens"], row["input_ids"]
        rescored = sum(logprobs[t - 1, ids[t]].item() for t in range(n, len(ids)))
        assert rescored == pytest.approx(record.model_output[row["choice"]].sum_logits, abs=1e-4)


# ---- join ------------------------------------------------------------------------------------


def fake_bergson(export: Path, work: Path, scores: np.ndarray, *, labels=None, written: bool = True) -> Path:
    """A `bergson build` index (its data.hf labels) and a `bergson score` dir, as Bergson writes them."""
    from bergson.score.score_writer import save_sequence_scores
    from datasets import Dataset

    index, out = work / "index", work / "scores"
    Dataset.from_dict({"labels": labels if labels is not None else load(export)["labels"]}).save_to_disk(
        str(index / "data.hf"))
    save_sequence_scores(out, scores)
    if not written:
        store = np.memmap(out / "scores.bin", dtype=np.dtype(json.loads((out / "info.json").read_text())["dtype"]),
                          mode="r+")
        store["written_1"][2] = False
        store.flush()
    (out / "config.yaml").write_text(f"steps:\n- score:\n    score_cfg:\n      query_path: {index}\n"
                                     f"      higher_is_better: true\n    index_cfg:\n      data:\n"
                                     f"        dataset: /train\n")
    return out


def test_join_maps_positional_scores_back_onto_query_ids(gold, tmp_path):
    pytest.importorskip("bergson")
    manifest = read_manifest(gold)
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(7, manifest.rows)).astype(np.float32)  # 7 training rows
    table, _ = join_table(gold, fake_bergson(gold, tmp_path, scores))
    df = table.to_pandas()
    rows = load(gold)
    assert len(df) == 7 * manifest.rows
    for i in range(manifest.rows):
        mine = df[df["export_row"] == i]
        assert set(mine["query_id"]) == {rows[i]["query_id"]}
        assert list(mine["rank"]) == list(range(1, 8))
        assert list(mine["train_index"]) == list(np.argsort(-scores[:, i], kind="stable"))
        assert np.allclose(mine["score"], np.sort(scores[:, i])[::-1])
    top, _ = join_table(gold, tmp_path / "scores", top=2)
    assert len(top) == 2 * manifest.rows


def test_the_cli_writes_the_table_beside_the_sidecar(tiny_run, gold, tmp_path, capsys):
    pytest.importorskip("bergson")
    import pyarrow.parquet as pq

    rows = read_manifest(gold).rows
    scores = fake_bergson(gold, tmp_path, np.ones((3, rows), dtype=np.float32))
    assert main(["attribution", "join", str(gold), str(scores), "--top", "1"]) == 0
    out = tiny_run / "run" / "attribution.parquet"
    table = pq.read_table(out)
    assert table.num_rows == rows and set(table.column("query_id").to_pylist()) <= set(
        pq.read_table(tiny_run / "run" / "query_metadata.parquet").column("query_id").to_pylist())
    assert proctor.read_run(tiny_run / "run").tasks  # the run directory still reads
    assert main(["attribution", "join", str(gold), str(scores), "--top", "1"]) == 0  # its own file: replaced
    out.unlink()


def test_scores_that_are_not_the_exports_are_refused(gold, tmp_path):
    pytest.importorskip("bergson")
    rows = read_manifest(gold).rows
    with pytest.raises(UserError, match=f"scores {rows + 1} queries but .* exports {rows}"):
        join_table(gold, fake_bergson(gold, tmp_path / "a", np.zeros((3, rows + 1), dtype=np.float32)))
    other = [list(r) for r in load(gold)["labels"]]
    other[0][-1] = other[0][-1] + 1  # another export: the same count, other tokens
    with pytest.raises(UserError, match="was not built from"):
        join_table(gold, fake_bergson(gold, tmp_path / "b", np.zeros((3, rows), dtype=np.float32), labels=other))
    with pytest.raises(UserError, match="were not all written"):
        join_table(gold, fake_bergson(gold, tmp_path / "c", np.zeros((3, rows), dtype=np.float32), written=False))
    damaged = fake_bergson(gold, tmp_path / "d", np.zeros((3, rows), dtype=np.float32))
    with open(damaged / "scores.bin", "ab") as f:
        f.write(b"\0")
    with pytest.raises(UserError, match="damaged or unfinished"):
        read_scores(damaged)
    with pytest.raises(UserError, match="not a Bergson score directory"):
        read_scores(tmp_path)
    with pytest.raises(UserError, match="not a proctor Bergson export"):
        join_table(tmp_path, damaged)


# ---- the commands it prints -------------------------------------------------------------------


def test_the_export_prints_the_tutorials_commands(tiny_run, tmp_path, monkeypatch, capsys):
    """The `next:` lines are docs/tutorials/attribution.md's commands, verbatim: its bash block runs them, and
    its console block shows them as printed; MODEL is the run's model as transformers loads it."""
    import shlex

    page = (Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "attribution.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the page's relative paths
    assert main(["export", "bergson", str(tiny_run / "run"), "--output", "runs/export", "--target", "gold"]) == 0
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    commands = [line for line in printed if line.startswith(("bergson ", "proctor attribution "))]
    assert [c.split()[:2] for c in commands] == [["bergson", "build"], ["bergson", "score"], ["proctor", "attribution"]]
    for command in commands:
        assert f"\n{command}\n" in page, f"the page's bash block does not run: {command}"
        assert f"\n      {command}\n" in page, f"the page's console block does not show: {command}"
    assert f"MODEL={shlex.quote(str(tiny_run / 'tiny'))}" in printed
    assert "--unit_normalize" in commands[1] and '--dataset "$TRAIN"' in commands[1]


def test_the_printed_commands_are_shell_lines_for_any_output_path(tiny_run, tmp_path, capsys):
    import shlex

    out = tmp_path / "my exports" / "it's"
    assert main(["export", "bergson", str(tiny_run / "run"), "--output", str(out)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    build, score, join = (shlex.split(line) for line in lines if line.startswith(("bergson ", "proctor attribution ")))
    assert build[2] == f"{out}-index" and build[build.index("--dataset") + 1] == str(out)
    assert score[2] == f"{out}-scores" and score[score.index("--query_path") + 1] == f"{out}-index"
    assert score[score.index("--dataset") + 1] == "$TRAIN" and build[build.index("--model") + 1] == "$MODEL"
    assert join[3:] == [str(out), f"{out}-scores"]


# ---- bad input ----------------------------------------------------------------------------------


def test_a_run_without_its_requests_is_refused_naming_the_fix(tiny_run, tmp_path, capsys):
    bare = tmp_path / "run"
    shutil.copytree(tiny_run / "run", bare)
    (bare / "arc_easy-mc-olmes" / "requests.jsonl").unlink()
    assert main(["export", "bergson", str(bare), "--output", str(tmp_path / "out")]) == 2
    assert "--save-requests" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert main(["export", "bergson", str(tmp_path / "nothing"), "--output", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_edited_requests_and_bad_options_are_refused(tiny_run, tmp_path, capsys):
    edited = tmp_path / "run"
    shutil.copytree(tiny_run / "run", edited)
    path = edited / "arc_easy-mc-olmes" / "requests.jsonl"
    path.write_text(path.read_text().replace("Answer:", "Answer :", 1))
    with pytest.raises(UserError, match="changed after proctor wrote it"):
        export_bergson(edited, tmp_path / "out")
    with pytest.raises(UserError, match="does not match its request_key"):
        export_bergson(edited, tmp_path / "out", allow_edited=True)
    with pytest.raises(UserError, match="unknown --target 'best'"):
        export_bergson(tiny_run / "run", tmp_path / "out", target="best")
    assert main(["export", "bergson", str(tiny_run / "run"), "--output", str(tmp_path / "out"), "--target",
                 "best"]) == 2
    assert "invalid choice: 'best'" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("a user's file")
    with pytest.raises(UserError, match="proctor did not write"):
        export_bergson(tiny_run / "run", foreign)
    assert (foreign / "mine.txt").read_text() == "a user's file" and not (tmp_path / "out").exists()


@pytest.mark.slow  # Bergson itself: two subprocesses, ~30 s
def test_real_bergson_scores_join_back_in_order(tiny_run, gold, tmp_path):
    """export -> bergson build -> bergson score -> join, with the real Bergson on the tiny model.
    Training rows 0 and 2 are one exported row twice: they score alike for every query."""
    pytest.importorskip("bergson")
    import subprocess
    import sys

    from datasets import load_from_disk

    rows = load_from_disk(str(gold))
    train = rows.select([4, 1, 4]).select_columns(["input_ids", "labels"])
    train.save_to_disk(str(tmp_path / "train"))
    common = ["--model", str(tiny_run / "tiny"), "--projection_dim", "16", "--nproc_per_node", "1",
              "--token_batch_size", "1100", "--overwrite"]
    for command in (["build", str(tmp_path / "index"), "--dataset", str(gold), "--precision", "fp32"],
                    ["score", str(tmp_path / "scores"), "--dataset", str(tmp_path / "train"), "--query_path",
                     str(tmp_path / "index"), "--score", "individual", "--index_cfg.precision", "fp32",
                     "--score_cfg.precision", "fp32"]):
        done = subprocess.run([sys.executable, "-m", "bergson", *command, *common], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    table = join_table(gold, tmp_path / "scores")[0].to_pandas()
    assert len(table) == 3 * len(rows)
    assert list(dict.fromkeys(table["query_id"])) == list(dict.fromkeys(rows["query_id"]))
    by_row = table.pivot(index="export_row", columns="train_index", values="score")
    assert np.array_equal(by_row[0], by_row[2]) and not np.array_equal(by_row[0], by_row[1])  # copies score alike


# ---- fuzzing the readers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def score_dir(gold, tmp_path_factory):
    pytest.importorskip("bergson")
    return fake_bergson(gold, tmp_path_factory.mktemp("fuzz"), np.arange(3 * read_manifest(gold).rows,
                        dtype=np.float32).reshape(3, -1))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["export.json", "info.json", "config.yaml", "scores.bin"]), position=st.floats(0, 1),
       cut=st.integers(0, 8), insert=st.binary(max_size=12), whole=st.none() | st.binary(max_size=200))
def test_damaged_exports_and_scores_are_read_or_refused_in_one_line(gold, score_dir, tmp_path, name, position, cut,
                                                                      insert, whole):
    """Whatever a manifest, info.json, config.yaml or scores.bin holds, the join reads it or
    raises one UserError; nothing else escapes."""
    export, scores = tmp_path / "export", tmp_path / "scores"
    shutil.copytree(gold, export, dirs_exist_ok=True)
    shutil.copytree(score_dir, scores, dirs_exist_ok=True)
    target = (export if name == "export.json" else scores) / name
    raw = target.read_bytes()
    at = int(position * len(raw))
    target.write_bytes(whole if whole is not None else raw[:at] + insert + raw[at + cut:])
    try:
        table, _ = join_table(export, scores)
    except UserError as err:
        assert "\n" not in str(err)
    else:
        assert table.num_rows == 3 * read_manifest(export).rows
