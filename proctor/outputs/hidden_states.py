"""A directory of hidden states: one memory-mapped `L{l:03d}.npy` per block, and `index.json`.

Layout (seed factual-probe-output-schema.txt): `L{l:03d}.npy` is float16 [n, d_model],
the output of block l at each query's last prompt token, rows in `index.json["query_ids"]`
order. `index.json` is written first with `complete: false`, then the arrays are filled
and flushed, then their sha256s are recorded, and `complete: true` is written last: a
directory whose index says complete holds exactly the checksummed arrays. An unfinished
one (a killed run) is rewritten by the next run of the same extraction, which reads the
states back from the result cache; an extraction of anything else is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from proctor.digests import file_sha256
from proctor.errors import UserError
from proctor.outputs.atomic import atomic_write_text

FORMAT = "proctor-factual-hidden/2"
READABLE = (FORMAT, "proctor-factual-hidden/1")  # /1: written by proctor before the engine served states
INDEX = "index.json"
# what a rerun must share with the extraction it finds (besides the chat template, checked first)
IDENTITY_KEYS = ("bank_version", "model_identity", "compute_dtype", "layers", "d_model", "max_prompt_len",
                 "query_ids")


@dataclass
class HiddenIndex:
    """The contents of `index.json`: what was extracted, from which model, and the arrays' checksums."""

    bank_version: str
    model: str
    model_identity: str              # the backend's fingerprint: weights, dtype, device type, window
    num_layers: int                  # L, decoder blocks of the model
    layers: list[int]                # stored blocks
    d_model: int
    query_ids: list[str]
    max_prompt_len: int
    compute_dtype: str               # dtype the model ran in
    chat_template: Optional[dict[str, str]] = None   # origin + digest; None: the seed's no-template prompt
    dtype: str = "float16"           # dtype stored
    files: dict[str, str] = field(default_factory=dict)   # file name -> sha256
    complete: bool = False
    format: str = FORMAT

    def to_json(self) -> str:
        """Render the index as the text of `index.json`."""
        return json.dumps(asdict(self), indent=1) + "\n"


@dataclass
class HiddenStateFiles:
    """A finished extraction as `load_hidden` opens it: its index and its memory-mapped layer arrays."""

    index: HiddenIndex
    layers: dict[int, np.memmap]     # block -> read-only [n, d_model] float16


def layer_file(layer: int) -> str:
    """Return the file name of block `layer`'s array."""
    return f"L{layer:03d}.npy"


def finished_extraction(out_dir: Path, index: HiddenIndex, describe: Callable[[Any], str]) -> Optional[HiddenIndex]:
    """Return the complete extraction of `index` already in `out_dir`, or None.

    None when there is none or only an unfinished one of it. Anything else there is a UserError:
    another extraction (by `describe` of its prompt format when that is the difference), or files
    without an index.
    """
    path = out_dir / INDEX
    if not path.exists():
        if out_dir.is_dir() and any(out_dir.iterdir()):
            raise UserError(f"{out_dir} holds files but no hidden-state index; proctor never replaces "
                            "files it did not write: use a fresh output directory")
        return None
    previous = _read_index(path)
    state = "a finished" if previous.complete else "an unfinished"
    if previous.chat_template != index.chat_template:
        raise UserError(
            f"{out_dir} holds {state} extraction made with {describe(previous.chat_template)}, not "
            f"{describe(index.chat_template)}; states of two prompt formats are never mixed: "
            f"rerun with the same --chat-template setting, or use a fresh output directory (another --name)")
    for key in IDENTITY_KEYS:
        if getattr(previous, key) != getattr(index, key):
            raise UserError(
                f"{out_dir} holds {state} extraction with a different {key.replace('_', ' ')}; "
                f"use a fresh output directory or delete {out_dir}")
    return previous if previous.complete else None


class HiddenStateWriter:
    """Fills a directory's layer files row by row (`put`), then checksums them (`finish`).

    Opening it writes `index.json` with `complete: false` and creates the arrays, replacing
    whatever unfinished extraction is there: call `finished_extraction` first.
    """

    def __init__(self, out_dir: Path, index: HiddenIndex):
        """Write the unfinished index to `out_dir` and create the layer arrays, one row per query."""
        self.out_dir, self.index = out_dir, index
        out_dir.mkdir(parents=True, exist_ok=True)
        index.complete, index.files = False, {}
        _write_index(out_dir, index)
        shape = (len(index.query_ids), index.d_model)
        self.arrays = [np.lib.format.open_memmap(out_dir / layer_file(layer), mode="w+", dtype=np.float16,
                                                 shape=shape) for layer in index.layers]
        self.filled = np.zeros(len(index.query_ids), dtype=bool)

    def put(self, row: int, states: np.ndarray) -> None:
        """Row `row`'s states: [len(layers), d_model]."""
        for array, state in zip(self.arrays, states):
            array[row] = state
        self.filled[row] = True

    def finish(self) -> HiddenIndex:
        """Flush, record each file's sha256, then mark the index complete (last)."""
        if not self.filled.all():
            raise ValueError(f"{int((~self.filled).sum())} of {len(self.filled)} rows of hidden states were not set")
        for array in self.arrays:
            array.flush()
        self.arrays.clear()
        index = self.index
        index.files = {layer_file(layer): file_sha256(self.out_dir / layer_file(layer)) for layer in index.layers}
        _write_index(self.out_dir, index)
        index.complete = True
        _write_index(self.out_dir, index)
        return index


def _write_index(out_dir: Path, index: HiddenIndex) -> None:
    atomic_write_text(out_dir / INDEX, index.to_json())


def _read_index(path: Path) -> HiddenIndex:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") not in READABLE:
            raise ValueError
        known = {f.name for f in fields(HiddenIndex)}
        index = HiddenIndex(**{k: v for k, v in data.items() if k in known})  # /1 also kept batch fields
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError, RecursionError):
        raise UserError(f"{path} is not a {FORMAT} index; rerun the extraction into a fresh directory") from None
    if not isinstance(index.query_ids, list) or not isinstance(index.layers, list):
        raise UserError(f"{path} is not a {FORMAT} index; rerun the extraction into a fresh directory")
    return index


def load_hidden(out_dir: Path, *, verify_checksums: bool = True) -> HiddenStateFiles:
    """Open a finished extraction's index and read-only layer arrays; any defect is a UserError naming it."""
    out_dir = Path(out_dir)
    path = out_dir / INDEX
    if not path.is_file():
        raise UserError(f"no {INDEX} in {out_dir}: extract the hidden states first")
    index = _read_index(path)
    if not index.complete:
        raise UserError(f"hidden states in {out_dir}: extraction did not finish: rerun the same command to resume")
    shape = (len(index.query_ids), index.d_model)
    layers = {}
    for layer in index.layers:
        name = layer_file(layer)
        file = out_dir / name
        if not file.is_file():
            raise UserError(f"hidden-state file {file} is missing; rerun the extraction into a fresh directory")
        try:
            array = np.load(file, mmap_mode="r")
        except (OSError, ValueError, EOFError) as e:
            raise UserError(f"hidden-state file {file} is truncated or corrupt ({e}); "
                            f"rerun the extraction into a fresh directory") from None
        if array.shape != shape or array.dtype != np.float16:
            raise UserError(f"hidden-state file {file} holds {array.dtype} {array.shape}, expected float16 "
                            f"{shape}; rerun the extraction into a fresh directory")
        if verify_checksums and file_sha256(file) != index.files.get(name):
            raise UserError(f"hidden-state file {file} does not match its checksum in {INDEX}; "
                            f"it was changed or damaged: rerun the extraction into a fresh directory")
        layers[layer] = array
    return HiddenStateFiles(index=index, layers=layers)

