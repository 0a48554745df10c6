"""One GGUF model and one llama.cpp context, through llama-cpp-python's C API bindings.

Not the high-level `llama_cpp.Llama`: with `logits_all` it keeps an [n_ctx, vocab]
float32 array and runs the LM head at every position; here the head runs only at the
positions asked for (`llama_batch.logits` flags) and each is read at once.

The context holds one sequence (id 0) in its key/value cache and remembers its tokens,
so a call keeps the longest common prefix with the previous call's tokens and decodes
only the rest: a shared few-shot block, a generation's prompt (for each sample) and
the tokens generated so far are computed once.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from proctor.backends.extras import LLAMACPP_INSTALL
from proctor.errors import UserError

INSTALL_HINT = LLAMACPP_INSTALL
GGUF_MAGIC = b"GGUF"
BATCH = 512      # tokens per llama_decode call (n_batch = n_ubatch)
_PIECE = 128     # bytes of the first detokenize buffer; grown on demand


def import_llama_cpp() -> Any:
    """Import and return the llama_cpp module, or raise a UserError naming the optional extra that installs it."""
    try:
        import llama_cpp
    except ImportError as e:
        raise UserError(f"the llama.cpp backend needs llama-cpp-python ({e}); install it: {INSTALL_HINT}") from None
    except OSError as e:  # the package is there but its shared library cannot be loaded
        raise UserError(f"llama-cpp-python is installed but its library does not load ({e}); "
                        f"reinstall it: {INSTALL_HINT}") from None
    return llama_cpp


class _Log:
    """llama.cpp's log lines, kept instead of printed: errors explain a failed load."""

    def __init__(self, llama_cpp: Any):
        self.errors: list[str] = []

        def collect(level: int, text: bytes, _user: Any) -> None:
            if level == 3:  # GGML_LOG_LEVEL_ERROR
                line = text.decode("utf-8", errors="replace").strip()
                if line:
                    self.errors.append(line)

        self.callback = llama_cpp.llama_log_callback(collect)  # referenced: C holds the pointer
        llama_cpp.llama_log_set(self.callback, ctypes.c_void_p(0))

    def last_error(self) -> str:
        return self.errors[-1] if self.errors else "llama.cpp gave no reason"


_LOG: Optional[_Log] = None


def check_gguf(path: str) -> None:
    """Raise a UserError unless `path` starts with the GGUF magic bytes (llama.cpp would only say 'failed')."""
    with open(path, "rb") as f:
        head = f.read(len(GGUF_MAGIC))
    if head != GGUF_MAGIC:
        raise UserError(f"{path} is not a GGUF file (it does not start with the bytes 'GGUF'); "
                        "pass a .gguf model file")


class NativeModel:
    """A loaded GGUF model with a context of `n_ctx` tokens on the CPU."""

    def __init__(self, path: str, *, n_ctx: int, n_threads: int, f32_cache: bool = True):
        global _LOG
        lib = self.lib = import_llama_cpp()
        check_gguf(path)
        if _LOG is None:
            _LOG = _Log(lib)
        lib.llama_backend_init()
        _LOG.errors.clear()
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(path.encode(), model_params)
        if not self.model:
            raise UserError(f"llama.cpp cannot load GGUF model {path}: {_LOG.last_error()}")
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = BATCH
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = n_threads
        if f32_cache:  # the default f16 cache rounds every key and value
            params.type_k = params.type_v = lib.GGML_TYPE_F32
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise UserError(f"llama.cpp cannot create a context of {n_ctx} tokens for {path}: {_LOG.last_error()}")
        self.batch = lib.llama_batch_init(BATCH, 0, 1)
        self._finalizer = weakref.finalize(self, _free, lib, self.model, self.ctx, self.batch)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.memory = lib.llama_get_memory(self.ctx)
        self.n_ctx = int(lib.llama_n_ctx(self.ctx))
        self.n_threads = n_threads
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.description = _text(lambda buf, n: lib.llama_model_desc(self.model, buf, n))
        self._cached: tuple[int, ...] = ()   # tokens whose keys/values are in the cache

    def close(self) -> None:
        """Free the batch, context and model now rather than when the object is collected."""
        self._finalizer()

    # -- tokens <-> text

    def token_id(self, token: int) -> Optional[int]:
        """llama.cpp's -1 ("none") as None."""
        return None if token < 0 else int(token)

    def special_tokens(self) -> dict[str, Optional[int]]:
        """Return the vocabulary's "bos", "eos" and "eot" token ids (None where it has none)."""
        lib, vocab = self.lib, self.vocab
        return {"bos": self.token_id(lib.llama_vocab_bos(vocab)), "eos": self.token_id(lib.llama_vocab_eos(vocab)),
                "eot": self.token_id(lib.llama_vocab_eot(vocab))}

    def chat_template(self) -> Optional[str]:
        """Return the GGUF's `tokenizer.chat_template` (None when it ships none)."""
        raw = self.lib.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def adds_bos(self) -> bool:
        """Return whether the vocabulary asks for BOS at the start of tokenized text."""
        return bool(self.lib.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Token ids of `text`; special-token text (e.g. "<|im_end|>") becomes its token, as in HF."""
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            out = (self.lib.llama_token * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), out, size, add_special, True)
            if n >= 0:
                return list(out[:n])
            size = -n

    def detokenize(self, tokens: Sequence[int], *, special: bool) -> str:
        """Return the text of `tokens`; `special`: render control tokens (else they are dropped)."""
        if not tokens:
            return ""
        ids = (self.lib.llama_token * len(tokens))(*tokens)
        size = max(_PIECE, 8 * len(tokens))
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self.lib.llama_detokenize(self.vocab, ids, len(tokens), buf, size, False, special)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", errors="replace")
            size = -n

    # -- logits

    def decode(self, tokens: Sequence[int], wanted: Sequence[int]) -> Iterator[tuple[int, np.ndarray]]:
        """(position, logits) for each wanted position of `tokens`, in increasing order.

        A yielded array is a view into llama.cpp's buffer: use it before the next item.
        """
        tokens = tuple(tokens)
        if len(tokens) > self.n_ctx:
            raise ValueError(f"{len(tokens)} tokens exceed the context of {self.n_ctx}")
        wanted_set = set(wanted)
        if not wanted_set or min(wanted_set) < 0 or max(wanted_set) >= len(tokens):
            raise ValueError("wanted positions must lie within the tokens")
        # a position whose logits are wanted must be decoded by this call
        keep = min(_common_prefix(self._cached, tokens), min(wanted_set))
        self._truncate(keep)
        lib, batch = self.lib, self.batch
        for begin in range(keep, len(tokens), BATCH):
            chunk = tokens[begin:begin + BATCH]
            outputs = []
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = begin + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = (begin + i) in wanted_set
                if batch.logits[i]:
                    outputs.append(i)
            batch.n_tokens = len(chunk)
            code = lib.llama_decode(self.ctx, batch)
            if code != 0:
                self._truncate(begin)
                raise RuntimeError(f"llama_decode failed with code {code}")
            self._cached = tokens[:begin + len(chunk)]
            for i in outputs:
                pointer = lib.llama_get_logits_ith(self.ctx, i)
                yield begin + i, np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def next_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Return a copy of the logits after the last of `tokens`."""
        ((_, logits),) = list(self.decode(tokens, [len(tokens) - 1]))
        return logits.copy()

    def _truncate(self, keep: int) -> None:
        if keep < len(self._cached):
            if not self.lib.llama_memory_seq_rm(self.memory, 0, keep, -1):
                self.lib.llama_memory_clear(self.memory, True)
                keep = 0
            self._cached = self._cached[:keep]


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0])


def _text(fill: Any) -> str:
    buf = ctypes.create_string_buffer(256)
    n = fill(buf, 256)
    return buf.raw[:max(n, 0)].decode("utf-8", errors="replace")


def _free(lib: Any, model: Any, ctx: Any, batch: Any) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)
