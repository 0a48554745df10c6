"""Factual-probe hidden states: last-token states, resume after a kill, refusal of damaged outputs."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from proctor.errors import UserError
from proctor.factual.hidden import extract_hidden, last_token_states, load_hidden, stored_layers
from proctor.factual.prompts import DECODING, build_prompt
from tinylm import build_tokenizer

REPO = Path(__file__).resolve().parents[1]
MAX = DECODING.max_prompt_len


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
    """Rows of varied prompt length; every fifth is a recognition row without hidden states."""
    return [{"query_id": f"query_{i:04d}", "fact_id": f"fact_{i:04d}",
             "condition_family": "recognition" if i % 5 == 4 else ("anchor" if i % 2 else "paraphrase"),
             "query": "Which planet is closest to the sun?" + " Berlin is the capital of Germany." * (i * 3 % 4),
             "use_for_main_forward": i % 5 != 4} for i in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_six_layer_model(tmp_path_factory.mktemp("tiny6") / "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    return SimpleNamespace(dir=directory, model=model, tokenizer=AutoTokenizer.from_pretrained(str(directory)))


def extract(tiny, rows, out_dir, **kwargs):
    args = dict(model_name="tiny", model_identity="tiny-id", bank_version="bank-1", batch_size=3, progress=False)
    return extract_hidden(rows, tiny.model, tiny.tokenizer, out_dir, **(args | kwargs))


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


def check_padded_equals_alone(model, tokenizer, prompts, layers, atol):
    with torch.inference_mode():
        batched = last_token_states(model, tokenizer, prompts, layers)
    for row, prompt in enumerate(prompts):
        reference = alone(model, tokenizer(prompt)["input_ids"][-MAX:])
        for layer in layers:
            torch.testing.assert_close(batched[layer][row], reference[layer + 1][0, -1], atol=atol, rtol=1e-4)


def test_left_padded_states_equal_the_prompt_run_alone(tiny, tmp_path):
    rows = make_rows(10)
    rows[0] = {**rows[0], "query": " ".join(f"Paris {i} is the capital." for i in range(80))}  # > MAX tokens
    prompts = [build_prompt(r) for r in rows]
    assert len(tiny.tokenizer(prompts[0])["input_ids"]) > MAX
    check_padded_equals_alone(tiny.model, tiny.tokenizer, prompts, [2, 5], atol=1e-4)

    index = extract(tiny, rows, tmp_path / "h")
    main = [r for r in rows if r["use_for_main_forward"]]
    assert index.query_ids == [r["query_id"] for r in main]
    assert (index.layers, index.num_layers, index.d_model, index.complete) == ([2, 3, 4, 5], 6, 32, True)
    states = load_hidden(tmp_path / "h")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["L002.npy", "L003.npy", "L004.npy", "L005.npy",
                                                                  "index.json"]
    for layer, array in states.layers.items():
        assert array.dtype == np.float16 and array.shape == (len(main), 32) and not array.flags.writeable
        for row, r in enumerate(main):
            want = alone(tiny.model, tiny.tokenizer(build_prompt(r))["input_ids"][-MAX:])[layer + 1][0, -1]
            assert np.array_equal(array[row], want.to(torch.float16).numpy()) or \
                np.allclose(array[row], want.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_real_smollm2_states_ignore_left_padding():
    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source

    lm = load_model(resolve_source("smollm2-135m"), dtype=torch.float32, device="cpu")
    prompts = [build_prompt({"condition_family": "anchor", "query": "Where was Barack Obama born?"}),
               build_prompt({"condition_family": "paraphrase", "query": "Obama's birthplace is"}),
               build_prompt({"condition_family": "reverse", "query": "Who was born in Honolulu in 1961?"})]
    # states reach ~550 in magnitude; padded and alone differ by under 1e-4 (measured 9e-5)
    check_padded_equals_alone(lm.model, lm.tokenizer, prompts, [12, 20, 29], atol=2e-4)


CHILD = """
import json, os, signal, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
import proctor.factual.hidden as hidden
model_dir, rows_path, out, kill_at = sys.argv[1:]
writes = []
real = hidden.atomic_write_text
def dying(path, text):
    writes.append(1)
    if len(writes) > int(kill_at):  # this batch's rows are in the arrays, its batches_done is not
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, text)
hidden.atomic_write_text = dying
hidden.CHECKPOINT_SECONDS = 0  # an index write after every batch
hidden.extract_hidden(json.loads(Path(rows_path).read_text()), AutoModelForCausalLM.from_pretrained(model_dir).eval(),
                      AutoTokenizer.from_pretrained(model_dir), Path(out), model_name="tiny",
                      model_identity="tiny-id", bank_version="bank-1", batch_size=3, progress=False)
"""


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_a_killed_extraction_resumes_to_the_same_bytes(tiny, tmp_path):
    rows = make_rows(20)  # 16 main-forward rows: 6 batches of 3
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    extract(tiny, rows, tmp_path / "whole")

    out = tmp_path / "resumed"
    child = subprocess.run([sys.executable, "-c", CHILD, str(tiny.dir), str(tmp_path / "rows.json"), str(out), "3"],
                           cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    left = json.loads((out / "index.json").read_text())
    assert (left["batches_done"], left["complete"], left["files"]) == (2, False, {})
    with pytest.raises(UserError, match="extraction did not finish: rerun the same command to resume"):
        load_hidden(out)
    with pytest.raises(UserError, match="different bank version.*fresh output directory or delete"):
        extract(tiny, rows, out, bank_version="bank-2")
    with pytest.raises(UserError, match="different batch size"):
        extract(tiny, rows, out, batch_size=4)

    extract(tiny, rows, out)
    assert files(out) == files(tmp_path / "whole")
    index = json.loads((out / "index.json").read_text())
    assert index["complete"] and index["batches_done"] == 6 and set(index["files"]) == {
        "L002.npy", "L003.npy", "L004.npy", "L005.npy"}


@pytest.fixture
def finished(tiny, tmp_path):
    extract(tiny, make_rows(6), tmp_path / "h")
    return tmp_path / "h"


def test_a_finished_extraction_is_not_redone_and_not_overwritten(tiny, finished):
    before = {p.name: p.stat().st_mtime_ns for p in finished.iterdir()}
    assert extract(tiny, make_rows(6), finished).complete
    assert {p.name: p.stat().st_mtime_ns for p in finished.iterdir()} == before
    with pytest.raises(UserError, match="a finished extraction with a different model identity"):
        extract(tiny, make_rows(6), finished, model_identity="other")
    with pytest.raises(UserError, match="different query ids"):
        extract(tiny, make_rows(7), finished)


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

    index = json.loads((finished / "index.json").read_text())
    (finished / "index.json").write_text(json.dumps(index | {"complete": False}))
    with pytest.raises(UserError, match="extraction did not finish: rerun the same command to resume"):
        load_hidden(finished)
    (finished / "index.json").write_text("{")
    with pytest.raises(UserError, match="index.json is not a proctor-factual-hidden/1 index"):
        load_hidden(finished)
