"""Hidden states of the factual probe's main-forward queries, through the engine.

Layout (seed factual-probe-output-schema.txt, written by `proctor.outputs.hidden_states`):
one float16 `L{l:03d}.npy` [n, d_model] per decoder block l with l/(L-1) >= 0.4, holding
the block's output (`hidden_states[l+1]`) at the last token of the generation prompt
(left padding: position -1 for every row), rows in bank order; `index.json` records the
order, layers, checksums and the `complete` flag.

Each main-forward row is one `HiddenStates` request for the prompt its generation reads
(the same tokens: `generate.factual_request`), so states and generations share one
tokenization. The engine batches them and keeps each batch's states in the result cache,
so a killed extraction resumes there and ends with the same bytes; each state goes into
the memory-mapped files as it comes, so memory does not grow with the bank. With a chat template
(beyond the seed) the state is read at the last token of the template's generation
prompt, and `index.json` records the template; a run under another one never reuses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from proctor.engine.hidden import hidden_state_backend
from proctor.errors import UserError
from proctor.factual.generate import factual_request, unique_query_ids
from proctor.factual.prompts import DECODING, describe_template, template_record
from proctor.outputs.hidden_states import (
    HiddenIndex,
    HiddenStateFiles,
    HiddenStateWriter,
    finished_extraction,
    load_hidden,
)
from proctor.requests import HiddenStates

if TYPE_CHECKING:
    from proctor.engine import Engine

__all__ = ["HiddenStateFiles", "extract_hidden", "hidden_request", "load_hidden", "stored_layers"]


def stored_layers(num_layers: int) -> list[int]:
    """Blocks l with l/(L-1) >= 0.4, in exact integer arithmetic."""
    if num_layers < 2:
        return list(range(num_layers))
    return [layer for layer in range(num_layers) if 5 * layer >= 2 * (num_layers - 1)]


def hidden_request(row: Mapping, layers: Sequence[int], chat: bool) -> HiddenStates:
    """Build the request for the states of the prompt a row's generation reads, at its last token, as float16."""
    prompt = factual_request(row, chat)
    return HiddenStates(prompt.context, tuple(layers), max_prompt_tokens=prompt.max_prompt_tokens,
                        dtype="float16", policy=prompt.policy)


def extract_hidden(rows: Sequence[Mapping], engine: Engine, out_dir: Path, *, model_name: str,
                   bank_version: str, write: bool = True) -> HiddenIndex:
    """Write the hidden states of the `use_for_main_forward` rows into `out_dir`.

    Nothing is done when it holds this extraction finished. `write=False` (the other ranks of
    a torchrun launch) computes but writes nothing.
    """
    out_dir = Path(out_dir)
    main = [row for row in rows if row["use_for_main_forward"]]
    if not main:
        raise UserError("the query bank has no use_for_main_forward rows; nothing to extract hidden states for")
    num_layers, d_model = hidden_state_backend(engine.backend).decoder_shape()
    template = engine.policy.chat_template
    backend = engine.backend
    index = HiddenIndex(
        bank_version=bank_version, model=model_name, model_identity=backend.fingerprint,
        num_layers=num_layers, layers=stored_layers(num_layers), d_model=d_model,
        query_ids=unique_query_ids(main), max_prompt_len=DECODING.max_prompt_len,
        compute_dtype=str(backend.dtype).removeprefix("torch."), chat_template=template_record(template),
    )
    previous = finished_extraction(out_dir, index, describe_template) if write else None
    if engine.distributed.main_says(previous is not None):
        return previous or index
    requests = [hidden_request(row, index.layers, template is not None) for row in main]
    if not write:
        engine.stream_hidden_states(requests, lambda i, result: None)
        return index
    writer = HiddenStateWriter(out_dir, index)  # each state goes into its file as it comes
    engine.stream_hidden_states(requests, lambda i, result: writer.put(i, result.states))
    return writer.finish()
