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

from typing import Any, Optional, Sequence

import torch

from proctor.backends.models import load_model
from proctor.backends.prefix_kv import PrefixCache, cache_keyword, run_prefix
from proctor.backends.sources import resolve_source
from proctor.engine.plan import Row
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
_HEAD_CHUNK = 2048  # positions per LM-head + log-softmax chunk


def resolve_device(device: Optional[str]) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available here; use --device cpu")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device {device!r} requested but MPS is not available here; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {device!r}; use cpu, cuda, cuda:N or mps")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # bf16 matmuls on CPU are 10-100x slower than fp32 here
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in _DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; use auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


class HFBackend:
    """Scores engine rows with a transformers causal LM."""

    def __init__(self, model: Any, tokenizer: Any, *, identity: str, max_length: int = 2048):
        if max_length < 1:
            raise UserError(f"max length must be a positive integer, got {max_length}")
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
        self.shares_prefixes = self.plain_head and _prefix_safe(config, max_length)
        self.forward_calls = 0     # row-batch forward passes
        self.prefix_calls = 0      # shared-prefix forward passes
        self._prefix: tuple[int, ...] = ()
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._cache_keyword = cache_keyword(model.get_decoder()) if self.shares_prefixes else ""

    @property
    def fingerprint(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.identity}|dtype={dtype}|device={self.device.type}|max_length={self.max_length}"

    def token_budget(self) -> int:
        """Padded tokens per batch for batch_size="auto": fixed on CPU, by memory on GPUs."""
        if self.device.type == "cuda":
            gib = torch.cuda.get_device_properties(self.device).total_memory // (1 << 30)
            return max(8192, min(131072, (gib // 10) * 8192))
        return _CPU_TOKEN_BUDGET

    def score(self, rows: Sequence[Row], prefix: tuple[int, ...] = ()) -> list[tuple[LoglikelihoodResult, ...]]:
        """Score rows; with a `prefix`, rows hold the tokens after it and readouts count from its start.

        Running out of memory raises BatchTooLarge, so the engine can split the batch.
        """
        try:
            return self._score(rows, prefix)
        except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError too
            if not _is_out_of_memory(e):
                raise
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        raise BatchTooLarge(f"{len(rows)} rows of up to {max(len(r.tokens) for r in rows)} tokens")

    @torch.inference_mode()
    def _score(self, rows: Sequence[Row], prefix: tuple[int, ...]) -> list[tuple[LoglikelihoodResult, ...]]:
        if prefix and not self.shares_prefixes:
            raise ValueError("this model does not support shared-prefix scoring")
        longest = max(len(r.tokens) for r in rows)
        ids = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row.tokens)] = torch.tensor(row.tokens, dtype=torch.long)

        # unique (row, position) pairs: choices sharing a context read the same position
        skip = len(prefix)
        slots: dict[tuple[int, int], int] = {}
        wanted: list[tuple[int, int]] = []  # (slot, target token) per scored token, in order
        for i, row in enumerate(rows):
            for readout in row.readouts:
                if readout.start < skip:
                    raise ValueError(f"readout at position {readout.start} lies inside the {skip}-token prefix")
                for offset, token in enumerate(readout.tokens):
                    slot = slots.setdefault((i, readout.start - skip + offset), len(slots))
                    wanted.append((slot, token))
        if prefix:
            logits = self._prefixed_logits_at(prefix, ids.to(self.device), list(slots))
        else:
            logits = self._logits_at(ids.to(self.device), list(slots))
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

    def _logits_at(self, ids: torch.Tensor, slots: list[tuple[int, int]]) -> torch.Tensor:
        """Logits [len(slots), vocab] at the given (row, position) pairs, from one forward."""
        self.forward_calls += 1
        rows = torch.tensor([s[0] for s in slots], device=ids.device)
        positions = torch.tensor([s[1] for s in slots], device=ids.device)
        # right padding + causal attention: real positions never see pads, so no mask (as lm-eval)
        if self.plain_head:
            hidden = self.model.get_decoder()(input_ids=ids).last_hidden_state
            return self._head_at(hidden[rows, positions])
        keep, inverse = torch.unique(positions, return_inverse=True)
        logits = self.model(input_ids=ids, logits_to_keep=keep).logits
        return logits[rows, inverse]

    def _prefixed_logits_at(
        self, prefix: tuple[int, ...], ids: torch.Tensor, slots: list[tuple[int, int]]
    ) -> torch.Tensor:
        """Logits at (row, suffix position) pairs of suffix rows that continue `prefix`."""
        decoder = self.model.get_decoder()
        if prefix != self._prefix:
            self._prefix, self._prefix_kv = (), []  # free the old prefix before computing the new one
            self.prefix_calls += 1
            self._prefix_kv = run_prefix(decoder, prefix, self.device)
            self._prefix = prefix
        self.forward_calls += 1
        n, length = ids.shape
        # right padding + causal attention: real positions never see pads, so no mask (as lm-eval)
        positions = torch.arange(len(prefix), len(prefix) + length, device=ids.device).expand(n, -1)
        cache = {self._cache_keyword: PrefixCache(self._prefix_kv)}
        hidden = decoder(input_ids=ids, position_ids=positions, use_cache=True, **cache).last_hidden_state
        rows = torch.tensor([s[0] for s in slots], device=ids.device)
        return self._head_at(hidden[rows, torch.tensor([s[1] for s in slots], device=ids.device)])

    def _head_at(self, picked: torch.Tensor) -> torch.Tensor:
        """LM-head logits of gathered hidden states, a chunk of positions at a time."""
        head = self.model.get_output_embeddings()
        return torch.cat([head(picked[i:i + _HEAD_CHUNK]) for i in range(0, len(picked), _HEAD_CHUNK)])


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


def _score_slots(logits: torch.Tensor, slot_idx: torch.Tensor, targets: torch.Tensor):
    """Log-prob of each target at its slot (float32 log-softmax) and whether it is the argmax."""
    logprobs = torch.empty(len(targets), dtype=torch.float32, device=logits.device)
    greedy = torch.empty(len(targets), dtype=torch.bool, device=logits.device)
    for i in range(0, len(targets), _HEAD_CHUNK):
        s = slot_idx[i:i + _HEAD_CHUNK]
        chunk = logits[s].float()
        t = targets[i:i + _HEAD_CHUNK]
        logprobs[i:i + _HEAD_CHUNK] = torch.log_softmax(chunk, dim=-1).gather(1, t[:, None]).squeeze(1)
        greedy[i:i + _HEAD_CHUNK] = chunk.argmax(dim=-1) == t
    return logprobs.cpu(), greedy.cpu()


def load_backend(
    model: str, *, device: Optional[str] = None, dtype: str = "auto", max_length: int = 2048
) -> HFBackend:
    """Load `model` (hub id, local dir, .gguf file, or alias like `smollm2-135m`)."""
    if max_length < 1:
        raise UserError(f"max length must be a positive integer, got {max_length}")
    source = resolve_source(model)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    loaded = load_model(source, dtype=torch_dtype, device=dev)
    return HFBackend(loaded.model, loaded.tokenizer, identity=loaded.identity, max_length=max_length)
