"""Hidden states of the factual probe's main-forward queries, resumable, checksummed.

Layout (seed factual-probe-output-schema.txt): one `L{l:03d}.npy` float16 [n, d_model] per
decoder block l with l/(L-1) >= 0.4, holding the block's output (`hidden_states[l+1]`) at
the last input token of the generation prompt (position -1 under left padding); rows in
`index.json["query_ids"]` order, which is bank order. `index.json` records progress as
`batches_done` of a fixed length-sorted batch plan, so a killed run resumes and ends with
the same bytes as an uninterrupted one; `complete: true` is written last, after checksums.

With a chat template (beyond the seed) the prompt is the rendered one-user-turn chat
(`prompts.chat_prompt`), so the state is read at the last token of the template's
generation prompt; `index.json` records the template in `chat_template` (null, or absent
in older indexes: the seed's protocol), and a run under another template never resumes it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from proctor.backends.sources import file_sha256
from proctor.engine.progress import Progress
from proctor.errors import UserError, check_positive_int
from proctor.factual.generate import batch_plan, encode_prompts, prompt_lengths, unique_query_ids
from proctor.factual.prompts import (DECODING, adds_special_tokens, describe_template, model_prompts,
                                     template_key, template_record)
from proctor.outputs.atomic import atomic_write_text

if TYPE_CHECKING:
    from proctor.engine.chat import ChatTemplate

FORMAT = "proctor-factual-hidden/1"
INDEX = "index.json"
# index.json lists every query id (~1 MB for the full bank), so it is rewritten at most this often;
# a kill loses at most these seconds of work
CHECKPOINT_SECONDS = 2.0
# what a resumed run must share with the one it continues
_RESUME_KEYS = ("format", "bank_version", "model_identity", "compute_dtype", "layers", "d_model",
                "max_prompt_len", "batch_size", "query_ids")


@dataclass
class HiddenIndex:
    bank_version: str
    model: str
    model_identity: str
    num_layers: int                  # L, decoder blocks of the model
    layers: list[int]                # stored blocks
    d_model: int
    query_ids: list[str]
    batch_size: int
    max_prompt_len: int
    compute_dtype: str               # dtype the model ran in
    chat_template: Optional[dict[str, str]] = None   # origin + digest; None: the seed's no-template prompt
    dtype: str = "float16"           # dtype stored
    batches_done: int = 0
    files: dict[str, str] = field(default_factory=dict)   # file name -> sha256
    complete: bool = False
    format: str = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"


@dataclass
class HiddenStates:
    index: HiddenIndex
    layers: dict[int, np.memmap]     # block -> read-only [n, d_model] float16


def layer_file(layer: int) -> str:
    return f"L{layer:03d}.npy"


def stored_layers(num_layers: int) -> list[int]:
    """Blocks l with l/(L-1) >= 0.4, in exact integer arithmetic."""
    if num_layers < 2:
        return list(range(num_layers))
    return [layer for layer in range(num_layers) if 5 * layer >= 2 * (num_layers - 1)]


def extract_hidden(
    rows: Sequence[Mapping],
    model: Any,
    tokenizer: Any,
    out_dir: Path,
    *,
    model_name: str,
    model_identity: str,
    bank_version: str,
    batch_size: int = 32,
    max_prompt_len: int = DECODING.max_prompt_len,
    progress: bool = True,
    chat_template: Optional[ChatTemplate] = None,
) -> HiddenIndex:
    """Write the hidden states of the `use_for_main_forward` rows into `out_dir`, resuming an unfinished run.

    `chat_template`: read the states of each prompt rendered as a one-user-turn chat."""
    import torch

    check_positive_int("batch size", batch_size)
    out_dir = Path(out_dir)
    main = [row for row in rows if row["use_for_main_forward"]]
    if not main:
        raise UserError("the query bank has no use_for_main_forward rows; nothing to extract hidden states for")
    query_ids = unique_query_ids(main)
    prompts = model_prompts(main, tokenizer, chat_template)
    special = adds_special_tokens(chat_template)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    num_layers = int(config.num_hidden_layers)
    index = HiddenIndex(
        bank_version=bank_version, model=model_name, model_identity=model_identity,
        num_layers=num_layers, layers=stored_layers(num_layers), d_model=int(config.hidden_size),
        query_ids=query_ids, batch_size=batch_size, max_prompt_len=max_prompt_len,
        compute_dtype=str(model.dtype).removeprefix("torch."), chat_template=template_record(chat_template),
    )
    previous = _previous_index(out_dir, index)
    if previous is not None and previous.complete:
        return previous
    if previous is None and out_dir.is_dir() and any(out_dir.iterdir()):
        raise UserError(f"{out_dir} holds files but no hidden-state index; proctor never replaces "
                        "files it did not write: use a fresh output directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays = _open_arrays(out_dir, index) if previous is not None else None
    if previous is None or arrays is None:  # no earlier run, or its files are unusable: start over
        arrays = _create_arrays(out_dir, index)
    else:
        index.batches_done = previous.batches_done
    _write_index(out_dir, index)

    plan = batch_plan(prompt_lengths(tokenizer, prompts, max_prompt_len, special_tokens=special), batch_size)
    bar = Progress(len(main), enabled=progress, description="hidden states")
    bar.advance(sum(len(b) for b in plan[:index.batches_done]))
    saved = time.monotonic()
    try:
        with torch.inference_mode():
            for number in range(index.batches_done, len(plan)):
                batch = plan[number]
                states = last_token_states(model, tokenizer, [prompts[i] for i in batch], index.layers,
                                           max_prompt_len, special_tokens=special)
                for layer, array in arrays.items():
                    array[batch] = states[layer].to(torch.float16).cpu().numpy()
                index.batches_done = number + 1
                if time.monotonic() - saved >= CHECKPOINT_SECONDS:
                    _checkpoint(out_dir, index, arrays)
                    saved = time.monotonic()
                bar.advance(len(batch))
    finally:
        bar.close()

    _checkpoint(out_dir, index, arrays)
    arrays.clear()
    index.files = {layer_file(layer): file_sha256(out_dir / layer_file(layer)) for layer in index.layers}
    _write_index(out_dir, index)
    index.complete = True
    _write_index(out_dir, index)
    return index


def last_token_states(model: Any, tokenizer: Any, prompts: Sequence[str], layers: Sequence[int],
                      max_prompt_len: int = DECODING.max_prompt_len, *,
                      special_tokens: bool = True) -> dict[int, Any]:
    """Block outputs (`hidden_states[l+1]`) at each prompt's last token, [batch, d_model], in the model's dtype.

    Prompts are tokenized as for generation (left truncation, left padding; special tokens
    as `encode_prompts`). Call under `torch.inference_mode()`.
    """
    base = model.base_model  # the decoder stack without the LM head: no [batch, seq, vocab] logits
    enc = encode_prompts(tokenizer, prompts, max_prompt_len, special_tokens=special_tokens).to(base.device)
    mask = enc["attention_mask"]
    # positions count valid tokens only, as generate() does, so left padding does not shift them
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    out = base(input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions,
               output_hidden_states=True, use_cache=False)
    return {layer: out.hidden_states[layer + 1][:, -1, :] for layer in layers}


def _previous_index(out_dir: Path, index: HiddenIndex) -> HiddenIndex | None:
    """The earlier run's index in `out_dir` if it is the same extraction; a different one is an error."""
    path = out_dir / INDEX
    if not path.exists():
        return None
    previous = _read_index(path)
    if template_key(previous.chat_template) != template_key(index.chat_template):
        state = "a finished" if previous.complete else "an unfinished"
        raise UserError(
            f"{out_dir} holds {state} extraction made with {describe_template(previous.chat_template)}, not "
            f"{describe_template(index.chat_template)}; states of two prompt formats are never mixed: "
            f"rerun with the same --chat-template setting, or use a fresh output directory (another --name)")
    for key in _RESUME_KEYS:
        if getattr(previous, key) != getattr(index, key):
            state = "a finished" if previous.complete else "an unfinished"
            raise UserError(
                f"{out_dir} holds {state} extraction with a different {key.replace('_', ' ')}; "
                f"use a fresh output directory or delete {out_dir}")
    return previous


def _create_arrays(out_dir: Path, index: HiddenIndex) -> dict[int, np.memmap]:
    index.batches_done = 0
    shape = (len(index.query_ids), index.d_model)
    return {layer: np.lib.format.open_memmap(out_dir / layer_file(layer), mode="w+", dtype=np.float16, shape=shape)
            for layer in index.layers}


def _open_arrays(out_dir: Path, index: HiddenIndex) -> dict[int, np.memmap] | None:
    """The earlier run's arrays, writable; None if any is missing or not what this run writes."""
    shape = (len(index.query_ids), index.d_model)
    arrays = {}
    for layer in index.layers:
        try:
            array = np.load(out_dir / layer_file(layer), mmap_mode="r+")
        except (OSError, ValueError, EOFError):
            return None
        if array.shape != shape or array.dtype != np.float16:
            return None
        arrays[layer] = array
    return arrays


def _checkpoint(out_dir: Path, index: HiddenIndex, arrays: dict[int, np.memmap]) -> None:
    """Rows on disk first, then the index that counts them as done."""
    for array in arrays.values():
        array.flush()
    _write_index(out_dir, index)


def _write_index(out_dir: Path, index: HiddenIndex) -> None:
    atomic_write_text(out_dir / INDEX, index.to_json())


def _read_index(path: Path) -> HiddenIndex:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError
        return HiddenIndex(**data)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
        raise UserError(f"{path} is not a {FORMAT} index; rerun the extraction into a fresh directory") from None


def load_hidden(out_dir: Path, *, verify_checksums: bool = True) -> HiddenStates:
    """A finished extraction's index and read-only layer arrays; any defect is a UserError naming it."""
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
    return HiddenStates(index=index, layers=layers)
