"""The vLLM backend's request/response translation, without vllm and without a GPU.

Stand-ins follow vLLM 0.11-0.12 (V1 engine) shapes: `vllm/logprobs.py` Logprob(logprob,
rank, decoded_token) in dicts keyed by token id, the first prompt position None (or {}
in FlatLogprobs); `vllm/outputs.py` RequestOutput(prompt_logprobs, outputs) and
CompletionOutput(index, text, token_ids, cumulative_logprob, logprobs, finish_reason,
stop_reason). A toy LM (8 tokens, 'a'..'g' and a special EOS) answers like `vllm.LLM`
does, so the backend also runs end to end under the real Engine through a fake `vllm`
module.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from proctor.backends import vllm_backend as vb
from proctor.backends.decoding import StopWatch
from proctor.engine import Engine
from proctor.engine.gen_plan import GenRow, sample_seed
from proctor.engine.plan import Readout, Row
from proctor.errors import UserError
from proctor.requests import Generate, Loglikelihood, LoglikelihoodResult

REPO = Path(__file__).resolve().parents[1]
VOCAB = 8
EOS = 7


# ---------------------------------------------------------------- vLLM-shaped stand-ins

@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    cumulative_logprob: Optional[float]
    logprobs: Optional[list]
    finish_reason: Optional[str] = None
    stop_reason: Any = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list
    prompt_logprobs: Optional[list]
    outputs: list
    finished: bool = True
    num_cached_tokens: int = 0


class ToyTokenizer:
    """Token i is the letter chr(97 + i); token 7 is the special "<eos>"."""

    bos_token_id = None
    eos_token_id = EOS
    is_fast = False

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) - 97 for c in text]

    def decode(self, tokens, skip_special_tokens: bool = False) -> str:
        return "".join("" if t == EOS and skip_special_tokens else "<eos>" if t == EOS else chr(97 + t) for t in tokens)


def toy_logprobs(context: list[int]) -> list[float]:
    """log p(next | context) of the toy LM."""
    logits = [3 * math.sin(1.3 * j + 0.7 * context[-1] + 0.1 * len(context)) - (1.5 if j == EOS else 0)
              for j in range(VOCAB)]
    top = max(logits)
    norm = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - norm for x in logits]


def top_entries(lps: list[float], k: int, actual: Optional[int]) -> dict[int, Logprob]:
    """vLLM's dict for one position: the actual token with its rank, then the top k."""
    order = sorted(range(VOCAB), key=lambda j: -lps[j])
    out = {}
    if actual is not None:
        out[actual] = Logprob(lps[actual], order.index(actual) + 1)
    for r, j in enumerate(order[:k], start=1):
        out[j] = Logprob(lps[j], r)
    return out


class FakeSamplingParams:
    def __init__(self, **kwargs: Any):
        self.__dict__.update(kwargs)


BLOCK = 2
GARBAGE = {0: Logprob(123.0, 1)}   # what vLLM leaves at prompt positions served from its cache


class FakeLLM:
    """`vllm.LLM.generate` over the toy LM: prompt log-probs, greedy/seeded sampling, stops,
    and a prefix cache of BLOCK-token blocks that, as vLLM's, leaves no log-probs where it hit."""

    def __init__(self):
        self.seen: list[tuple[list[int], dict]] = []
        self.cached: set[tuple[int, ...]] = set()

    def _cache_hit(self, prompt: list[int], sp: dict) -> int:
        hit = 0
        # vLLM's default: requests for prompt log-probs skip the cache
        if not sp.get("skip_reading_prefix_cache", sp.get("prompt_logprobs") is not None):
            while hit + BLOCK <= len(prompt) - 1 and tuple(prompt[:hit + BLOCK]) in self.cached:
                hit += BLOCK
        self.cached.update(tuple(prompt[:k]) for k in range(BLOCK, len(prompt) + 1, BLOCK))
        return hit

    def generate(self, prompts, sampling_params, use_tqdm=True):
        return [self._one(p["prompt_token_ids"], sp.__dict__) for p, sp in zip(prompts, sampling_params)]

    def _one(self, prompt: list[int], sp: dict) -> RequestOutput:
        self.seen.append((list(prompt), dict(sp)))
        cached = self._cache_hit(prompt, sp)
        prompt_lps = None
        if sp.get("prompt_logprobs") is not None:
            prompt_lps = [None] + [GARBAGE if p <= cached else
                                   top_entries(toy_logprobs(prompt[:p]), sp["prompt_logprobs"], prompt[p])
                                   for p in range(1, len(prompt))]
        rng = random.Random(sp.get("seed"))
        tokens, lps_out, reason, stop_reason = [], [], "length", None
        tok = ToyTokenizer()
        while len(tokens) < sp["max_tokens"]:
            lps = toy_logprobs(prompt + tokens)
            if sp.get("temperature", 1.0) == 0:
                t = max(range(VOCAB), key=lambda j: lps[j])
            else:
                t = rng.choices(range(VOCAB), weights=[math.exp(x / sp["temperature"]) for x in lps])[0]
            tokens.append(t)
            if sp.get("logprobs") is not None:
                lps_out.append(top_entries(lps, sp["logprobs"], t))
            if t in sp.get("stop_token_ids", ()):
                reason, stop_reason = "stop", t
                break
            text = tok.decode(tokens, skip_special_tokens=sp.get("skip_special_tokens", True))
            hit = [s for s in sp.get("stop", ()) if s in text]
            if hit:
                reason, stop_reason = "stop", hit[0]
                break
        completion = CompletionOutput(0, tok.decode(tokens), tokens, None,
                                      lps_out if sp.get("logprobs") is not None else None, reason, stop_reason)
        return RequestOutput("0", None, list(prompt), prompt_lps, [completion], num_cached_tokens=cached)


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams
    module.TokensPrompt = lambda **kw: dict(kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def backend(llm=None, *, max_length: int = 64, vllm_for_mc: bool = False) -> vb.VLLMBackend:
    return vb.VLLMBackend(llm or FakeLLM(), ToyTokenizer(), identity="toy", max_length=max_length,
                          eos_ids=frozenset({EOS}), settings=vb.VLLMSettings("bfloat16", vllm_version="0.11.0"),
                          vllm_for_mc=vllm_for_mc)


def exact(context: list[int], continuation: list[int]) -> float:
    return sum(toy_logprobs(context + continuation[:i])[t] for i, t in enumerate(continuation))


# ---------------------------------------------------------------- requests

def test_readout_prompt_appends_the_last_continuation_token():
    row = Row((1, 2, 3, 4), (Readout(2, (4, 5)),))   # the row stops before the last target
    assert vb.readout_prompt(row, row.readouts[0]) == (1, 2, 3, 4, 5)
    shared = Row((1, 2, 3), (Readout(2, (0,)), Readout(2, (1,))))
    assert [vb.readout_prompt(shared, r) for r in shared.readouts] == [(1, 2, 3, 0), (1, 2, 3, 1)]


def test_readout_prompt_rejects_a_row_that_is_not_the_continuation():
    with pytest.raises(ValueError, match="not the readout's continuation"):
        vb.readout_prompt(Row((1, 2, 3, 4), (Readout(2, (6, 5)),)), Readout(2, (6, 5)))


def test_is_mc_row():
    assert vb.is_mc_row(Row((1, 2, 3), (Readout(2, (0,)), Readout(2, (1,)))))
    assert not vb.is_mc_row(Row((1, 2, 3, 4), (Readout(2, (4, 5)),)))          # multi-token
    assert not vb.is_mc_row(Row((1, 2, 3), (Readout(1, (3,)),)))               # not at the row's end
    assert not vb.is_mc_row(Row((1, 2, 3), ()))


def test_plan_scoring_params_and_shared_prompts():
    rows = [Row((1, 2, 3), (Readout(2, (0,)), Readout(2, (1,)))), Row((1, 2, 3), (Readout(2, (1,)),))]
    plan = vb.plan_scoring(rows, 64, vllm_for_mc=False)
    assert [p.token_ids for p in plan.prompts] == [(1, 2, 3, 0), (1, 2, 3, 1)]  # the repeated prompt runs once
    assert plan.sources == ((0, 1), (1,)) and plan.fast == (False, False)
    assert plan.prompts[0].sampling == {"prompt_logprobs": 1, "max_tokens": 1, "temperature": 0.0,
                                        "detokenize": False, "skip_reading_prefix_cache": False}
    assert plan.cacheable == (2, 2)   # log-probs are read from position 2 on
    whole = vb.plan_scoring(rows, 64, vllm_for_mc=False, reuse_cache=False)
    assert "skip_reading_prefix_cache" not in whole.prompts[0].sampling   # vLLM's default: skip it
    fast = vb.plan_scoring(rows, 64, vllm_for_mc=True)
    assert [p.token_ids for p in fast.prompts] == [(1, 2, 3)] and fast.sources == ((0, 0), (0,))
    assert fast.prompts[0].sampling == {"logprobs": 20, "max_tokens": 1, "temperature": 0.0, "detokenize": False}


def test_mc_prompt_keeps_max_length_minus_one_tokens_as_olmes():
    assert vb.mc_prompt(Row((1, 2, 3, 4), (Readout(3, (0,)),)), max_length=4) == (2, 3, 4)


def test_sample_prompts_one_request_per_seed():
    row = GenRow((1, 2), 5, ("\n\n", ""), True, 0.6, 0.9, (11, 22, 33))
    prompts = vb.sample_prompts(row, frozenset({7, 3}))
    assert [p.sampling["seed"] for p in prompts] == [11, 22, 33]
    first = prompts[0].sampling
    assert first["n"] == 1 and first["temperature"] == 0.6 and first["top_p"] == 0.9 and first["max_tokens"] == 5
    assert first["stop"] == ["\n\n"] and first["stop_token_ids"] == [3, 7] and first["skip_special_tokens"] is False
    greedy = vb.sample_prompts(GenRow((1, 2), 5, (), False, 0.0, 1.0, (11,)), frozenset({7}))
    assert len(greedy) == 1 and greedy[0].sampling["temperature"] == 0.0 and "seed" not in greedy[0].sampling


# ---------------------------------------------------------------- responses

def test_readout_result_sums_the_continuation_positions():
    prompt_lps = [None, {2: Logprob(-9.0, 5), 0: Logprob(-0.1, 1)},
                  {3: Logprob(-0.5, 1)}, {4: Logprob(-2.0, 3), 1: Logprob(-0.2, 1)}]
    # readout starts at 1: tokens 3 and 4 at prompt positions 2 and 3
    result = vb.readout_result(prompt_lps, (1, 2, 3, 4), Readout(1, (3, 4)))
    assert result == LoglikelihoodResult(-2.5, 2, False)
    assert vb.readout_result(prompt_lps, (1, 2, 3, 4), Readout(1, (3,))) == LoglikelihoodResult(-0.5, 1, True)


def test_readout_result_reads_flat_logprobs_and_bare_floats():
    # FlatLogprobs answers {} at position 0; very old vLLM gave floats instead of Logprob
    assert vb.readout_result([{}, {5: -1.25}], (0, 5), Readout(0, (5,))) == LoglikelihoodResult(-1.25, 1, True)


def test_readout_result_without_the_token_is_an_error():
    with pytest.raises(ValueError, match="no log-prob for prompt token 5 at position 1"):
        vb.readout_result([None, {6: Logprob(-0.1, 1)}], (0, 5), Readout(0, (5,)))
    with pytest.raises(ValueError, match="prompt log-prob positions"):
        vb.readout_result([None], (0, 5), Readout(0, (5,)))


def test_mc_result_minus_999_outside_the_top_k():
    top = {3: Logprob(-0.3, 1), 4: Logprob(-1.4, 2)}
    assert vb.mc_result(top, 3) == LoglikelihoodResult(-0.3, 1, True)
    assert vb.mc_result(top, 4) == LoglikelihoodResult(-1.4, 1, False)
    assert vb.mc_result(top, 5) == LoglikelihoodResult(-999.0, 1, False)
    assert vb.NOT_IN_TOP_K == -999


@pytest.mark.parametrize("reason, stop_reason, expected", [
    ("length", None, "length"), ("stop", "\n\n", "stop"), ("stop", None, "eos"), ("stop", 7, "eos"),
])
def test_finish_reasons(reason, stop_reason, expected):
    assert vb.finish_reason(CompletionOutput(0, "", [1], None, None, reason, stop_reason)) == expected


def test_an_aborted_generation_is_an_error():
    with pytest.raises(RuntimeError, match="abort"):
        vb.finish_reason(CompletionOutput(0, "", [1], None, None, "abort"))


def test_read_generation_cuts_at_the_stop_and_drops_eos():
    watch = StopWatch(ToyTokenizer(), ("dc",), frozenset({EOS}), 10)
    cut = vb.read_generation(CompletionOutput(0, "ab", [0, 1, 3, 2], None, None, "stop", "dc"), watch)
    assert (cut.text, cut.num_tokens, cut.finish_reason) == ("ab", 4, "stop")
    ended = vb.read_generation(CompletionOutput(0, "ab", [0, 1, EOS], None, None, "stop", None), watch)
    assert (ended.text, ended.num_tokens, ended.finish_reason) == ("ab", 3, "eos")


# ---------------------------------------------------------------- the backend on a fake vLLM

def test_score_rows_matches_the_toy_model(fake_vllm):
    rows = [Row((1, 2, 3), (Readout(2, (0,)), Readout(2, (4,)))), Row((1, 2, 3, 4), (Readout(1, (3, 4, 5)),))]
    results = backend().score(rows)
    assert results[0][0].sum_logits == pytest.approx(exact([1, 2, 3], [0]))
    assert results[0][1].sum_logits == pytest.approx(exact([1, 2, 3], [4]))
    assert results[1][0].sum_logits == pytest.approx(exact([1, 2], [3, 4, 5]))
    greedy = max(range(VOCAB), key=lambda j: toy_logprobs([1, 2, 3])[j])
    assert backend().score([Row((1, 2, 3), (Readout(2, (greedy,)),))])[0][0].is_greedy


def test_prefix_cache_hits_are_used_and_hits_past_a_readout_run_again(fake_vllm):
    context = [1, 2, 3, 4, 5]
    # the first two choices share their first token: once [..., 5, 0] is cached (a block
    # boundary at 6 tokens), the second's hit covers the position its readout starts at; the
    # third reads 4 cached tokens, short of its start
    rows = [Row(tuple(context), (Readout(4, (0, 2)), Readout(4, (0, 3)), Readout(4, (4,))))]
    b = backend()
    results = b.score(rows)
    for result, cont in zip(results[0], ([0, 2], [0, 3], [4])):
        assert result.sum_logits == pytest.approx(exact(context, cont))
    stats = b.stats
    assert stats.cached_prompt_tokens == 6 + 4 and stats.cache_reruns == 1
    reran = [sp for _, sp in b.llm.seen if "skip_reading_prefix_cache" not in sp]
    assert len(reran) == 1
    cold = backend()
    cold.reuse_prefix_cache = False
    assert cold.score(rows) == results and cold.stats.cached_prompt_tokens == 0


def test_engine_loglikelihood_end_to_end_with_truncation(fake_vllm):
    requests = [Loglikelihood("abcabc", "d"), Loglikelihood("abcabc", "e"), Loglikelihood("bca", "dea")]
    results = Engine(backend(max_length=4), progress=False).run(requests)
    # left-truncated to 4 inputs: (ctx + cont)[-5:][:-1]
    assert results[0].sum_logits == pytest.approx(exact([2, 0, 1, 2], [3]))
    assert results[1].sum_logits == pytest.approx(exact([2, 0, 1, 2], [4]))
    assert results[2].sum_logits == pytest.approx(exact([2, 0], [3, 4, 0]))
    assert [r.num_tokens for r in results] == [1, 1, 3]


def test_fast_path_agrees_inside_the_top_k_and_gives_minus_999_outside(fake_vllm, monkeypatch):
    letters = [Loglikelihood("abcab", c) for c in "abcdefg"]
    exact_results = Engine(backend(), progress=False).run(letters)
    fast_backend = backend(vllm_for_mc=True)
    fast = Engine(fast_backend, progress=False).run(letters)
    assert [f.sum_logits for f in fast] == pytest.approx([e.sum_logits for e in exact_results])
    assert [f.is_greedy for f in fast] == [e.is_greedy for e in exact_results]
    assert fast_backend.llm.seen[0][1]["logprobs"] == 20 and len(fast_backend.llm.seen) == 1

    monkeypatch.setattr(vb, "MC_TOP_K", 2)
    narrow = backend(vllm_for_mc=True)
    scores = [r.sum_logits for r in Engine(narrow, progress=False).run(letters)]
    ranked = sorted(range(7), key=lambda i: -exact_results[i].sum_logits)
    assert [scores[i] for i in ranked[:2]] == pytest.approx([exact_results[i].sum_logits for i in ranked[:2]])
    assert all(scores[i] == -999 for i in ranked[2:])
    record = narrow.config_record()
    assert record["vllm_for_mc"] is True
    stats = record["vllm_stats"]
    assert (stats["mc_rows"], stats["mc_readouts"], stats["mc_outside_top_k"]) == (1, 7, 5)


def test_fast_path_leaves_multi_token_rows_exact(fake_vllm):
    results = Engine(backend(vllm_for_mc=True), progress=False).run([Loglikelihood("abc", "de")])
    assert results[0].sum_logits == pytest.approx(exact([0, 1, 2], [3, 4]))


def test_fingerprint_and_record_name_the_fast_path():
    off, on = backend(), backend(vllm_for_mc=True)
    assert off.fingerprint != on.fingerprint and "vllm_for_mc=top20" in on.fingerprint
    assert "backend=vllm" in off.fingerprint and "vllm_for_mc=exact" in off.fingerprint
    assert off.config_record()["vllm_for_mc"] is False and off.config_record()["device"] == "cuda"
    assert off.with_vllm_for_mc(True).fingerprint == on.fingerprint


def test_generation_samples_follow_their_own_seeds(fake_vllm):
    b = backend()
    done: list[int] = []
    rows = [GenRow((0, 1), 6, ("fa",), True, 0.8, 1.0, (5, 6, 7)), GenRow((2,), 4, (), False, 0.0, 1.0, (1,))]
    out = b.generate(rows, on_done=lambda i, s: done.append(i))
    assert done == [0, 1] and [len(s) for s in out] == [3, 1]
    alone = b.generate([GenRow((0, 1), 6, ("fa",), True, 0.8, 1.0, (6,))])
    assert alone[0][0] == out[0][1]                      # a sample depends on its seed only
    sent = [sp for _, sp in b.llm.seen]
    assert [sp.get("seed") for sp in sent[:4]] == [5, 6, 7, None]
    for g in (*out[0], *out[1]):
        assert g.finish_reason in ("stop", "eos", "length") and "fa" not in g.text and "<eos>" not in g.text


def test_engine_generation_uses_the_per_sample_seeds(fake_vllm):
    b = backend()
    request = Generate("abc", max_gen_toks=5, do_sample=True, temperature=0.7, top_p=1.0, repeats=3)
    result = Engine(b, progress=False, seed=99).generate([request])[0]
    assert len(result.samples) == 3
    assert [sp["seed"] for _, sp in b.llm.seen] == [sample_seed(99, request.key, i) for i in range(3)]


# ---------------------------------------------------------------- loading without vllm / a GPU

def test_missing_vllm_is_a_user_error_with_the_install_hint(monkeypatch):
    monkeypatch.setattr(vb.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'proctor\[vllm\]'"):
        vb.load_vllm_backend("smollm2-135m")


def fake_platform(monkeypatch, *, cuda: bool, cpu: bool) -> None:
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cuda=lambda: cuda, is_cpu=lambda: cpu)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(vb.importlib.util, "find_spec", lambda name: object())


def test_a_vllm_build_without_its_device_is_a_user_error(monkeypatch):
    fake_platform(monkeypatch, cuda=False, cpu=False)
    with pytest.raises(UserError, match="no device to run on here.*--vllm-cpu"):
        vb.vllm_platform()
    fake_platform(monkeypatch, cuda=False, cpu=True)
    assert vb.vllm_platform()[1] == "cpu"
    with pytest.raises(UserError, match="--device cuda does not match this vLLM build, which runs on cpu"):
        vb.load_vllm_backend("smollm2-135m", device="cuda")


def test_a_torchvision_for_another_torch_is_named_with_its_fix(monkeypatch):
    monkeypatch.setattr(vb.importlib.util, "find_spec", lambda name: object())
    monkeypatch.delitem(sys.modules, "vllm", raising=False)

    def broken(name, *args, **kwargs):
        if name == "vllm":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real_import(name, *args, **kwargs)

    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.raises(UserError, match="pip uninstall -y torchvision torchaudio torchcodec") as raised:
        vb.vllm_platform()
    assert "\n" not in str(raised.value)


def test_cpu_kv_cache_is_sized_and_a_greedy_utilization_refused():
    import psutil

    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    assert vb.kv_bytes_per_token(config, 4) == 2 * 30 * 3 * 64 * 4
    size = vb.cpu_kv_cache_bytes(config, 4, 2049, None)
    assert 0 < size <= vb.CPU_KV_CACHE_MAX_BYTES
    free = psutil.virtual_memory().available / psutil.virtual_memory().total
    if free < 0.99:
        with pytest.raises(UserError, match="--gpu-memory-utilization 1.0 asks vLLM's CPU build for"):
            vb.cpu_kv_cache_bytes(config, 4, 2049, 1.0)
    with pytest.raises(UserError, match="smaller --max-length"):
        vb.cpu_kv_cache_bytes({**config, "num_hidden_layers": 10 ** 6}, 4, 2049, None)


@pytest.mark.parametrize("files, message", [
    ({}, "no readable config.json"),
    ({"config.json": "{not json"}, "no readable config.json"),
    ({"config.json": "{}"}, "names no architectures"),
    ({"config.json": '{"architectures": ["LlamaForCausalLM"]}'}, "holds no weights"),
])
def test_a_model_directory_vllm_cannot_load_is_named(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UserError, match=message):
        vb.model_config(tmp_path, "my-model")


@pytest.mark.parametrize("kwargs, message", [
    ({"tensor_parallel_size": 0}, "tensor parallel size"),
    ({"gpu_memory_utilization": 1.5}, "gpu memory utilization"),
    ({"max_length": 0}, "max length"),
])
def test_bad_settings_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        vb.load_vllm_backend("smollm2-135m", **kwargs)


def test_model_positions_must_hold_a_scored_prompt():
    vb.check_positions({"max_position_embeddings": 2048}, 2047)
    with pytest.raises(UserError, match="--max-length 2047"):
        vb.check_positions({"max_position_embeddings": 2048}, 2048)


def test_eos_ids_include_the_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, 5]}')
    assert vb.eos_token_ids(ToyTokenizer(), tmp_path) == frozenset({2, 5, EOS})
    assert vb.eos_token_ids(ToyTokenizer(), tmp_path / "none") == frozenset({EOS})


# ---------------------------------------------------------------- the GPU parity script

def test_parity_script_arguments():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import vllm_parity
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    args = vllm_parity.parse_args(["--spec", "mmlu_abstract_algebra:mc::olmes", "--vllm-for-mc"])
    assert (args.spec, args.limit, args.model, args.vllm_for_mc) == (
        "mmlu_abstract_algebra:mc::olmes", 100, "smollm2-135m", True)


def test_parity_script_exits_2_without_vllm_or_gpu():
    if vb.importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "vllm_parity.py"), "--limit", "5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "vllm is not installed" in done.stderr and "proctor[vllm]" in done.stderr


class EngineDeadError(Exception):
    """vLLM's exception for an engine core that died (matched by name, as the backend does)."""


class DyingLLM(FakeLLM):
    """Answers `answers` calls, then its engine dies."""

    def __init__(self, answers: int):
        super().__init__()
        self.answers = answers

    def generate(self, *args, **kwargs):
        if self.answers == 0:
            raise EngineDeadError("EngineCore encountered an issue")
        self.answers -= 1
        return super().generate(*args, **kwargs)


def test_an_engine_that_dies_on_its_first_batch_is_not_sent_to_a_rerun(fake_vllm):
    from proctor.errors import UserError

    rows = [Row((1, 2, 3, 4), (Readout(2, (4, 5)),))]
    with pytest.raises(UserError, match=r"died on its first batch: it cannot run this model here .* --backend hf$"):
        backend(DyingLLM(0)).score(rows)
    later = backend(DyingLLM(1))
    later.score(rows)
    with pytest.raises(UserError, match=r"died during the run .* rerun the same command to resume$"):
        later.score(rows)
