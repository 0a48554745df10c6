"""A transformers model the caller already loaded, as an HFBackend (`proctor.evaluate(model)`).

It runs through the same engine as a model proctor loads (packing, shared prefixes, the
result cache). Its cache identity is a digest of its weights and tokenizer, never its
`id()`: the same weights give the same results whatever object holds them. Hashing reads
every weight once (about a second per GB); past `MAX_HASHED_BYTES` it is skipped and the
run does not use the result cache (a warning says so).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

from proctor.backends.hf import HFBackend
from proctor.errors import UserError

MAX_HASHED_BYTES = 8 * 2**30


def is_transformers_model(model: Any) -> bool:
    """Return whether `model` is a transformers PreTrainedModel (False when transformers is not installed)."""
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(model, PreTrainedModel)


def weights_bytes(model: Any) -> int:
    """Return the size in bytes of every tensor in the model's state dict."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def weights_digest(model: Any) -> str:
    """sha256 over every tensor of the state dict: name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name].detach()
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        flat = tensor.reshape(-1).contiguous().cpu()
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """Return the sha256 of what decides the token ids.

    That is the tokenizer's class, its full definition (fast tokenizers) or else its
    vocabulary, its special tokens and its chat template.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)  # slow tokenizers have none
    definition = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    payload = json.dumps([type(tokenizer).__name__, definition, tokenizer.special_tokens_map,
                          getattr(tokenizer, "chat_template", None)], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def tokenizer_for(model: Any, tokenizer: Any) -> Any:
    """Return the tokenizer given, else the one saved beside the model's weights (`model.name_or_path`).

    `tokenizer` may be an object, or a path / hub id to load one from.
    """
    from transformers import AutoTokenizer

    if tokenizer is not None and not isinstance(tokenizer, str):
        return tokenizer
    source = tokenizer or getattr(model, "name_or_path", "")
    if not source:
        raise UserError("the model was given as an object without a tokenizer; pass tokenizer= (a tokenizer "
                        "object or the directory / hub id it loads from)")
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as e:  # many types: missing files, offline hub, bad json
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        raise UserError(f"cannot load a tokenizer from {source!r} ({first}); pass tokenizer=") from None


def loaded_backend(model: Any, tokenizer: Any, *, max_length: Optional[int], device: Optional[str], dtype: str,
                   cache: bool) -> tuple[HFBackend, list[str]]:
    """Return the backend for a loaded model, and the warnings its run must carry.

    The model is put in eval mode and runs where it is, in its own dtype: `device` and
    `dtype` may only restate them (moving or casting the caller's model is theirs to do).
    """
    first = next(model.parameters())
    if device is not None and device != str(first.device) and device != first.device.type:
        raise UserError(f"the model is on {first.device}, not {device}; move it there first "
                        f"(model.to({device!r})) or leave device unset")
    wanted = str(first.dtype).removeprefix("torch.")
    if dtype not in ("auto", wanted):
        raise UserError(f"the model's weights are {wanted}, not {dtype}; cast it first "
                        f"(model.to(torch.{dtype})) or leave dtype='auto'")
    tok = tokenizer_for(model, tokenizer)
    warnings: list[str] = []
    size = weights_bytes(model)
    if cache and size <= MAX_HASHED_BYTES:
        identity = f"weights:{weights_digest(model)}|tokenizer:{tokenizer_digest(tok)}"
    else:
        identity = ""
        if cache:
            warnings.append(f"the loaded model's {size / 2**30:.1f} GiB of weights were not hashed to "
                            f"identify it, so this run did not use the result cache; pass the model's "
                            f"path instead to cache its results")
    return HFBackend(model, tok, identity=identity, max_length=max_length), warnings
