"""llama.cpp backend (llama-cpp-python, optional extra): GGUF models natively on the CPU.

Scoring reads full-vocabulary logits at each readout position and takes the
log-softmax in float64: the logits are llama.cpp's float32 values, and a float64
reduction over the vocabulary adds no rounding of its own (cost: one exp per vocabulary
entry per scored token, small beside the forward pass).

The model lives in a child process (backends/isolated.py): a llama.cpp build that dies
on this CPU (SIGSEGV, SIGILL) ends the run with one error line naming the signal, and the
results stored before it stay in the result cache. `LlamaCppBackend` is the child's side;
`LlamaCppProcess`, what the engine holds, sends it each batch and each tokenizer call.

Rows run one at a time; the context's key/value cache keeps the longest common prefix
of consecutive rows (llamacpp_native.py), so the engine's shared prefixes and segments
(`shares_prefixes`) are computed once.

Generation decodes one sample at a time. Token choice, seeds and stop handling are the
HF backend's (decoding.py): greedy is the argmax, a sample draws with its own
`torch.Generator` seeded per sample, so samples do not depend on their batch-mates.
A sample ends at the vocabulary's EOS or EOT token (for SmolLM2 also <|endoftext|>,
which the HF backend, reading EOS and the generation config, does not stop at).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from proctor.backends.decoding import StopWatch, row_generator, sample_token
from proctor.backends.isolated import ChildObject
from proctor.backends.llamacpp_native import NativeModel
from proctor.backends.sources import ModelSource, as_source, classify_source
from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Row
from proctor.errors import UserError
from proctor.requests import Generation, LoglikelihoodResult

NAME = "llama.cpp"
CRASH_ADVICE = ("llama-cpp-python was probably built for another CPU (e.g. -march=native with AMX kernels); "
                "rebuild it portably: CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install --force-reinstall "
                "--no-cache-dir --no-deps llama-cpp-python (or bash scripts/install --for-tests)")
TOKENIZER_FIELDS = ("bos_token_id", "eos_token_id", "eot_token_id", "bos_token", "eos_token", "chat_template")
_TOKEN_BUDGET = 2048  # rows run one at a time: a batch only sets how often results are stored

OnDone = Callable[[int, tuple[Generation, ...]], None]


class LlamaCppTokenizer:
    """A TextEncoder (and the decode StopWatch needs) over llama.cpp's own tokenizer."""

    is_fast = False  # no batched encode: TokenizationPolicy calls `encode` per text

    def __init__(self, native: NativeModel):
        self.native = native
        special = native.special_tokens()
        self.bos_token_id = special["bos"]
        self.eos_token_id = special["eos"]
        self.eot_token_id = special["eot"]
        # what chat rendering and lm-eval's BOS check read off a transformers tokenizer
        self.bos_token = None if self.bos_token_id is None else self.decode([self.bos_token_id])
        self.eos_token = None if self.eos_token_id is None else self.decode([self.eos_token_id])
        self.chat_template = native.chat_template()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Tokenize `text` with llama.cpp; `add_special_tokens` adds those the GGUF asks for (e.g. BOS)."""
        return self.native.tokenize(text, add_special=add_special_tokens)

    def decode(self, tokens: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Return the text of `tokens`, control tokens rendered unless `skip_special_tokens`."""
        return self.native.detokenize(list(tokens), special=not skip_special_tokens)


class LlamaCppBackend:
    """Scores engine rows and generates with a GGUF model through llama.cpp (in the child process)."""

    def __init__(self, native: NativeModel, *, path: str, identity: str, max_length: int):
        self.native = native
        self.model_path = path
        self.tokenizer = LlamaCppTokenizer(native)
        self.identity = identity
        self.max_length = max_length
        self.dtype = native.description.rsplit(" ", 1)[-1]  # the file's weight type, e.g. "Q4_1"
        self.eos_ids = frozenset(t for t in (self.tokenizer.eos_token_id, self.tokenizer.eot_token_id) if t is not None)

    @property
    def fingerprint(self) -> str:
        """Identity, backend, context size and max length: what makes this backend's scores what they are."""
        return f"{self.identity}|backend={NAME}|n_ctx={self.native.n_ctx}|max_length={self.max_length}"

    def config_record(self) -> dict:
        """Return what metrics.json records about this backend."""
        from importlib.metadata import version

        return {"model_file": self.model_path, "weights": self.dtype, "n_ctx": self.native.n_ctx,
                "n_threads": self.native.n_threads, "llama_cpp_python": version("llama_cpp_python")}

    def describe(self) -> dict[str, Any]:
        """Return what the parent's LlamaCppProcess holds of this backend and its tokenizer (picklable)."""
        return {"tokenizer": {name: getattr(self.tokenizer, name) for name in TOKENIZER_FIELDS},
                "max_length": self.max_length, "dtype": self.dtype, "fingerprint": self.fingerprint,
                "config": self.config_record()}

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        """Tokenize `text` (the parent's tokenizer calls this)."""
        return self.tokenizer.encode(text, add_special_tokens)

    def decode(self, tokens: Sequence[int], skip_special_tokens: bool) -> str:
        """Return the text of `tokens` (the parent's tokenizer calls this)."""
        return self.tokenizer.decode(tokens, skip_special_tokens)

    def score(
        self, rows: Sequence[Row], prefix: tuple[int, ...] = (), parents: Sequence[int] = ()
    ) -> list[tuple[LoglikelihoodResult, ...]]:
        """Each row's readouts; rows hold the tokens after `prefix` and after their parent's (if any)."""
        out: list[tuple[LoglikelihoodResult, ...]] = []
        for i, row in enumerate(rows):
            if not row.readouts:  # a segment: its children bring it into the cache
                out.append(())
                continue
            parent = parents[i] if parents else -1
            before = prefix + (rows[parent].tokens if parent >= 0 else ())
            out.append(self._score_row(before + row.tokens, row, len(before)))
        return out

    def _score_row(self, tokens: tuple[int, ...], row: Row, skip: int) -> tuple[LoglikelihoodResult, ...]:
        # readouts may share positions (single-token choices of one context): several targets each
        targets: dict[int, set[int]] = {}
        for readout in row.readouts:
            if readout.start < skip:
                raise ValueError(f"readout at position {readout.start} lies inside the {skip} tokens before the row")
            for offset, token in enumerate(readout.tokens):
                targets.setdefault(readout.start + offset, set()).add(token)
        scored: dict[tuple[int, int], tuple[float, bool]] = {}  # (position, target) -> (log-prob, is argmax)
        # the last target position is the row's last token at most: decode no further
        for position, logits in self.native.decode(tokens[:max(targets) + 1], sorted(targets)):
            for target, result in _logprobs(logits, targets[position]).items():
                scored[position, target] = result
        results = []
        for readout in row.readouts:
            picked = [scored[readout.start + k, token] for k, token in enumerate(readout.tokens)]
            results.append(LoglikelihoodResult(
                float(sum(lp for lp, _ in picked)), len(picked), all(g for _, g in picked)))
        return tuple(results)

    def generate(self, rows: Sequence[GenRow], on_done: Optional[OnDone] = None,
                 slots: Optional[int] = None) -> list[tuple[Generation, ...]]:
        """Each row's samples in seed order; `on_done(i, samples)` as soon as row i is finished."""
        out: list[tuple[Generation, ...]] = []
        for i, row in enumerate(rows):
            watch = StopWatch(self.tokenizer, row.stop, self.eos_ids, row.max_new_tokens)
            samples = tuple(self._sample(row, seed, watch) for seed in row.seeds)
            out.append(samples)
            if on_done is not None:
                on_done(i, samples)
        return out

    def _sample(self, row: GenRow, seed: int, watch: StopWatch) -> Generation:
        import torch

        generator = row_generator(seed, torch.device("cpu")) if row.do_sample else None
        tokens: list[int] = []
        while True:
            logits = self.native.next_logits(row.tokens + tuple(tokens))
            if generator is None:
                token = int(np.argmax(logits))  # ties: the lowest id, as torch.argmax
            else:
                token = sample_token(torch.from_numpy(logits), row.temperature, row.top_p, generator)
            tokens.append(token)
            reason = watch.finish_reason(tokens)
            if reason is not None:
                return Generation(watch.text(tokens), len(tokens), reason)


class RemoteTokenizer:
    """The child's LlamaCppTokenizer seen from the parent: its ids and template, encode/decode by call."""

    is_fast = False  # no batched encode: TokenizationPolicy calls `encode` per text

    def __init__(self, child: ChildObject, fields: dict[str, Any]):
        self.child = child
        self.bos_token_id: Optional[int] = fields["bos_token_id"]
        self.eos_token_id: Optional[int] = fields["eos_token_id"]
        self.eot_token_id: Optional[int] = fields["eot_token_id"]
        self.bos_token: Optional[str] = fields["bos_token"]
        self.eos_token: Optional[str] = fields["eos_token"]
        self.chat_template: Optional[str] = fields["chat_template"]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Tokenize `text` with llama.cpp; `add_special_tokens` adds those the GGUF asks for (e.g. BOS)."""
        return self.child.call("encode", text, add_special_tokens, doing="tokenizing")

    def decode(self, tokens: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Return the text of `tokens`, control tokens rendered unless `skip_special_tokens`."""
        return self.child.call("decode", list(tokens), skip_special_tokens, doing="detokenizing")


class LlamaCppProcess:
    """The llama.cpp backend the engine holds: a LlamaCppBackend in a child process (see the module docstring)."""

    shares_prefixes = True
    device = "cpu"

    def __init__(self, child: ChildObject):
        self.child = child
        described = child.call("describe", doing="loading the model")
        self.tokenizer = RemoteTokenizer(child, described["tokenizer"])
        self.max_length: int = described["max_length"]
        self.dtype: str = described["dtype"]
        self.fingerprint: str = described["fingerprint"]
        self._config: dict[str, Any] = described["config"]
        self.model_path: str = self._config["model_file"]

    def config_record(self) -> dict:
        """Return what metrics.json records about this backend."""
        return dict(self._config)

    def token_budget(self) -> int:
        """Return tokens per batch: rows run one at a time, so this only sets how often results are stored."""
        return max(_TOKEN_BUDGET, self.max_length)

    def score(
        self, rows: Sequence[Row], prefix: tuple[int, ...] = (), parents: Sequence[int] = ()
    ) -> list[tuple[LoglikelihoodResult, ...]]:
        """Score the batch in the child (see LlamaCppBackend.score)."""
        return self.child.call("score", list(rows), tuple(prefix), list(parents), doing="scoring")

    def generate(self, rows: Sequence[GenRow], on_done: Optional[OnDone] = None,
                 slots: Optional[int] = None) -> list[tuple[Generation, ...]]:
        """Generate row by row in the child, so that each finished row is handed on (and stored) at once."""
        out: list[tuple[Generation, ...]] = []
        for i, row in enumerate(rows):
            (samples,) = self.child.call("generate", [row], doing="generating")
            out.append(samples)
            if on_done is not None:
                on_done(i, samples)
        return out

    def close(self) -> None:
        """Stop the child process (it also stops when this object is collected, or this process exits)."""
        self.child.close()


def _logprobs(logits: np.ndarray, targets: set[int]) -> dict[int, tuple[float, bool]]:
    """Return log softmax(logits)[t] in float64, and whether t is the argmax (lowest id on ties), per target t."""
    x = logits.astype(np.float64)
    top = x.max()
    log_total = top + np.log(np.exp(x - top).sum())
    best = int(np.argmax(x))
    return {t: (float(x[t] - log_total), t == best) for t in targets}


def default_threads() -> int:
    """Every CPU this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_llamacpp_backend(model: Union[str, ModelSource], *, max_length: Optional[int],
                          n_threads: Optional[int] = None) -> LlamaCppProcess:
    """Load a .gguf file into a llama.cpp context of `max_length` tokens (None: the model's trained length).

    `model` is a path, an alias such as `smollm2-135m`, or the source a run resolved.
    """
    if max_length is not None and max_length < 1:
        raise UserError(f"max length must be a positive integer, got {max_length}")
    if n_threads is not None and n_threads < 1:
        raise UserError(f"threads must be a positive integer, got {n_threads}")
    if isinstance(model, str):
        check_gguf_source(classify_source(model))  # before reading the file
    source = as_source(model)
    check_gguf_source(source)
    factory = partial(open_in_child, source.location, identity=source.identity, n_ctx=max_length or 0,
                      n_threads=n_threads or default_threads())
    return LlamaCppProcess(ChildObject(factory, backend=NAME, advice=CRASH_ADVICE))


def open_in_child(path: str, *, identity: str, n_ctx: int, n_threads: int) -> LlamaCppBackend:
    """Load the model (in the child process): llama.cpp reads n_ctx 0 as the model's trained context length."""
    native = NativeModel(path, n_ctx=n_ctx, n_threads=n_threads)
    return LlamaCppBackend(native, path=path, identity=identity, max_length=native.n_ctx)


def check_gguf_source(source: ModelSource) -> None:
    """Raise a UserError unless `source` is a GGUF file: the llama.cpp backend loads nothing else."""
    if source.kind != "gguf":
        raise UserError(f"the llama.cpp backend needs a .gguf model file, got {source.location!r}; "
                        "use the hf backend for transformers models")
