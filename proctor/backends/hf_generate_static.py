"""Static batches over a transformers causal LM's own key/value cache.

For models whose attention proctor's packed attention cannot replace (`hf_generate.py`
is the fast path).

Batches of at most `slots` samples, a row's samples cut into consecutive batches where
they do not fit. Each sample row has its own generator (see `decoding.py`). A batch is
the usual loop:

1. Prefill: the batch's distinct prompts, left-padded, with an attention mask and
   position ids counting real tokens only, into a `DynamicCache`; logits kept only at
   the last position.
2. Expand: each prompt's cache rows, last logits and mask are repeated once per sample
   (`batch_select_indices` with repeated indices), so samples share their prefill.
3. Decode: one token per live row per step; a row that ends (EOS, stop string, length)
   leaves the batch at once and its cache rows are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import torch
from transformers import DynamicCache

from proctor.backends.decoding import StopWatch, greedy_tokens, row_generator, sample_token
from proctor.backends.padding import left_padded
from proctor.backends.prefix_kv import cache_keyword
from proctor.engine.gen_plan import GenRow
from proctor.requests import Generation, all_finished, finished_samples

OnDone = Callable[[int, tuple[Generation, ...]], None]


@dataclass
class _Sample:
    """A live sample row: which GenRow it draws for, its generator and its tokens so far."""

    row: int
    watch: StopWatch
    generator: Optional[torch.Generator]
    tokens: list[int] = field(default_factory=list)


def generate_static(model: Any, tokenizer: Any, eos: frozenset[int], rows: Sequence[GenRow], slots: int,
                    on_done: Optional[OnDone] = None) -> list[tuple[Generation, ...]]:
    """Each row's samples, in seed order; `on_done(i, samples)` as soon as row i has all of its own."""
    pieces: list[tuple[int, int, GenRow]] = []   # (row, first seed, the seeds' part of the row)
    for i, row in enumerate(rows):
        for first in range(0, len(row.seeds), slots):
            pieces.append((i, first, replace(row, seeds=row.seeds[first:first + slots])))
    results: list[list[Optional[Generation]]] = [[None] * len(r.seeds) for r in rows]

    def collect(k: int, samples: tuple[Generation, ...]) -> None:
        i, first, _ = batch[k]
        results[i][first:first + len(samples)] = samples
        if on_done is not None and (done := finished_samples(results[i])) is not None:
            on_done(i, done)

    while pieces:
        batch: list[tuple[int, int, GenRow]] = []
        used = 0
        while pieces and (not batch or used + len(pieces[0][2].seeds) <= slots):
            used += len(pieces[0][2].seeds)
            batch.append(pieces.pop(0))
        _generate_batch(model, tokenizer, eos, [b[2] for b in batch], collect)
    return all_finished(results)


@torch.inference_mode()
def _generate_batch(
    model: Any, tokenizer: Any, eos: frozenset[int], rows: Sequence[GenRow], on_done: Optional[OnDone] = None
) -> list[tuple[Generation, ...]]:
    device = next(model.parameters()).device
    keyword = cache_keyword(model)
    cache, logits, mask, positions = _prefill(model, rows, device, keyword)

    samples: list[_Sample] = []
    for i, row in enumerate(rows):
        watch = StopWatch(tokenizer, row.stop, eos, row.max_new_tokens)
        for seed in row.seeds:
            samples.append(_Sample(i, watch, row_generator(seed, device) if row.do_sample else None))
    expand = torch.tensor([s.row for s in samples], device=device)
    cache.batch_select_indices(expand)
    logits, mask, positions = logits[expand], mask[expand], positions[expand]

    results: list[list[Optional[Generation]]] = [[None] * len(r.seeds) for r in rows]
    first_sample = [sum(len(r.seeds) for r in rows[:i]) for i in range(len(rows))]
    live = list(range(len(samples)))   # indices into `samples`, aligned with the batch rows
    while live:
        chosen = _choose(logits, [samples[j] for j in live], rows)
        keep: list[int] = []
        for b, j in enumerate(live):
            s = samples[j]
            s.tokens.append(chosen[b])
            reason = s.watch.finish_reason(s.tokens)
            if reason is None:
                keep.append(b)
                continue
            results[s.row][j - first_sample[s.row]] = Generation(s.watch.text(s.tokens), len(s.tokens), reason)
            if on_done is not None and (done := finished_samples(results[s.row])) is not None:
                on_done(s.row, done)
        if not keep:
            break
        next_ids = torch.tensor([[chosen[b]] for b in keep], device=device)
        if len(keep) < len(live):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, positions = mask[index], positions[index]
        live = [live[b] for b in keep]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        out = model(input_ids=next_ids, attention_mask=mask, position_ids=positions[:, None],
                    use_cache=True, **{keyword: cache})
        logits = out.logits[:, -1, :]
        positions = positions + 1
    return all_finished(results)


def _prefill(model: Any, rows: Sequence[GenRow], device: torch.device,
             keyword: str) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cache, last-position logits, attention mask and next position of each row's prompt."""
    ids, mask, position_ids = left_padded([r.tokens for r in rows], device)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1, **{keyword: cache})
    lengths = mask.sum(dim=1)
    return cache, out.logits[:, -1, :], mask, lengths


def _choose(logits: torch.Tensor, live: Sequence[_Sample], rows: Sequence[GenRow]) -> list[int]:
    """Choose the next token of every live sample row: argmax, or a draw with the row's own generator."""
    chosen = greedy_tokens(logits).tolist()
    for b, s in enumerate(live):
        row = rows[s.row]
        if row.do_sample:
            chosen[b] = sample_token(logits[b], row.temperature, row.top_p, s.generator)  # type: ignore[arg-type]
    return chosen
