"""Open the backend a run asked for; every backend serves the same engine, tasks and records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from proctor.backends.redact import redact_url
from proctor.engine.backend import Backend
from proctor.errors import UserError

BACKENDS = ("hf", "llamacpp", "openai", "vllm")


@dataclass(frozen=True)
class BackendOptions:
    backend: str = "hf"
    model: str = "smollm2-135m"
    max_length: Optional[int] = 2048        # None: the model's context length (lm-eval's default)
    device: Optional[str] = None            # hf
    dtype: str = "auto"                     # hf, vllm
    seed: int = 0                           # vllm's engine seed
    base_url: Optional[str] = None          # openai
    tokenizer: Optional[str] = None         # openai: the served model's tokenizer
    concurrency: Optional[int] = None       # openai: requests in flight
    openai_scoring: str = "auto"            # openai: echo, forced or auto (probe the server)
    openai_extra: Optional[dict] = None     # openai: extra request fields (e.g. llama.cpp's repeat_penalty)
    threads: Optional[int] = None           # llamacpp
    vllm_for_mc: bool = False               # vllm: OLMES single-token fast path
    tensor_parallel_size: int = 1           # vllm
    gpu_memory_utilization: Optional[float] = None  # vllm (GPU default 0.9; CPU: proctor sizes the cache)


def _refuse(options: BackendOptions, **given: Any) -> None:
    """Options that belong to other backends are an error, not silently ignored."""
    for flag, value in given.items():
        if value:
            raise UserError(f"--{flag.replace('_', '-')} does not apply to --backend {options.backend}")


def check_backend_options(options: BackendOptions, *, locate_model: bool = True) -> None:
    """Everything about the backend options that can be checked without loading anything
    heavy: options of another backend, the device, where the model is (unless the caller
    holds the model already: `locate_model=False`), vLLM's fractions."""
    o = options
    if o.backend not in BACKENDS:
        raise UserError(f"unknown backend {o.backend!r}; choose from {', '.join(BACKENDS)}")
    if o.backend != "vllm":
        _refuse(o, vllm_for_mc=o.vllm_for_mc, tensor_parallel_size=o.tensor_parallel_size != 1)
    if o.backend != "openai":
        _refuse(o, base_url=o.base_url, tokenizer=o.tokenizer, concurrency=o.concurrency,
                openai_scoring=o.openai_scoring != "auto", openai_extra=o.openai_extra)
    if o.backend != "llamacpp":
        _refuse(o, threads=o.threads)
    if o.backend != "vllm":
        _refuse(o, gpu_memory_utilization=o.gpu_memory_utilization is not None)
    elif o.gpu_memory_utilization is not None and not 0 < o.gpu_memory_utilization <= 1:
        raise UserError(f"--gpu-memory-utilization must be a fraction in (0, 1], got {o.gpu_memory_utilization}")
    if o.backend != "hf" and o.device not in ((None, "cuda", "cpu") if o.backend == "vllm" else (None, "cpu")):
        raise UserError(f"--device does not apply to --backend {o.backend}")
    if o.backend == "hf":
        from proctor.backends.hf import resolve_device

        resolve_device(o.device)
    if not locate_model:
        return
    if o.backend in ("hf", "vllm"):
        from proctor.backends.models import check_available

        check_available(o.model)
    elif o.backend == "llamacpp":
        from proctor.backends.sources import resolve_source

        resolve_source(o.model)


def open_backend(options: BackendOptions) -> Backend:
    """The loaded backend (UserError for an unknown backend or options of another backend)."""
    o = options
    check_backend_options(o)
    if o.backend == "hf":
        from proctor.backends.hf import load_backend

        return load_backend(o.model, device=o.device, dtype=o.dtype, max_length=o.max_length)
    if o.backend == "llamacpp":
        from proctor.backends.llamacpp import load_llamacpp_backend

        return load_llamacpp_backend(o.model, max_length=o.max_length, n_threads=o.threads)
    if o.backend == "openai":
        from proctor.backends.openai_api import load_openai_backend

        if not o.base_url:
            raise UserError("--backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
        extra: dict[str, Any] = {} if o.concurrency is None else {"concurrency": o.concurrency}
        # lm-eval's API models default to 2048 tokens: a server does not say its model's length
        return load_openai_backend(o.base_url, o.model, tokenizer=o.tokenizer, max_length=o.max_length or 2048,
                                   scoring=o.openai_scoring, extra_body=o.openai_extra, **extra)
    from proctor.backends.vllm_backend import load_vllm_backend

    return load_vllm_backend(o.model, dtype=o.dtype, max_length=o.max_length, vllm_for_mc=o.vllm_for_mc,
                             tensor_parallel_size=o.tensor_parallel_size,
                             gpu_memory_utilization=o.gpu_memory_utilization, seed=o.seed, device=o.device)


def backend_record(backend: Backend, options: BackendOptions) -> dict[str, Any]:
    """What metrics.json records about the backend (its own record where it keeps one)."""
    record = {"backend": options.backend, **backend.config_record()}
    if options.base_url:
        record["base_url"] = redact_url(options.base_url)
    return record
