"""Load a transformers causal LM + tokenizer from a ModelSource; convert GGUF once and cache it.

transformers de-quantizes a GGUF file on every load (~40 s for SmolLM2-135M) and refuses
to `save_pretrained` such a model, so the first load copies its weights into a plain
model built from the config and saves that (float32) under
`$PROCTOR_CACHE_DIR/models/<name>-<sha256[:12]>`; later loads take about a second.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.backends.sources import ModelSource
from proctor.cache_dir import cache_root
from proctor.errors import UserError
from proctor.outputs.atomic import make_stage, unmark

_MARKER = "proctor-gguf.json"


@dataclass
class LoadedModel:
    """A model and tokenizer loaded from a ModelSource, with the identity results are cached under."""

    model: Any          # transformers PreTrainedModel, eval mode, on its device
    tokenizer: Any      # transformers tokenizer
    identity: str       # weights + tokenizer identity, independent of where they lie


def load_model(source: ModelSource, *, dtype: Any, device: Any) -> LoadedModel:
    """Load weights in `dtype` onto `device`; any loading failure is a one-line UserError."""
    _quiet_transformers()
    directory, identity = model_directory(source)
    model, tokenizer = _from_pretrained(directory, dtype=dtype, device=device, shown=source.location)
    return LoadedModel(model=model, tokenizer=tokenizer, identity=identity)


def model_directory(source: ModelSource) -> tuple[Path, str]:
    """Return a transformers directory holding the model (a GGUF converted once), and its identity.

    The identity is of weights + tokenizer, independent of where they lie.
    """
    if source.kind == "gguf":
        return converted_gguf_dir(Path(source.location), source.digest), source.identity
    if source.kind == "dir":
        return Path(source.location), source.identity
    assert source.files is not None, "resolve_source gives a hub model's snapshot"
    return Path(source.files), source.identity


def _from_pretrained(directory: Path, *, dtype: Any, device: Any, shown: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype)
    except Exception as e:  # a user's files: truncated or garbage weights raise many types
        raise UserError(f"cannot load model {shown}: {_first_line(e)}") from None
    return model.to(device).eval(), tokenizer


def converted_gguf_dir(gguf: Path, sha: str) -> Path:
    """Return the cached plain-transformers copy of a GGUF model, converting it on first use."""
    target = cache_root() / "models" / f"{gguf.stem}-{sha[:12]}"
    if (target / _MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_stage(target.parent, target.name, "convert")  # a killed conversion's is removed here
    try:
        _convert_gguf(gguf, tmp)
        unmark(tmp)
        (tmp / _MARKER).write_text(json.dumps({"gguf": str(gguf), "sha256": sha}) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / _MARKER).is_file():  # not a concurrent conversion that won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except Exception as e:  # a user's file: a truncated or foreign GGUF raises many types
        raise UserError(f"cannot load GGUF model {gguf}: {_first_line(e)}") from None
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def _quiet_transformers() -> None:
    """Import transformers (`import_transformers`), and silence its load bars and notices.

    They would interleave with proctor's own progress.
    """
    from proctor.backends.lean_transformers import import_transformers

    import_transformers()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
