"""Hugging Face transformers backend: token rows in, continuation log-probs out.

One forward pass per batch of right-padded rows. Only the positions some readout needs
become logits and log-probs: for common architectures the decoder's hidden states are
gathered at those positions before the LM head, so no [batch, length, vocab] tensor
ever exists.

Shared prefixes (`score(rows, prefix=...)`): the prefix's keys and values are computed
once, kept for the next batches with the same prefix, and read by right-padded suffix
rows whose position ids continue after the prefix.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar, Union

import numpy as np
import torch

from proctor.backends.cpu_memory import keep_freed_memory
from proctor.backends.decode_linear import packed_linears
from proctor.backends.fused_mlp import fuse_gated_mlps
from proctor.backends.models import load_model
from proctor.backends.packed_attention import NAME as PACKED, PackedLayout, packed
from proctor.backends.padding import left_padded, right_padded
from proctor.backends.prefix_kv import run_prefix
from proctor.backends.sources import ModelSource, as_source
from proctor.defaults import DEFAULT_MAX_LENGTH
from proctor.engine.plan import Readout, Row
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import LoglikelihoodResult

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}
# Architectures whose CausalLM forward is exactly `lm_head(decoder(ids).last_hidden_state)`.
_PLAIN_HEAD_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo", "olmo2",
    "olmo3", "olmoe", "gpt_neox", "gpt2", "phi3", "smollm3", "starcoder2",
})
# Of those, the ones whose decoder takes a plain per-layer key/value cache with absolute
# positions continuing after it (no sliding windows, see `shares_prefixes`).
_PREFIX_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo", "olmo2",
    "olmoe", "gpt_neox", "gpt2", "phi3", "smollm3", "starcoder2",
})
_CPU_TOKEN_BUDGET = 1024  # measured: smaller CPU batches run faster per token (cache locality)
_PROBE_TOKENS = 2048  # tokens of the memory probe that sizes CUDA batches
_MEMORY_USE = 0.8     # share of the free memory a CUDA batch may fill
_HEAD_CHUNK = 2048  # positions per LM-head + log-softmax chunk
T = TypeVar("T")


def resolve_device(device: Optional[str]) -> torch.device:
    """Return the torch device `--device` names (None: CUDA when available, else CPU), or a UserError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {device!r} (--device); use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available here; use --device cpu")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device {device!r} requested but MPS is not available here; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {device!r} (--device); use cpu, cuda, cuda:N or mps")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Return the torch dtype `--dtype` names; "auto" is bfloat16 on CUDA that supports it, else float32."""
    if dtype == "auto":
        # bf16 matmuls on CPU are 10-100x slower than fp32 here
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in _DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; use auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def position_limit(config: Any) -> Optional[int]:
    """Return the longest input the model was built for (learned or rotary positions), if its config says."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_context_length(config: Any, tokenizer: Any) -> int:
    """Return lm-eval 0.4.13's default max_length (`resolve_max_length`, lm_eval/models/utils.py).

    That is the config's positions (its text config first), else the tokenizer's
    model_max_length unless unset, else 2048.
    """
    found = position_limit(config)
    if found is not None:
        return found
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < 10**12:
        return limit
    return DEFAULT_MAX_LENGTH


class HFBackend:
    """Scores engine rows with a transformers causal LM.

    `max_length` None means the model's context length (`model_context_length`).
    """

    def __init__(self, model: Any, tokenizer: Any, *, identity: str, max_length: Optional[int] = DEFAULT_MAX_LENGTH):
        if max_length is None:
            max_length = model_context_length(model.config, tokenizer)
        if max_length < 1:
            raise UserError(f"max length must be a positive integer, got {max_length}")
        positions = position_limit(model.config)
        if positions is not None and max_length > positions:
            raise UserError(f"--max-length {max_length} is longer than the model's {positions} positions; "
                            f"pass --max-length {positions} or less")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.identity = identity
        self.max_length = max_length
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        config = model.config
        self.plain_head = (
            getattr(config, "model_type", None) in _PLAIN_HEAD_TYPES
            and getattr(config, "final_logit_softcapping", None) is None
            and getattr(config, "logit_scale", None) is None
        )
        # Packed rows (no padding) with shared-prefix attention need SDPA-style attention
        # modules, a plain head and a plain key/value cache (see packed_attention.py).
        self.shares_prefixes = (
            self.plain_head and _prefix_safe(config, max_length)
            and getattr(config, "_attn_implementation", None) in ("sdpa", PACKED)
        )
        if self.shares_prefixes:
            model.set_attn_implementation(PACKED)
        self.forward_calls = 0     # row-batch forward passes
        self.prefix_calls = 0      # shared-prefix forward passes
        self._prefix: tuple[int, ...] = ()
        self._prefix_kv: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
        self._budget: Optional[int] = None

    @property
    def fingerprint(self) -> str:
        """Identity, dtype, device type and max length: what makes this backend's scores what they are."""
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.identity}|dtype={dtype}|device={self.device.type}|max_length={self.max_length}"

    def config_record(self) -> dict[str, Any]:
        """Return the settings metrics.json records beyond the common ones (transformers has none)."""
        return {}

    def token_budget(self) -> int:
        """Tokens per batch for batch_size="auto": fixed on CPU, measured on CUDA."""
        if self.device.type != "cuda":
            return _CPU_TOKEN_BUDGET
        if self._budget is None:
            self._budget = self._measure_budget()
        return self._budget

    def _measure_budget(self) -> int:
        """Score one probe row, read its peak memory, and fill the free memory to a budget.

        The probe reads a log-prob at every position, so the LM head's chunk is in the
        peak; what a shared prefix adds on top is left to the out-of-memory halving.
        """
        probe = min(self.max_length, _PROBE_TOKENS)
        token = self.tokenizer.eos_token_id or 0
        tokens = (token,) * probe
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.score([Row(tokens, (Readout(0, tokens[1:]),))])
        peak = torch.cuda.max_memory_allocated(self.device) - base
        free, _ = torch.cuda.mem_get_info(self.device)
        return fill_budget(free, probe, peak, max_length=self.max_length)

    def score(
        self, rows: Sequence[Row], prefix: tuple[int, ...] = (), parents: Sequence[int] = ()
    ) -> list[tuple[LoglikelihoodResult, ...]]:
        """Score rows; with a `prefix`, rows hold the tokens after it and readouts count from its start.

        Row i continues row `parents[i]` when that is >= 0 (then it holds the tokens after
        its parent's). Running out of memory raises BatchTooLarge, so the engine can split
        the batch.
        """
        return self._fitting(lambda: self._score(rows, prefix, tuple(parents)),
                             lambda: f"{len(rows)} rows of up to {max(len(r.tokens) for r in rows)} tokens")

    @torch.inference_mode()
    def _score(
        self, rows: Sequence[Row], prefix: tuple[int, ...], parents: tuple[int, ...]
    ) -> list[tuple[LoglikelihoodResult, ...]]:
        if (prefix or parents) and not self.shares_prefixes:
            raise ValueError("this model does not support shared-prefix scoring")

        # unique (row, position) pairs: choices sharing a context read the same position
        slots: dict[tuple[int, int], int] = {}
        wanted: list[tuple[int, int]] = []  # (slot, target token) per scored token, in order
        # tokens before each row's own: the prefix, and the segment it continues if any
        offsets = [len(prefix) + (len(rows[p].tokens) if p >= 0 else 0) for p in (parents or [-1] * len(rows))]
        for i, (row, skip) in enumerate(zip(rows, offsets)):
            for readout in row.readouts:
                if readout.start < skip:
                    raise ValueError(f"readout at position {readout.start} lies inside the {skip} tokens before the row")
                for offset, token in enumerate(readout.tokens):
                    slot = slots.setdefault((i, readout.start - skip + offset), len(slots))
                    wanted.append((slot, token))
        if self.shares_prefixes:
            logits = self._packed_logits_at(prefix, rows, parents, offsets, list(slots))
        else:
            logits = self._logits_at(right_padded([r.tokens for r in rows]).to(self.device), list(slots))
        slot_idx = torch.tensor([w[0] for w in wanted], device=self.device)
        targets = torch.tensor([w[1] for w in wanted], device=self.device)
        logprobs, greedy = _score_slots(logits, slot_idx, targets)

        out: list[tuple[LoglikelihoodResult, ...]] = []
        at = 0
        for row in rows:
            results = []
            for readout in row.readouts:
                n = len(readout.tokens)
                total = float(logprobs[at:at + n].sum())
                results.append(LoglikelihoodResult(total, n, bool(greedy[at:at + n].all())))
                at += n
            out.append(tuple(results))
        return out

    def _logits_at(self, ids: torch.Tensor, slots: list[tuple[int, int]]) -> Iterator[torch.Tensor]:
        """Logits at the given (row, position) pairs, from one forward: [n, vocab] chunks of consecutive slots."""
        self.forward_calls += 1
        rows = torch.tensor([s[0] for s in slots], device=ids.device)
        positions = torch.tensor([s[1] for s in slots], device=ids.device)
        # right padding + causal attention: real positions never see pads, so no mask (as lm-eval)
        if self.plain_head:
            hidden = self.model.get_decoder()(input_ids=ids).last_hidden_state
            return self._head_chunks(hidden[rows, positions])
        keep, inverse = torch.unique(positions, return_inverse=True)
        logits = self.model(input_ids=ids, logits_to_keep=keep).logits
        return iter([logits[rows, inverse]])

    def _packed_logits_at(
        self, prefix: tuple[int, ...], rows: Sequence[Row], parents: tuple[int, ...], offsets: list[int],
        slots: list[tuple[int, int]],
    ) -> Iterator[torch.Tensor]:
        """Logits at (row, position in the row) pairs, all rows packed into one sequence (`_head_chunks`)."""
        decoder = self.model.get_decoder()
        if prefix != self._prefix:
            self._prefix, self._prefix_kv = (), ()  # free the old prefix before computing the new one
            if prefix:
                self.prefix_calls += 1
                self._prefix_kv = tuple(run_prefix(decoder, prefix, self.device))
            self._prefix = prefix
        self.forward_calls += 1
        starts, bounds, at = [], [], 0
        for row in rows:
            starts.append(at)
            bounds.append((at, at + len(row.tokens)))
            at += len(row.tokens)
        ids = torch.tensor([[t for row in rows for t in row.tokens]], dtype=torch.long, device=self.device)
        positions = torch.cat([torch.arange(o, o + len(r.tokens)) for o, r in zip(offsets, rows)])
        positions = positions[None].to(self.device)
        with packed(PackedLayout(tuple(bounds), self._prefix_kv, parents)):
            hidden = decoder(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state[0]
        flat = torch.tensor([starts[row] + pos for row, pos in slots], device=self.device)
        return self._head_chunks(hidden[flat])

    def _head_chunks(self, picked: torch.Tensor) -> Iterator[torch.Tensor]:
        """LM-head logits of gathered hidden states, [_HEAD_CHUNK, vocab] at a time, each made when asked for."""
        head = self.model.get_output_embeddings()
        return (head(picked[i:i + _HEAD_CHUNK]) for i in range(0, len(picked), _HEAD_CHUNK))

    def _head_at(self, picked: torch.Tensor) -> torch.Tensor:
        """LM-head logits [positions, vocab] of gathered hidden states."""
        return torch.cat(list(self._head_chunks(picked)))

    def decoder_shape(self) -> tuple[int, int]:
        """Return (decoder blocks, hidden size): the blocks HiddenStates requests may read."""
        config = self.model.config
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        return int(config.num_hidden_layers), int(config.hidden_size)

    def hidden_states(self, rows: Sequence[tuple[int, ...]], layers: Sequence[int], dtype: str) -> np.ndarray:
        """Return block l's output (`hidden_states[l + 1]`) at each row's last token, [rows, len(layers), hidden].

        The array is of `dtype`, from one left-padded forward of the decoder stack (no LM
        head, so no [batch, length, vocab] logits). Out of memory raises BatchTooLarge.
        """
        return self._fitting(lambda: self._hidden_states(rows, layers, dtype),
                             lambda: f"{len(rows)} rows of up to {max(len(r) for r in rows)} tokens")

    @torch.inference_mode()
    def _hidden_states(self, rows: Sequence[tuple[int, ...]], layers: Sequence[int], dtype: str) -> np.ndarray:
        self.forward_calls += 1
        ids, mask, positions = left_padded(rows, self.device)
        out = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                    output_hidden_states=True, use_cache=False)
        states = torch.stack([out.hidden_states[layer + 1][:, -1, :] for layer in layers], dim=1)
        return states.to(_DTYPES[dtype]).cpu().numpy()

    def generate(self, rows: Sequence[Any], on_done: Optional[Any] = None,
                 slots: Optional[int] = None) -> list[tuple[Any, ...]]:
        """Each GenRow's samples, decoding at most `slots` samples at a time (None: all of them).

        Continuous batching over shared prefixes (`hf_generate.py`) where attention is
        proctor's packed attention, else static batches over transformers' cache
        (`hf_generate_static.py`). Out of memory raises BatchTooLarge.
        """
        from proctor.backends.decoding import model_eos_token_ids
        from proctor.backends.hf_generate import generate_rows
        from proctor.backends.hf_generate_static import generate_static

        slots = slots or sum(len(r.seeds) for r in rows)
        eos = model_eos_token_ids(self.model, self.tokenizer)
        with packed_linears(self.model):
            if self.shares_prefixes:
                decoder = self.model.get_decoder()
                return self._fitting(lambda: generate_rows(decoder, self._head_at, self.tokenizer, eos, rows, slots,
                                                           on_done), lambda: f"{slots} generation slots")
            return self._fitting(lambda: generate_static(self.model, self.tokenizer, eos, rows, slots, on_done),
                                 lambda: f"{slots} generation slots")

    def _fitting(self, work: Callable[[], T], what: Callable[[], str]) -> T:
        """Return `work()`, with running out of memory raised as BatchTooLarge(what()).

        The engine can then split the work; the error is raised after the failed call's
        tensors are freed.
        """
        try:
            return work()
        except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError too
            if not _is_out_of_memory(e):
                raise
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        raise BatchTooLarge(what())


def fill_budget(free_bytes: int, probe_tokens: int, probe_bytes: int, *, max_length: int) -> int:
    """Tokens per batch that fill `_MEMORY_USE` of the free memory at the probe's bytes per token.

    Never below one full-length row, and a multiple of 256 tokens.
    """
    per_token = max(probe_bytes, 1) / probe_tokens
    budget = int(free_bytes * _MEMORY_USE / per_token) // 256 * 256
    return max(budget, max_length)


def _is_out_of_memory(error: RuntimeError) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def _prefix_safe(config: Any, max_length: int) -> bool:
    """Whether a prefix's cached keys/values give exactly what a full forward would."""
    if getattr(config, "model_type", None) not in _PREFIX_TYPES:
        return False
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) and window < max_length:
        return False
    return not getattr(config, "add_cross_attention", False)


def _score_slots(logits: Iterator[torch.Tensor], slot_idx: torch.Tensor,
                 targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each target at its slot (float32 log-softmax) and whether it is the argmax.

    `logits` are [n, vocab] chunks of consecutive slots. Each is read where it lies and
    dropped: the logits of every slot never exist at once, nor are they copied (RC tasks
    read thousands of positions: a gigabyte of logits).
    """
    logprobs = torch.empty(len(targets), dtype=torch.float32, device=targets.device)
    greedy = torch.empty(len(targets), dtype=torch.bool, device=targets.device)
    start = 0
    for chunk in logits:
        for part in chunk.split(_HEAD_CHUNK):
            end = start + len(part)
            inside = ((slot_idx >= start) & (slot_idx < end)).nonzero().squeeze(1)
            at, t = slot_idx[inside] - start, targets[inside]
            part = part.float()
            logprobs[inside] = torch.log_softmax(part, dim=-1)[at, t]
            greedy[inside] = part.argmax(dim=-1)[at] == t
            start = end
    return logprobs.cpu(), greedy.cpu()


def load_backend(
    model: Union[str, ModelSource], *, device: Optional[str] = None, dtype: str = "auto",
    max_length: Optional[int] = DEFAULT_MAX_LENGTH,
) -> HFBackend:
    """Load `model`: a hub id, local dir, .gguf file, alias like `smollm2-135m`, or the source a run resolved.

    `max_length` None means the model's context length.
    """
    if max_length is not None and max_length < 1:
        raise UserError(f"max length must be a positive integer, got {max_length}")
    source = as_source(model)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    if dev.type == "cpu":
        keep_freed_memory()
    loaded = load_model(source, dtype=torch_dtype, device=dev)
    fuse_gated_mlps(loaded.model)  # proctor's own copy: no caller holds its parameters
    return HFBackend(loaded.model, loaded.tokenizer, identity=loaded.identity, max_length=max_length)
