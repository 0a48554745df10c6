"""Content digests of files and model directories.

A digest names what a file holds, not where it lies: the manifests of proctor's outputs,
the hidden-state store's checksums, the identity of a model (its weights and tokenizer)
and of a data file are all built from these. This module imports nothing from proctor but
its error type, so every layer may use it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import BinaryIO, Optional

from proctor.errors import UserError

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "tokenizer.model", "vocab.txt", "added_tokens.json",
)
_SAMPLE_BLOCKS = 64
_BLOCK = 1 << 16


def file_sha256(path: Path) -> str:
    """Return the sha256 of the whole file at `path`, as 64 hex digits (read in 4 MiB blocks)."""
    with open(path, "rb") as f:
        return stream_sha256(f)[0]


def stream_sha256(f: BinaryIO, *, limit: Optional[int] = None, keep: bool = False) -> tuple[str, int, bytes]:
    """Hash what `f` holds from where it stands, 4 MiB at a time, never more than `limit` bytes.

    Return the sha256 (64 hex digits), how many bytes were read and, with `keep`, those
    bytes (b"" without): a reader that checks a file and then parses it reads it once.
    """
    digest, kept, count = hashlib.sha256(), [], 0
    while limit is None or count < limit:
        block = f.read(1 << 22 if limit is None else min(1 << 22, limit - count))
        if not block:
            break
        digest.update(block)
        count += len(block)
        if keep:
            kept.append(block)
    return digest.hexdigest(), count, b"".join(kept)


def sampled_digest(path: Path) -> str:
    """Size + the first 1 MiB (safetensors header) + 64 evenly spaced 64 KiB blocks.

    Hashing whole multi-GB checkpoints on every load is too slow; checkpoints of one run
    have equal sizes and headers but differ in (almost) every block, which sampling catches.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        for i in range(_SAMPLE_BLOCKS):
            f.seek(size * i // _SAMPLE_BLOCKS)
            digest.update(f.read(_BLOCK))
    return digest.hexdigest()


def directory_identity(directory: Path) -> str:
    """Return a short hash over config, tokenizer files and sampled weight files of a model dir."""
    try:
        return _directory_identity(directory)
    except OSError as e:
        raise UserError(f"cannot read model directory {directory}: {e.strerror or e} "
                        f"({e.filename or directory})") from None


def _directory_identity(directory: Path) -> str:
    """`directory_identity` without the translation of OSError into a UserError."""
    parts: dict[str, str] = {}
    for name in ("config.json", *_TOKENIZER_FILES):
        if (directory / name).is_file():
            parts[name] = file_sha256(directory / name)
    for p in sorted(directory.iterdir()):
        if p.is_file() and p.suffix in _WEIGHT_SUFFIXES:
            parts[p.name] = sampled_digest(p)
    if not any(n.endswith(_WEIGHT_SUFFIXES) for n in parts):
        raise UserError(f"model directory {directory} has no weight files ({', '.join(_WEIGHT_SUFFIXES)})")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def tokenizer_digest(directory: Path) -> str:
    """Return a short hash over the tokenizer files of a directory (UserError when it has none)."""
    # vocab.txt was never part of this digest: adding it would change the identities in caches and records
    names = tuple(n for n in _TOKENIZER_FILES if n != "vocab.txt")
    parts = {n: file_sha256(directory / n) for n in names if (directory / n).is_file()}
    if not parts:
        raise UserError(f"{directory} has no tokenizer files ({', '.join(names)})")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
