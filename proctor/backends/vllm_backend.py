"""vLLM backend (optional extra `proctor[vllm]`, CUDA GPU only): token rows in, log-probs and samples out.

Scoring reads prompt log-probs: each readout becomes one prompt, the row's tokens up to
the readout's start followed by all its continuation tokens (the row itself stops before
the last one, see engine.tokens.window), run with `prompt_logprobs=1, max_tokens=1`;
prompt position p holds log p(prompt[p] | prompt[:p]), always including the actual
token, plus the most likely one (for `is_greedy`). The context the model sees is exactly
the HF backend's, truncation included. vLLM (V1) skips its prefix cache for requests
that want prompt log-probs, so scoring is exact; generation uses the cache (prompts repeated
once per sample share their prefill).

Generation: one request per sample, `n=1` with the sample's own seed (from
engine.gen_plan.sample_seed), so a sample never depends on its batch-mates or on how
many samples its prompt has. vLLM's sampler is not the HF backend's, so sampled texts
differ between backends (the same seed gives the same text on the same vLLM). The final
text and finish reason follow the project's rules (decoding.StopWatch.text): special
tokens dropped, cut before the first stop string, EOS = the tokenizer's plus the
generation config's end tokens.

`vllm_for_mc` (OLMES `--vllm-for-mc`, off unless asked for): a row whose readouts are all
single-token continuations at its end (multiple-choice letters) becomes ONE prompt that
generates one greedy token with the top-20 log-probs, and each letter's log-prob is read
there; a letter outside the top 20 gets -999 (is_greedy False). Like OLMES, the context
is left-truncated to max_length - 1 tokens and is_greedy is `rank == 1`. Unlike OLMES,
which switches a whole task over only when every request is single-token, the choice is
made per row. It is part of `fingerprint`, so its results never mix with exact ones.

vLLM objects followed (vLLM 0.11-0.12, V1 engine: `vllm/outputs.py`, `vllm/logprobs.py`):
`RequestOutput.prompt_logprobs` is a list (or `FlatLogprobs`, indexed the same way) with
one entry per prompt token: None (FlatLogprobs: {}) for the first, else a dict
token id -> `Logprob(logprob, rank, decoded_token)`; `RequestOutput.outputs` is a list of
`CompletionOutput(index, text, token_ids, cumulative_logprob, logprobs, finish_reason,
stop_reason)` whose `logprobs` has one such dict per generated token. `finish_reason` is
"stop" or "length"; `stop_reason` is the stop string, a stop token id, or None (EOS).

Everything that touches vllm is imported inside functions, so this module imports
without it; the translation between rows and vLLM requests/outputs is pure functions over
plain data (tests/test_backend_vllm.py tests them with stand-in objects).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.backends.decoding import StopWatch
from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Readout, Row
from proctor.errors import UserError, check_positive_int
from proctor.requests import Generation, LoglikelihoodResult

NOT_IN_TOP_K = -999.0   # OLMES single_token_generate: a letter outside the returned top-k
MC_TOP_K = 20           # OLMES asks for logprobs=20 (also vLLM's default max_logprobs)
INSTALL_HINT = "pip install 'proctor[vllm]' (Linux with a CUDA GPU)"
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
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params}


def _prompt(tokens: Sequence[int], **params: Any) -> Prompt:
    return Prompt(tuple(tokens), tuple(sorted(params.items())))


def score_params() -> dict[str, Any]:
    """Exact scoring: prompt log-probs of the actual token and the top-1, one throwaway new token."""
    return {"prompt_logprobs": 1, "max_tokens": 1, "temperature": 0.0, "detokenize": False}


def mc_params() -> dict[str, Any]:
    """The OLMES fast path: one greedy token and its top-k log-probs."""
    return {"logprobs": MC_TOP_K, "max_tokens": 1, "temperature": 0.0, "detokenize": False}


def is_mc_row(row: Row) -> bool:
    """Every readout is one token read at the row's last position (a shared MC context)."""
    end = len(row.tokens) - 1
    return bool(row.readouts) and all(len(r.tokens) == 1 and r.start == end for r in row.readouts)


def readout_prompt(row: Row, readout: Readout) -> tuple[int, ...]:
    """The row up to the readout's start, then every continuation token (the last is not in the row)."""
    given = row.tokens[readout.start + 1:readout.start + 1 + len(readout.tokens)]
    if tuple(readout.tokens[:len(given)]) != tuple(given):
        raise ValueError(f"row tokens after position {readout.start} are not the readout's continuation")
    return tuple(row.tokens[:readout.start + 1]) + tuple(readout.tokens)


def mc_prompt(row: Row, max_length: int) -> tuple[int, ...]:
    # OLMES's single_token_generate keeps the last max_length - 1 context tokens
    return tuple(row.tokens[-(max_length - 1):]) if max_length > 1 else tuple(row.tokens[-1:])


@dataclass(frozen=True)
class ScorePlan:
    """Distinct prompts for a batch of rows, and for each readout which prompt answers it."""

    prompts: tuple[Prompt, ...]
    sources: tuple[tuple[int, ...], ...]   # per row, per readout: index into prompts
    fast: tuple[bool, ...]                 # per row: read through the MC fast path


def plan_scoring(rows: Sequence[Row], max_length: int, vllm_for_mc: bool) -> ScorePlan:
    index: dict[Prompt, int] = {}
    sources: list[tuple[int, ...]] = []
    fast: list[bool] = []
    for row in rows:
        if vllm_for_mc and is_mc_row(row):
            prompts = [_prompt(mc_prompt(row, max_length), **mc_params())] * len(row.readouts)
            fast.append(True)
        else:
            prompts = [_prompt(readout_prompt(row, r), **score_params()) for r in row.readouts]
            fast.append(False)
        sources.append(tuple(index.setdefault(p, len(index)) for p in prompts))
    return ScorePlan(tuple(index), tuple(sources), tuple(fast))


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
    """A Logprob's value (very old vLLM returned bare floats)."""
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
    """vLLM's reason in the project's words: a stop string -> "stop", an end token -> "eos"."""
    if completion.finish_reason == "length":
        return "length"
    if completion.finish_reason == "stop":
        # stop_reason: the matched stop string, a stop token id (ours are all EOS ids), or None (EOS)
        return "stop" if isinstance(completion.stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM ended a generation with finish_reason={completion.finish_reason!r}")


def read_generation(completion: Any, watch: StopWatch) -> Generation:
    tokens = list(completion.token_ids)
    return Generation(watch.text(tokens), len(tokens), finish_reason(completion))


# ---------------------------------------------------------------- the backend

@dataclass
class VLLMStats:
    """What the fast path did, for metrics.json (OLMES's hint: check how often letters fell out)."""

    mc_rows: int = 0          # rows read through the single-token fast path
    mc_readouts: int = 0      # letters read there
    mc_outside_top_k: int = 0  # of them, scored -999


@dataclass
class VLLMSettings:
    dtype: str
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    vllm_version: str = "unknown"


class VLLMBackend:
    """Scores engine rows and generates samples with a `vllm.LLM`."""

    shares_prefixes = False   # vLLM batches prompts itself; rows are sent whole
    device = "cuda"

    def __init__(self, llm: Any, tokenizer: Any, *, identity: str, max_length: int, eos_ids: frozenset[int],
                 settings: VLLMSettings, vllm_for_mc: bool = False):
        if max_length < 2:
            raise UserError(f"max length must be at least 2 with the vLLM backend, got {max_length}")
        self.llm = llm
        self.tokenizer = tokenizer
        self.identity = identity
        self.max_length = max_length
        self.eos_ids = eos_ids
        self.settings = settings
        self.dtype = settings.dtype
        self.vllm_for_mc = bool(vllm_for_mc)
        self.stats = VLLMStats()
        self.calls = 0   # llm.generate calls

    def with_vllm_for_mc(self, on: bool) -> "VLLMBackend":
        """The same loaded model with the MC fast path switched on or off."""
        return VLLMBackend(self.llm, self.tokenizer, identity=self.identity, max_length=self.max_length,
                           eos_ids=self.eos_ids, settings=self.settings, vllm_for_mc=on)

    @property
    def fingerprint(self) -> str:
        mc = f"top{MC_TOP_K}" if self.vllm_for_mc else "exact"
        return (f"{self.identity}|backend=vllm|dtype={self.dtype}|device=cuda|max_length={self.max_length}"
                f"|vllm_for_mc={mc}")

    def config_record(self) -> dict[str, Any]:
        """Backend settings and fast-path counts for the run's metrics.json."""
        return {
            "backend": "vllm",
            "vllm_version": self.settings.vllm_version,
            "tensor_parallel_size": self.settings.tensor_parallel_size,
            "gpu_memory_utilization": self.settings.gpu_memory_utilization,
            "vllm_for_mc": self.vllm_for_mc,
            "vllm_for_mc_top_k": MC_TOP_K if self.vllm_for_mc else None,
            **({"vllm_for_mc_stats": vars(self.stats).copy()} if self.vllm_for_mc else {}),
        }

    def token_budget(self) -> int:
        return _TOKEN_BUDGET

    def score(self, rows: Sequence[Row], prefix: tuple[int, ...] = (),
              parents: Sequence[int] = ()) -> list[tuple[LoglikelihoodResult, ...]]:
        # shares_prefixes is False: the engine never passes prefix or parents
        plan = plan_scoring(rows, self.max_length, self.vllm_for_mc)
        results = read_scores(plan, rows, self._run(plan.prompts))
        for row, fast, row_results in zip(rows, plan.fast, results):
            if fast:
                self.stats.mc_rows += 1
                self.stats.mc_readouts += len(row.readouts)
                self.stats.mc_outside_top_k += sum(r.sum_logits == NOT_IN_TOP_K for r in row_results)
        return results

    def generate(self, rows: Sequence[GenRow], on_done: Optional[OnDone] = None,
                 slots: Optional[int] = None) -> list[tuple[Generation, ...]]:
        """Each row's samples in seed order. vLLM schedules its own batch; rows go to it in
        chunks of about `slots` samples (None: all at once), and on_done follows each chunk,
        so a killed run keeps the chunks it finished."""
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
        from vllm import SamplingParams, TokensPrompt

        self.calls += 1
        requests = [TokensPrompt(prompt_token_ids=list(p.token_ids)) for p in prompts]
        params = [SamplingParams(**p.sampling) for p in prompts]
        return list(self.llm.generate(requests, sampling_params=params, use_tqdm=False))


# ---------------------------------------------------------------- loading

def require_vllm() -> str:
    """vLLM's version; UserError when the extra is not installed or there is no CUDA GPU."""
    if importlib.util.find_spec("vllm") is None:
        raise UserError(f"the vLLM backend needs the vllm package, which is not installed: {INSTALL_HINT}")
    import torch

    if not torch.cuda.is_available():
        raise UserError("the vLLM backend needs a CUDA GPU and none is visible here; "
                        "use the default HF backend (--backend hf) on this machine")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return "unknown"


def eos_token_ids(tokenizer: Any, directory: Path) -> frozenset[int]:
    """The tokenizer's EOS and generation_config.json's end tokens (as decoding.eos_token_ids)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config = directory / "generation_config.json"
    if config.is_file():
        value = json.loads(config.read_text()).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(i) for i in value)
    return frozenset(ids)


def check_positions(directory: Path, max_length: int) -> None:
    """A scored prompt holds max_length context tokens plus the last continuation token."""
    config = json.loads((directory / "config.json").read_text())
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and max_length + 1 > limit:
        raise UserError(f"--max-length {max_length} is too long for the vLLM backend with this model "
                        f"({limit} positions; a scored prompt is max_length + 1 tokens): use --max-length {limit - 1}")


def check_settings(max_length: int, tensor_parallel_size: int, gpu_memory_utilization: float) -> None:
    check_positive_int("max length", max_length)
    check_positive_int("tensor parallel size", tensor_parallel_size)
    if isinstance(gpu_memory_utilization, bool) or not 0 < gpu_memory_utilization <= 1:
        raise UserError(f"gpu memory utilization must be in (0, 1], got {gpu_memory_utilization!r}")


def load_vllm_backend(
    model: str, *, dtype: str = "auto", max_length: Optional[int] = 2048, vllm_for_mc: bool = False,
    tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9, seed: int = 0,
) -> VLLMBackend:
    """Load `model` (hub id, local dir, .gguf file, or alias) into vLLM on this machine's GPUs;
    `max_length` None: the model's context length less the one position a scored token needs."""
    check_settings(2 if max_length is None else max_length, tensor_parallel_size, gpu_memory_utilization)
    vllm_version = require_vllm()
    import torch
    from transformers import AutoTokenizer

    from proctor.backends.hf import resolve_dtype
    from proctor.backends.models import model_directory
    from proctor.backends.sources import resolve_source

    if tensor_parallel_size > torch.cuda.device_count():
        raise UserError(f"tensor parallel size {tensor_parallel_size} needs that many GPUs; "
                        f"{torch.cuda.device_count()} visible")
    directory, identity = model_directory(resolve_source(model))
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    if max_length is None:
        from transformers import AutoConfig

        from proctor.backends.hf import model_context_length

        max_length = model_context_length(AutoConfig.from_pretrained(str(directory)), tokenizer) - 1
    check_positions(directory, max_length)
    dtype_name = str(resolve_dtype(dtype, torch.device("cuda"))).removeprefix("torch.")
    from vllm import LLM

    try:
        llm = LLM(
            model=str(directory), tokenizer=str(directory), dtype=dtype_name, seed=seed,
            tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_length + 1, enable_prefix_caching=True, max_logprobs=MC_TOP_K,
        )
    except (ValueError, OSError) as e:
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        raise UserError(f"vLLM cannot load model {model}: {first}") from None
    settings = VLLMSettings(dtype_name, tensor_parallel_size, gpu_memory_utilization, vllm_version)
    return VLLMBackend(llm, tokenizer, identity=identity, max_length=max_length,
                       eos_ids=eos_token_ids(tokenizer, directory), settings=settings, vllm_for_mc=vllm_for_mc)
