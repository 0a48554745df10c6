"""The runtime session of a run, opened together and closed together.

It holds the ranks, backend, result cache, chat template and engine.

`open_runtime` is how every command that runs a model gets its engine — `evaluate`, the
factual probe and the benchmarks (through `session`) alike — so the checks before the model
loads, the order in which torchrun's ranks load it, and what the engine is told are written
once. A command that only re-encodes a run's texts (`proctor export bergson`) opens the
tokenizer alone (`open_tokenizer`): the same resolution, no model load.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Optional, Union

from proctor.backends.options import DTYPES, HFOptions, backend_record
from proctor.backends.sources import ModelSource, resolve_source, resolve_tokenizer
from proctor.cache_dir import results_path
from proctor.defaults import DEFAULT_MAX_LENGTH, DEFAULT_MODEL
from proctor.engine import Engine, ResultCache
from proctor.engine.backend import Backend
from proctor.engine.chat import ChatTemplate
from proctor.engine.distributed import DistributedContext
from proctor.errors import UserError
from proctor.option import boolean, checked_arguments, instance_of, one_of, one_path, some_text
from proctor.options import RunOptions, all_fields


@dataclass(frozen=True)
class ModelArg:
    """What the caller gave as the model, sorted out before any work."""

    name: str                               # as metrics.json records it
    location: Optional[str] = None          # a hub id, path or alias for a backend to load
    loaded: Any = None                      # a transformers model object
    backend: Optional[Backend] = None       # a ready proctor backend
    source: Optional[ModelSource] = None    # where `location` is and what it holds (`check_runtime`)

    @classmethod
    def of(cls, model: Any, backend: str) -> "ModelArg":
        """Sort out `model`: a path or id to load, a transformers model object, or a ready proctor Backend."""
        if isinstance(model, (str, os.PathLike)):
            return cls(os.fspath(model), location=os.fspath(model))
        from proctor.backends.loaded import is_transformers_model  # imports torch: not for a path

        if backend != "hf":
            raise UserError(f"backend={backend!r} loads its model itself; pass the model's path or id, "
                            "not an object")
        if is_transformers_model(model):
            return cls(f"<loaded {type(model).__name__}: {getattr(model, 'name_or_path', '') or 'no path'}>",
                       loaded=model)
        if isinstance(model, Backend):
            return cls(f"<backend {type(model).__name__}>", backend=model)
        raise UserError(f"cannot evaluate a {type(model).__name__}: pass a hub id, a local directory, a .gguf "
                        "file, an alias such as smollm2-135m, a transformers PreTrainedModel or a proctor Backend")


@dataclass
class Runtime:
    """An open session: the engine and what it runs on. Use it inside `open_runtime`'s `with`."""

    options: RunOptions
    model: ModelArg
    ranks: DistributedContext
    backend: Backend
    cache: Optional[ResultCache]
    engine: Engine
    load_seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def template(self) -> Optional[ChatTemplate]:
        """The chat template the engine renders chats with (None when the run has no chats)."""
        return self.engine.policy.chat_template

    @property
    def backend_name(self) -> str:
        """The backend as metrics.json names it (a ready Backend object: its class)."""
        return self.options.backend if self.model.backend is None else type(self.model.backend).__name__

    def backend_config(self) -> dict[str, Any]:
        """Return the backend's own settings for metrics.json's model_config."""
        record = backend_record(self.backend, self.options.backend_options)
        return {k: v for k, v in record.items() if k != "backend"}

    def cache_warnings(self) -> list[str]:
        """Return the result cache's warning when cached rows failed their checksum (none without a cache)."""
        return [] if self.cache is None else self.cache.tampered_warning()


@dataclass(frozen=True)
class Checked:
    """A run's model and result cache, found before any data or model work (`check_runtime`)."""

    model: ModelArg                 # with its source, when a backend loads it
    cache: Optional[ResultCache]    # open; None with cache=False


def check_runtime(model: ModelArg, options: RunOptions) -> Checked:
    """Check everything about the model that can be checked before any data or model work.

    That is where it is and what it holds (unless the caller holds it: it is resolved here,
    once per run), and the result cache, opened here and used by the runtime.
    """
    if model.location is not None:
        model = replace(model, source=options.backend_options.locate(model.location))
    return Checked(model, ResultCache(results_path()) if options.cache else None)


@contextmanager
def open_runtime(checked: Checked, options: RunOptions, *, tokenizer: Any = None, chats: bool,
                 olmes_window: bool = False) -> Iterator[Runtime]:
    """Join the ranks, load the backend, resolve the chat template and build the engine.

    The ranks load the backend in turn (see `DistributedContext.in_turn`); the chat template
    is resolved when `chats` (some prompt is a chat); the engine uses the checked cache.
    `olmes_window`: OLMES specs keep OLMES's window (2048) inside a longer model context unless
    `--max-length` says otherwise. The ranks leave the process group, and the cache is closed,
    on the way out.
    """
    ranks = DistributedContext.from_env()
    started = time.perf_counter()
    warnings: list[str] = []
    model, cache = checked.model, checked.cache
    ranks.start()
    try:
        if model.backend is not None:
            backend = model.backend
        elif model.loaded is not None:
            from proctor.backends.loaded import loaded_backend

            device = getattr(options.backend_options, "device", None)
            dtype = getattr(options.backend_options, "dtype", "auto")
            backend, warnings = loaded_backend(model.loaded, tokenizer, max_length=options.max_length,
                                               device=device, dtype=dtype, cache=options.cache)
            if not backend.identity:
                cache = None
        else:
            chosen = options.backend_options
            if isinstance(chosen, HFOptions):  # a GPU of its own for each rank
                chosen = replace(chosen, device=ranks.device(chosen.device))
            location, source = model.location, model.source
            assert location is not None and source is not None, "check_runtime resolves the model"
            backend = ranks.in_turn(lambda: chosen.open(location, source, max_length=options.max_length,
                                                        seed=options.seed))
        load_seconds = time.perf_counter() - started
        olmes_max_length = (min(options.max_length or DEFAULT_MAX_LENGTH, backend.max_length)
                            if olmes_window else None)
        template = ChatTemplate.resolve(options.template_file, backend.tokenizer) if chats else None
        engine = Engine(backend, batch_size=options.batch_size, cache=cache,
                        progress=options.progress and ranks.is_main, deterministic=options.deterministic,
                        seed=options.seed, distributed=ranks, olmes_max_length=olmes_max_length,
                        chat_template=template)
        yield Runtime(options, model, ranks, backend, cache, engine, load_seconds, warnings)
    finally:
        ranks.stop()
        if checked.cache is not None:
            checked.cache.close()


@checked_arguments(chats=boolean, result_cache=instance_of(ResultCache, "a ResultCache", optional=True))
@contextmanager
def session(model: Any, *, chats: bool = False, result_cache: Optional[ResultCache] = None,
            **keywords: Any) -> Iterator[Runtime]:
    """Open a runtime for `model` from `evaluate`'s keywords, without tasks (a benchmark's way in).

    `model` is what `evaluate` takes (an object passed as a `Backend` runs as it is: open
    one session per setting to compare settings on one loaded model). `chats`: resolve the
    chat template. `result_cache`: a result cache of the caller's instead of the user's (e.g.
    an empty one, to time a first run); `cache=False` runs without one.
    """
    unknown = sorted(set(keywords) - set(all_fields()))
    if unknown:
        raise TypeError(f"session() got unknown keywords: {', '.join(unknown)}")
    options = RunOptions.from_keywords({"model": model, **keywords})
    checked = check_runtime(ModelArg.of(options.model, options.backend), options if result_cache is None
                            else replace(options, cache=False))  # so the user's cache stays shut
    if result_cache is not None:
        checked = replace(checked, cache=result_cache)
    with open_runtime(checked, options, chats=chats) as runtime:
        yield runtime


@dataclass(frozen=True)
class TokenizerSession:
    """The runtime without a model: where a run's tokenizer is, its identity and the tokenizer."""

    source: ModelSource   # `source.tokenizer_identity` is the identity the result cache records
    tokenizer: Any        # a transformers tokenizer


def _tokenizer(name: str, value: Any) -> Union[str, ModelSource]:
    """Accept a tokenizer's directory, .gguf file, alias or hub id (a string or os.PathLike), or a ModelSource."""
    return value if isinstance(value, ModelSource) else one_path(name, value)


@checked_arguments(model=one_path, device=some_text, dtype=one_of(*DTYPES))
def load_model(model: Union[str, "os.PathLike[str]"] = DEFAULT_MODEL, *, device: Optional[str] = None,
               dtype: str = "auto") -> tuple[Any, Any]:
    """Load a model as a training loop holds one: `(model, tokenizer)`, transformers objects, in eval mode.

    `model` is what `proctor run --model` takes (a hub id, a directory, a .gguf file or an
    alias: the embedded GGUF's converted float32 copy, converted on first use); `device` and
    `dtype` are `--device` and `--dtype` (auto: CUDA when available, bfloat16 on a GPU that
    runs it fast, else float32). Raises UserError (one line) when it cannot be found or loaded.
    """
    HFOptions(device=device, dtype=dtype).check()
    from proctor.backends.hf import resolve_device, resolve_dtype
    from proctor.backends.models import load_model as load_source

    where = resolve_device(device)
    loaded = load_source(resolve_source(os.fspath(model)), dtype=resolve_dtype(dtype, where), device=where)
    return loaded.model, loaded.tokenizer


@checked_arguments(tokenizer=_tokenizer)
def open_tokenizer(tokenizer: Union[str, ModelSource]) -> TokenizerSession:
    """Find and load a tokenizer: a directory of tokenizer files, a .gguf file, an alias, a hub id, or a model source.

    A GGUF's tokenizer is its converted copy's (converted on first use). Raises UserError
    (one line) when it cannot be found or loaded.
    """
    from proctor.backends.tokenizers import load_tokenizer

    source = tokenizer if isinstance(tokenizer, ModelSource) else resolve_tokenizer(tokenizer)
    return TokenizerSession(source, load_tokenizer(source))
