"""`proctor factual ...` end to end: bank -> generate -> score -> hidden -> metrics, and bad input."""

import json
import shutil

import numpy as np
import pytest

from proctor.cli import main
from proctor.factual.bank import build_bank, read_bank, write_bank
from proctor.factual.hidden import load_hidden
from tests.tinylm import build_tiny_model


def small_bank(data_dir, path, facts: int):
    """The first `facts` facts (with every family among them) of a small real bank."""
    rows = build_bank(data_dir, facts_per_relation=2, languages=("fr",)).rows
    families = {}
    for row in rows:
        families.setdefault(row["condition_family"], row["fact_id"])
    keep = list(dict.fromkeys(families.values()))
    for row in rows:
        if len(keep) >= facts:
            break
        if row["fact_id"] not in keep:
            keep.append(row["fact_id"])
    write_bank(path, [row for row in rows if row["fact_id"] in keep], {})
    return read_bank(path)


@pytest.fixture(scope="module", autouse=True)
def result_cache(tmp_path_factory):
    """The commands' result cache ($PROCTOR_CACHE_DIR/results.sqlite) in this module's own
    directory, never the user's."""
    directory = tmp_path_factory.mktemp("proctor-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROCTOR_CACHE_DIR", str(directory))
        yield directory / "results.sqlite"


@pytest.fixture(scope="module")
def tiny_run(data_dir, tmp_path_factory, result_cache):
    """A whole `factual run` with a tiny random model on 60 real facts."""
    root = tmp_path_factory.mktemp("factual")
    model = build_tiny_model(root / "tiny")
    bank = small_bank(data_dir, root / "bank.jsonl", facts=60)
    out = root / "out"
    code = main(["factual", "run", "--bank", str(root / "bank.jsonl"), "--model", str(model), "--name", "tiny",
                 "--output-dir", str(out), "--no-progress", "--bootstrap", "50"])
    assert code == 0
    return root, bank, out


@pytest.mark.slow  # heavy: the whole factual pipeline, over 3 s
def test_run_writes_every_file_of_the_seed_layout(tiny_run):
    root, bank, out = tiny_run
    gens = [json.loads(line) for line in (out / "generations" / "tiny.jsonl").read_text().splitlines()]
    assert [g["query_id"] for g in gens] == [r["query_id"] for r in bank.rows]
    families = {r["condition_family"] for r in bank.rows}
    assert families == {"anchor", "paraphrase", "reverse", "recognition", "crosslingual"}
    scored = [json.loads(line) for line in (out / "scored" / "tiny.scored.jsonl").read_text().splitlines()]
    assert len(scored) == len(bank.rows) and {s["model"] for s in scored} == {"tiny"}
    summary = json.loads((out / "scored" / "tiny.summary.json").read_text())
    assert summary["bank_version"] == bank.version
    assert set(summary["condition_family"]) == families and summary["overall"]["n"] == len(bank.rows)
    hidden = load_hidden(out / "hidden" / "tiny")
    assert hidden.index.query_ids == [r["query_id"] for r in bank.main_forward_rows()]
    assert hidden.index.layers == [1] and hidden.layers[1].shape == (len(hidden.index.query_ids), 32)
    metrics = json.loads((out / "metrics" / "tiny.json").read_text())
    assert "paraphrase" in metrics["conditions"] and "crosslingual:fr" in metrics["conditions"]
    assert "recognition" not in metrics["conditions"]  # no hidden states: not a main-forward family
    assert metrics["conditions"]["paraphrase"]["iss"]["n_pairs"] > 0


def test_rerunning_finds_everything_done(tiny_run, result_cache, capsys):
    root, bank, out = tiny_run
    assert result_cache.is_file()  # the run kept its results in $PROCTOR_CACHE_DIR
    before = {p: p.read_bytes() for p in (out / "hidden" / "tiny").iterdir()}
    code = main(["factual", "run", "--bank", str(root / "bank.jsonl"), "--model", str(root / "tiny"),
                 "--name", "tiny", "--output-dir", str(out), "--no-progress", "--bootstrap", "50"])
    assert code == 0
    assert "already holds every query" in capsys.readouterr().out
    assert before == {p: p.read_bytes() for p in (out / "hidden" / "tiny").iterdir()}


def test_a_new_output_dir_is_filled_from_the_result_cache(tiny_run, tmp_path, capsys):
    root, bank, out = tiny_run
    args = ["--bank", str(root / "bank.jsonl"), "--model", str(root / "tiny"), "--name", "tiny",
            "--output-dir", str(tmp_path / "out"), "--no-progress"]
    assert main(["factual", "generate", *args]) == 0
    said = capsys.readouterr().out
    prompts = {json.loads(line)["prompt"] for line in (out / "generations" / "tiny.jsonl").read_text().splitlines()}
    assert f"(0 prompts generated, {len(prompts)} from the result cache" in said  # no model work
    assert (tmp_path / "out" / "generations" / "tiny.jsonl").read_bytes() == \
        (out / "generations" / "tiny.jsonl").read_bytes()
    provenance = json.loads((tmp_path / "out" / "generations" / "tiny.provenance.json").read_text())
    assert provenance["bank_version"] == bank.version and provenance["backend"] == "hf"


def test_hidden_with_a_batch_size_and_no_cache(tiny_run, tmp_path, monkeypatch, capsys):
    root, bank, out = tiny_run
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    args = ["factual", "hidden", "--bank", str(root / "bank.jsonl"), "--model", str(root / "tiny"),
            "--name", "tiny", "--output-dir", str(tmp_path / "out"), "--no-progress", "--batch-size", "3",
            "--no-cache"]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()  # --no-cache: neither read nor stored
    fresh, first = load_hidden(tmp_path / "out" / "hidden" / "tiny"), load_hidden(out / "hidden" / "tiny")
    index = json.loads((tmp_path / "out" / "hidden" / "tiny" / "index.json").read_text())
    assert "batch_size" not in index and index["format"] == "proctor-factual-hidden/2"
    assert fresh.index.query_ids == first.index.query_ids and fresh.index.layers == first.index.layers
    for layer, array in fresh.layers.items():  # another batching: the same states, to float16 precision
        np.testing.assert_allclose(array.astype(np.float32), first.layers[layer].astype(np.float32),
                                   rtol=1e-3, atol=1e-3)


def assert_one_error_line(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("proctor: error: "), err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize("step", ["hidden", "run"])
@pytest.mark.parametrize("option", [["--backend", "hf"], ["--threads", "2"], ["--base-url", "http://127.0.0.1:1/v1"],
                                    ["--tokenizer", "gpt2"], ["--concurrency", "2"]])
def test_steps_with_hidden_states_take_no_backend_options(step, option, tmp_path, capsys):
    """Hidden states need the model's blocks in this process: `factual hidden` (and `run`,
    which extracts them) are transformers only."""
    out = tmp_path / "out"
    code = main(["factual", step, "--bank", str(tmp_path / "bank.jsonl"), "--output-dir", str(out), *option])
    assert_one_error_line(code, capsys.readouterr().err, f"unrecognized arguments: {option[0]}")
    assert not out.exists()


@pytest.mark.parametrize("step, options, said", [
    ("generate", ["--backend", "llamacpp", "--threads", "0"], "argument --threads: must be a positive whole number"),
    ("generate", ["--threads", "2"], "--threads does not apply to --backend hf"),
    ("generate", ["--backend", "llamacpp", "--base-url", "http://127.0.0.1:1/v1"],
     "--base-url does not apply to --backend llamacpp"),
    ("generate", ["--backend", "openai", "--threads", "4"], "--threads does not apply to --backend openai"),
    ("generate", ["--backend", "nope"], "argument --backend: invalid choice: 'nope'"),
    ("generate", ["--batch-size", "0"], "argument --batch-size: must be a positive whole number"),
    ("hidden", ["--batch-size", "many"], "argument --batch-size: expected a whole number"),
    ("generate", ["--backend", "openai", "--openai-extra", "[1]"], "--openai-extra: expected a JSON object"),
    ("generate", ["--concurrency", "3"], "--concurrency does not apply to --backend hf"),
])
def test_bad_model_options_are_one_clear_error(tiny_run, tmp_path, capsys, step, options, said):
    root, bank, out = tiny_run
    fresh = tmp_path / "out"
    code = main(["factual", step, "--bank", str(root / "bank.jsonl"), "--model", str(root / "tiny"),
                 "--output-dir", str(fresh), "--no-progress", *options])
    assert_one_error_line(code, capsys.readouterr().err, said)
    assert not fresh.exists()  # refused before any model work or output


def test_metrics_with_the_best_anchor_layer(tiny_run, tmp_path):
    root, bank, out = tiny_run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    assert main(["factual", "metrics", "--bank", str(root / "bank.jsonl"), "--output-dir", str(copy),
                 "--name", "tiny", "--kts-layer", "best", "--bootstrap", "20"]) == 0
    metrics = json.loads((copy / "metrics" / "tiny.json").read_text())
    assert metrics["kts"]["layer"] == metrics["kts_abstain_as_incorrect"]["layer"] == "best"
    assert metrics["iss"]["n_boot"] == 20


def test_validate_names_missing_and_unknown_ids(tiny_run, tmp_path, capsys):
    root, bank, out = tiny_run
    lines = (out / "generations" / "tiny.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines[3:]]
    rows += [dict(rows[0], query_id="query_unknown1"), dict(rows[0], query_id="query_unknown2")]
    path = tmp_path / "external.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["factual", "validate", "--bank", str(root / "bank.jsonl"), "--generations", str(path)]) == 1
    err = capsys.readouterr().err
    missing = ", ".join(json.loads(line)["query_id"] for line in lines[:3])
    assert f"missing: 3 query ids of the bank with no generation: {missing}" in err
    assert "unknown: 2 query ids that are not in the bank: query_unknown1, query_unknown2" in err
    # score refuses the same file, and writes nothing
    code = main(["factual", "score", "--bank", str(root / "bank.jsonl"), "--generations", str(path),
                 "--output-dir", str(tmp_path / "o")])
    assert code == 1 and not (tmp_path / "o").exists()
    assert main(["factual", "validate", "--bank", str(root / "bank.jsonl"),
                 "--generations", str(out / "generations" / "tiny.jsonl")]) == 0


def test_bank_with_duplicate_ids_is_refused(tiny_run, tmp_path, capsys):
    root, bank, out = tiny_run
    lines = (root / "bank.jsonl").read_text().splitlines()[1:]  # without the header
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(lines + [lines[1]]) + "\n")
    assert main(["factual", "validate", "--bank", str(path), "--generations", str(path)]) == 2
    err = capsys.readouterr().err
    assert "duplicate" in err and json.loads(lines[1])["query_id"] in err


def test_damaged_hidden_states_are_refused(tiny_run, tmp_path, capsys):
    root, bank, out = tiny_run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    args = ["factual", "metrics", "--bank", str(root / "bank.jsonl"), "--output-dir", str(copy), "--name", "tiny"]
    npy = copy / "hidden" / "tiny" / "L001.npy"
    npy.write_bytes(npy.read_bytes()[:-100])
    assert main(args) == 2
    assert "L001.npy is truncated or corrupt" in capsys.readouterr().err
    index_path = copy / "hidden" / "tiny" / "index.json"
    index = json.loads(index_path.read_text())
    index_path.write_text(json.dumps(dict(index, complete=False)))
    assert main(args) == 2
    assert "extraction did not finish: rerun the same command to resume" in capsys.readouterr().err
    assert not (copy / "metrics" / "tiny.json").read_text() == ""  # the earlier result is untouched


def test_scores_of_another_bank_are_refused(tiny_run, tmp_path, capsys):
    root, bank, out = tiny_run
    rows = bank.rows[: len(bank.rows) // 2]
    other = tmp_path / "other.jsonl"
    write_bank(other, [r for r in bank.rows if r["fact_id"] in {x["fact_id"] for x in rows}], {})
    args = ["factual", "metrics", "--bank", str(other), "--output-dir", str(out), "--name", "tiny"]
    assert main(args) == 2
    assert "extracted from bank" in capsys.readouterr().err


def test_missing_data_dir_for_bank(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    code = main(["factual", "bank", "--output", str(tmp_path / "b.jsonl"), "--data-dir", str(tmp_path)])
    assert code == 2 and not (tmp_path / "b.jsonl").exists()
    assert "factual" in capsys.readouterr().err


@pytest.mark.slow
def test_real_smollm2_run(data_dir, tmp_path):
    """The real model on 12 real facts (~45 queries): every step, and hidden states equal to a direct forward."""
    import torch

    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source
    from proctor.factual.prompts import build_prompt

    bank = small_bank(data_dir, tmp_path / "bank.jsonl", facts=12)
    out = tmp_path / "out"
    assert main(["factual", "run", "--bank", str(tmp_path / "bank.jsonl"), "--output-dir", str(out),
                 "--no-progress", "--bootstrap", "50", "--dtype", "float32"]) == 0
    gens = [json.loads(line) for line in (out / "generations" / "smollm2-135m.jsonl").read_text().splitlines()]
    assert all(g["prompt"] == build_prompt(r) for g, r in zip(gens, bank.rows))
    assert {g["finish_reason"] for g in gens} <= {"stop", "length"}
    hidden = load_hidden(out / "hidden" / "smollm2-135m")
    assert hidden.index.layers == list(range(12, 30))
    loaded = load_model(resolve_source("smollm2-135m"), dtype=torch.float32, device=torch.device("cpu"))
    row = bank.main_forward_rows()[-1]
    ids = loaded.tokenizer(build_prompt(row), return_tensors="pt").input_ids
    with torch.inference_mode():
        direct = loaded.model(ids, output_hidden_states=True).hidden_states
    for layer in (12, 29):
        stored = hidden.layers[layer][-1].astype(np.float32)
        expected = direct[layer + 1][0, -1].float().numpy()
        assert np.allclose(stored, expected, rtol=2e-3, atol=2e-2), layer


@pytest.mark.slow  # torchrun: two processes, over 3 s
def test_two_torchrun_ranks_write_what_one_process_writes(tiny_run, tmp_path):
    """Every rank generates and extracts its share, rank 0 writes: the same bytes as one
    process (whose files `tiny_run` made), from a cache of its own."""
    import os
    import subprocess
    import sys

    root, bank, out = tiny_run
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "proctor", "factual", "run", "--bank", str(root / "bank.jsonl"), "--model", str(root / "tiny"),
               "--name", "tiny", "--output-dir", str(tmp_path / "out"), "--no-progress", "--bootstrap", "50"]
    env = dict(os.environ, PROCTOR_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 4  # rank 0 alone reports its four files
    for path in ["generations/tiny.jsonl", "hidden/tiny/L001.npy", "scored/tiny.scored.jsonl", "metrics/tiny.json"]:
        assert (tmp_path / "out" / path).read_bytes() == (out / path).read_bytes(), path
