"""Loading a tokenizer on its own (for prompts, token counts and the OpenAI backend), without any backend's imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proctor.backends.sources import ModelSource
from proctor.errors import UserError


def load_tokenizer(source: ModelSource) -> Any:
    """Load the transformers tokenizer of a tokenizer source (a directory, or a .gguf file).

    A GGUF's tokenizer is its converted copy's.
    """
    from proctor.backends.models import _quiet_transformers, converted_gguf_dir

    _quiet_transformers()
    from transformers import AutoTokenizer

    if source.kind == "gguf":
        directory = converted_gguf_dir(Path(source.location), source.digest)
    else:
        directory = Path(source.location)
    try:
        return AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot load tokenizer {source.location}: {str(e).strip().splitlines()[0]}") from None
