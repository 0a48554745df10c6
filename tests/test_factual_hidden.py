"""Factual-probe hidden states through the engine: last-token states, resume from the result
cache after a kill, a finished extraction left alone, refusal of damaged outputs, backends
and blocks that cannot serve them, a tampered cache row."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from proctor.backends.hf import HFBackend
from proctor.engine import Engine, ResultCache
from proctor.errors import UserError
from proctor.factual.hidden import extract_hidden, hidden_request, load_hidden, stored_layers
from proctor.factual.prompts import DECODING, build_prompt
from proctor.outputs.hidden_states import INDEX
from proctor.requests import HiddenStates
from test_factual_generate import ScriptedBackend
from tinylm import build_tokenizer

REPO = Path(__file__).resolve().parents[1]
MAX = DECODING.max_prompt_len
LAYER_FILES = ["L002.npy", "L003.npy", "L004.npy", "L005.npy"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def build_six_layer_model(directory: Path) -> Path:
    """tinylm's Llama with 6 blocks, so layers 2..5 are stored (2/5 is exactly the 0.4 boundary)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         initializer_range=0.1, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         pad_token_id=None, tie_word_embeddings=False)
    LlamaForCausalLM(config).eval().save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def make_rows(n: int) -> list[dict]:
    """Rows of varied prompt length, each its own prompt; every fifth is a recognition row
    without hidden states."""
    return [{"query_id": f"query_{i:04d}", "fact_id": f"fact_{i:04d}",
             "condition_family": "recognition" if i % 5 == 4 else ("anchor" if i % 2 else "paraphrase"),
             "query": f"Fact {i}: which planet is closest to the sun?"
                      + " Berlin is the capital of Germany." * (i * 3 % 4),
             "use_for_main_forward": i % 5 != 4} for i in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_six_layer_model(tmp_path_factory.mktemp("tiny6") / "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    return SimpleNamespace(dir=directory, model=model, tokenizer=AutoTokenizer.from_pretrained(str(directory)))


def engine_of(tiny, cache=None, identity="tiny", **options) -> Engine:
    backend = HFBackend(tiny.model, tiny.tokenizer, identity=identity)
    return Engine(backend, cache=cache, progress=False, **({"batch_size": 3} | options))


def extract(engine, rows, out_dir, **kwargs):
    return extract_hidden(rows, engine, out_dir, **({"model_name": "tiny", "bank_version": "bank-1"} | kwargs))


def alone(model, ids: list[int]) -> tuple:
    """hidden_states of one unpadded prompt through the whole causal LM."""
    with torch.inference_mode():
        return model(torch.tensor([ids]), output_hidden_states=True).hidden_states


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_stored_layers_follow_the_seed_rule():
    assert stored_layers(30) == list(range(12, 30))    # SmolLM2-135M
    assert stored_layers(46) == list(range(18, 46))    # the seed's L018 ... L045
    assert stored_layers(6) == [2, 3, 4, 5]
    assert stored_layers(2) == [1] and stored_layers(1) == [0]


def test_a_rows_request_reads_the_prompt_its_generation_reads():
    row = make_rows(1)[0]
    request = hidden_request(row, [2, 5], chat=False)
    assert request == HiddenStates(build_prompt(row), (2, 5), max_prompt_tokens=MAX, dtype="float16",
                                   policy="lm_eval")
    chat = hidden_request(row, [2, 5], chat=True)
    assert chat.context.messages[0].content == build_prompt(row) and chat.policy == "olmes"
    assert chat.key != request.key and chat.max_prompt_tokens == MAX


def check_padded_equals_alone(engine, prompts, layers, atol):
    """float32 states from the engine's left-padded batches against each prompt run alone."""
    tokenizer, model = engine.backend.tokenizer, engine.backend.model
    requests = [HiddenStates(p, tuple(layers), max_prompt_tokens=MAX, dtype="float32", policy="lm_eval")
                for p in prompts]
    results = engine.hidden_states(requests)
    assert engine.stats.batches_run < len(prompts)  # batched: some rows were padded
    for result, prompt in zip(results, prompts):
        assert result.states.shape == (len(layers), model.config.hidden_size)
        assert result.states.dtype == np.float32
        reference = alone(model, tokenizer(prompt)["input_ids"][-MAX:])
        for i, layer in enumerate(layers):
            torch.testing.assert_close(torch.from_numpy(result.states[i]), reference[layer + 1][0, -1],
                                       atol=atol, rtol=1e-4)


def test_left_padded_states_equal_the_prompt_run_alone(tiny, tmp_path):
    rows = make_rows(10)
    rows[0] = {**rows[0], "query": " ".join(f"Paris {i} is the capital." for i in range(80))}  # > MAX tokens
    prompts = [build_prompt(r) for r in rows]
    assert len(tiny.tokenizer(prompts[0])["input_ids"]) > MAX
    check_padded_equals_alone(engine_of(tiny), prompts, [0, 2, 5], atol=1e-4)

    engine = engine_of(tiny)
    index = extract(engine, rows, tmp_path / "h")
    main = [r for r in rows if r["use_for_main_forward"]]
    assert index.query_ids == [r["query_id"] for r in main]
    assert (index.layers, index.num_layers, index.d_model, index.complete) == ([2, 3, 4, 5], 6, 32, True)
    assert index.model_identity == engine.backend.fingerprint and index.compute_dtype == "float32"
    assert engine.truncated  # the long prompt's left truncation was noted
    states = load_hidden(tmp_path / "h")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == [*LAYER_FILES, INDEX]
    assert engine.stats.batches_run == 3  # 8 main-forward rows in batches of 3
    assert json.loads((tmp_path / "h" / INDEX).read_text())["format"] == "proctor-factual-hidden/2"
    for layer, array in states.layers.items():
        assert array.dtype == np.float16 and array.shape == (len(main), 32) and not array.flags.writeable
        for row, r in enumerate(main):
            want = alone(tiny.model, tiny.tokenizer(build_prompt(r))["input_ids"][-MAX:])[layer + 1][0, -1]
            assert np.array_equal(array[row], want.to(torch.float16).numpy()) or \
                np.allclose(array[row], want.numpy(), rtol=1e-3, atol=1e-3)


def test_queries_sharing_a_prompt_share_one_state_row_each(tiny, tmp_path):
    rows = make_rows(4)
    rows.append({**rows[1], "query_id": "query_copy", "fact_id": "fact_copy"})  # rows[1]'s prompt again
    engine = engine_of(tiny)
    index = extract(engine, rows, tmp_path / "h")
    assert index.query_ids == ["query_0000", "query_0001", "query_0002", "query_0003", "query_copy"]
    assert engine.backend.forward_calls == 2  # 4 distinct prompts, batches of 3
    states = load_hidden(tmp_path / "h")
    for array in states.layers.values():
        assert np.array_equal(array[1], array[4]) and not np.array_equal(array[0], array[1])


def test_batches_are_cut_by_batch_size_or_token_budget_to_the_same_states(tiny, tmp_path):
    rows = make_rows(10)
    by_rows = engine_of(tiny, batch_size=4)
    extract(by_rows, rows, tmp_path / "rows")
    assert by_rows.stats.batches_run == 2  # 8 main-forward rows
    by_budget = engine_of(tiny, batch_size="auto")
    extract(by_budget, rows, tmp_path / "auto")
    one = engine_of(tiny, batch_size=1)
    extract(one, rows, tmp_path / "one")
    assert one.stats.batches_run == 8
    for name in LAYER_FILES:
        a, b, c = (np.load(tmp_path / d / name) for d in ("rows", "auto", "one"))
        np.testing.assert_allclose(a.astype(np.float32), c.astype(np.float32), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(b.astype(np.float32), c.astype(np.float32), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_real_smollm2_states_ignore_left_padding():
    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source

    lm = load_model(resolve_source("smollm2-135m"), dtype=torch.float32, device="cpu")
    engine = Engine(HFBackend(lm.model, lm.tokenizer, identity=lm.identity), batch_size=3, progress=False)
    prompts = [build_prompt({"condition_family": "anchor", "query": "Where was Barack Obama born?"}),
               build_prompt({"condition_family": "paraphrase", "query": "Obama's birthplace is"}),
               build_prompt({"condition_family": "reverse", "query": "Who was born in Honolulu in 1961?"})]
    # states reach ~550 in magnitude; padded and alone differ by under 1e-4 (measured 9e-5)
    check_padded_equals_alone(engine, prompts, [12, 20, 29], atol=2e-4)


CHILD = """
import json, os, signal, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from proctor.backends.hf import HFBackend
from proctor.engine import Engine, ResultCache
from proctor.factual.hidden import extract_hidden
model_dir, rows_path, out, cache, kill_at = sys.argv[1:]
backend = HFBackend(AutoModelForCausalLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir),
                    identity="tiny")
real = backend.hidden_states
calls = []
def dying(rows, layers, dtype):
    calls.append(1)
    if len(calls) > int(kill_at):  # the earlier batches' states are in the cache
        os.kill(os.getpid(), signal.SIGKILL)
    return real(rows, layers, dtype)
backend.hidden_states = dying
engine = Engine(backend, batch_size=3, cache=ResultCache(cache), progress=False)
extract_hidden(json.loads(Path(rows_path).read_text()), engine, Path(out), model_name="tiny", bank_version="bank-1")
"""


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_a_killed_extraction_resumes_from_the_cache_to_the_same_bytes(tiny, tmp_path):
    rows = make_rows(20)  # 16 main-forward rows: 6 batches of 3
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    whole = engine_of(tiny)
    extract(whole, rows, tmp_path / "whole")
    assert whole.stats.batches_run == 6

    out, cache = tmp_path / "resumed", tmp_path / "cache.sqlite"
    child = subprocess.run([sys.executable, "-c", CHILD, str(tiny.dir), str(tmp_path / "rows.json"), str(out),
                            str(cache), "2"], cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    left = json.loads((out / INDEX).read_text())  # states go into the files as they come
    assert (left["complete"], left["files"]) == (False, {})
    with pytest.raises(UserError, match="extraction did not finish: rerun the same command to resume"):
        load_hidden(out)

    resumed = engine_of(tiny, ResultCache(cache))
    index = extract(resumed, rows, out)
    assert resumed.stats.batches_run == 4  # the 2 batches done before the kill came from the cache
    assert files(out) == files(tmp_path / "whole")
    assert index.complete and set(index.files) == set(LAYER_FILES)
    assert "batch_size" not in json.loads((out / INDEX).read_text())

    again = engine_of(tiny, ResultCache(cache))  # all 6 batches cached: no model work
    extract(again, rows, tmp_path / "from-cache")
    assert again.stats.batches_run == 0 and again.backend.forward_calls == 0
    assert files(tmp_path / "from-cache") == files(tmp_path / "whole")


def test_an_unfinished_extraction_is_rewritten_by_the_same_one_and_refused_to_another(tiny, tmp_path, monkeypatch):
    import proctor.outputs.hidden_states as writer

    rows = make_rows(10)
    cache = tmp_path / "cache.sqlite"
    extract(engine_of(tiny), rows, tmp_path / "whole")

    out = tmp_path / "h"
    real = writer.file_sha256

    def killed(path):
        raise RuntimeError("killed")  # after the arrays are filled, before their checksums are recorded

    monkeypatch.setattr(writer, "file_sha256", killed)
    with pytest.raises(RuntimeError, match="killed"):
        extract(engine_of(tiny, ResultCache(cache)), rows, out)
    monkeypatch.setattr(writer, "file_sha256", real)
    left = json.loads((out / INDEX).read_text())
    assert (left["complete"], left["files"]) == (False, {})
    with pytest.raises(UserError, match="extraction did not finish: rerun the same command to resume"):
        load_hidden(out)
    with pytest.raises(UserError, match="an unfinished extraction with a different bank version.*fresh output "
                                        "directory or delete"):
        extract(engine_of(tiny), rows, out, bank_version="bank-2")
    with pytest.raises(UserError, match="an unfinished extraction with a different model identity"):
        extract(engine_of(tiny, identity="other"), rows, out)

    rerun = engine_of(tiny, ResultCache(cache))
    index = extract(rerun, rows, out)
    assert rerun.stats.batches_run == 0  # every state from the cache
    assert index.complete and files(out) == files(tmp_path / "whole")


@pytest.fixture
def finished(tiny, tmp_path):
    extract(engine_of(tiny), make_rows(6), tmp_path / "h")
    return tmp_path / "h"


def test_a_finished_extraction_is_not_redone_and_not_overwritten(tiny, finished):
    before = {p.name: p.stat().st_mtime_ns for p in finished.iterdir()}
    engine = engine_of(tiny)
    assert extract(engine, make_rows(6), finished).complete
    assert engine.stats.batches_run == 0 and engine.backend.forward_calls == 0
    assert {p.name: p.stat().st_mtime_ns for p in finished.iterdir()} == before
    with pytest.raises(UserError, match="a finished extraction with a different model identity"):
        extract(engine_of(tiny, identity="other"), make_rows(6), finished)
    with pytest.raises(UserError, match="different query ids"):
        extract(engine_of(tiny), make_rows(7), finished)
    with pytest.raises(UserError, match="different bank version"):
        extract(engine_of(tiny), make_rows(6), finished, bank_version="bank-2")
    assert {p.name: p.stat().st_mtime_ns for p in finished.iterdir()} == before


def test_a_rank_that_does_not_write_never_reads_the_directory(tiny, tmp_path):
    """Under torchrun rank 0 alone reads and writes the files: another rank that looked would
    race rank 0's writes (an index mid-rename read as files without an index)."""
    from proctor.engine.distributed import DistributedContext

    class RankZeroFoundNothing(DistributedContext):
        def main_says(self, value):
            return False

    busy = tmp_path / "h"
    busy.mkdir()
    (busy / ".index.json.tmp").write_text("{")  # rank 0's index, being written
    engine = Engine(HFBackend(tiny.model, tiny.tokenizer, identity="tiny"), progress=False,
                    distributed=RankZeroFoundNothing())
    extract(engine, make_rows(6), busy, write=False)
    assert engine.stats.batches_run > 0 and [p.name for p in busy.iterdir()] == [".index.json.tmp"]


def test_bad_banks_and_directories_are_refused_before_any_work(tiny, tmp_path):
    engine = engine_of(tiny)
    rows = make_rows(6)
    with pytest.raises(UserError, match="no use_for_main_forward rows"):
        extract(engine, [r for r in rows if not r["use_for_main_forward"]], tmp_path / "none")
    with pytest.raises(UserError, match="query_0001 occurs more than once"):
        extract(engine, rows + rows[1:2], tmp_path / "dup")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds files but no hidden-state index"):
        extract(engine, rows, foreign)
    assert engine.backend.forward_calls == 0 and files(foreign) == {"notes.txt": b"mine"}
    assert not (tmp_path / "none").exists() and not (tmp_path / "dup").exists()


def test_damaged_outputs_are_refused_naming_the_file(finished):
    with pytest.raises(UserError, match="no index.json in"):
        load_hidden(finished.parent / "nothing-here")

    layer = finished / "L003.npy"
    data = layer.read_bytes()
    layer.write_bytes(data[:-7])
    with pytest.raises(UserError, match=r"L003\.npy is truncated or corrupt"):
        load_hidden(finished)
    layer.write_bytes(b"not an npy file at all")
    with pytest.raises(UserError, match=r"L003\.npy is truncated or corrupt"):
        load_hidden(finished)

    np.save(layer, np.zeros((5, 32), dtype=np.float16))
    with pytest.raises(UserError, match=r"L003\.npy does not match its checksum"):
        load_hidden(finished)
    np.save(layer, np.zeros((4, 32), dtype=np.float32))
    with pytest.raises(UserError, match=r"L003\.npy holds float32 \(4, 32\), expected float16 \(5, 32\)"):
        load_hidden(finished)

    flipped = bytearray(data)
    flipped[-1] ^= 0x40
    layer.write_bytes(bytes(flipped))
    with pytest.raises(UserError, match=r"L003\.npy does not match its checksum"):
        load_hidden(finished)
    assert load_hidden(finished, verify_checksums=False).layers[3].shape == (5, 32)

    layer.write_bytes(data)
    assert load_hidden(finished).index.complete
    os.remove(layer)
    with pytest.raises(UserError, match=r"L003\.npy is missing"):
        load_hidden(finished)
    layer.write_bytes(data)

    index = json.loads((finished / INDEX).read_text())
    # an index of proctor's earlier layout (/1, with its batch fields) still reads
    (finished / INDEX).write_text(json.dumps(index | {"format": "proctor-factual-hidden/1", "batch_size": 3,
                                                      "batches_done": 2}))
    assert load_hidden(finished).index.layers == [2, 3, 4, 5]
    (finished / INDEX).write_text(json.dumps(index | {"complete": False}))
    with pytest.raises(UserError, match="extraction did not finish: rerun the same command to resume"):
        load_hidden(finished)
    (finished / INDEX).write_text(json.dumps(index | {"format": "something-else/9"}))
    with pytest.raises(UserError, match="index.json is not a proctor-factual-hidden/2 index"):
        load_hidden(finished)
    (finished / INDEX).write_text("{")
    with pytest.raises(UserError, match="index.json is not a proctor-factual-hidden/2 index"):
        load_hidden(finished)


def test_a_backend_without_hidden_states_is_one_user_error(tiny, tmp_path):
    engine = Engine(ScriptedBackend(tiny.tokenizer, {}), progress=False)  # tokens only: no blocks here
    with pytest.raises(UserError, match="the ScriptedBackend backend cannot return hidden states.*--backend hf"):
        extract(engine, make_rows(6), tmp_path / "h")
    assert not (tmp_path / "h").exists()
    with pytest.raises(UserError, match="cannot return hidden states"):
        engine.hidden_states([HiddenStates("Paris is", (0,))])


def test_a_block_beyond_the_models_is_a_user_error(tiny):
    engine = engine_of(tiny)
    with pytest.raises(UserError, match=r"reads block 6, but the model has 6 blocks \(0-5\)"):
        engine.hidden_states([HiddenStates("Paris is", (2, 5)), HiddenStates("Paris is", (6,))])
    assert engine.backend.forward_calls == 0
    with pytest.raises(ValueError, match="block indices"):
        HiddenStates("Paris is", (-1,))


def test_a_tampered_cache_row_is_dropped_and_recomputed(tiny, tmp_path):
    rows = make_rows(10)
    path = tmp_path / "cache.sqlite"
    first = engine_of(tiny, ResultCache(path))
    extract(first, rows, tmp_path / "first")
    with sqlite3.connect(path) as db:
        (stored,) = db.execute("SELECT COUNT(*) FROM hidden").fetchone()
        key, data = db.execute("SELECT key, data FROM hidden ORDER BY key LIMIT 1").fetchone()
        damaged = bytearray(data)
        damaged[0] ^= 0x01
        db.execute("UPDATE hidden SET data = ? WHERE key = ?", (bytes(damaged), key))
    db.close()
    assert stored == 8  # one row per main-forward query

    cache = ResultCache(path)
    again = engine_of(tiny, cache)
    extract(again, rows, tmp_path / "again")
    assert cache.tampered == 1
    assert again.stats.batches_run == 1  # the batch holding the damaged row, only
    assert files(tmp_path / "again") == files(tmp_path / "first")

    third = ResultCache(path)  # the recomputed row was stored again, intact
    clean = engine_of(tiny, third)
    extract(clean, rows, tmp_path / "third")
    assert third.tampered == 0 and clean.stats.batches_run == 0
    assert files(tmp_path / "third") == files(tmp_path / "first")
