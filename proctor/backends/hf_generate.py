"""Generation by continuous batching over shared prefixes, with a transformers decoder.

A fixed number of sample slots decode one token each per step. A sample that ends (EOS,
stop string, length) frees its slot, which takes the next queued sample at once, so the
batch stays full until the queue is empty; then the batch shrinks to its live slots
(once an eighth of them are empty: shrinking copies the live slots' keys and values).

Nothing is prefilled or stored twice (see `decode_attention.py`):

- prompts are grouped by the longest token prefix they share (GSM8K's 8-shot block);
  a group's prefix is prefilled once, and stays while any of its prompts is waiting;
- a prompt's own suffix is prefilled (packed with others, attending to the prefix) when
  its first sample starts, into a prompt slot that each of its samples copies when it
  starts (a sample's slot holds the suffix and its own tokens), until the last one starts.

A step on a Llama decoder (`llama_decode.py`) runs its model directly, and while the
slots are few it also checks drafts (`lookup_drafts.py`): each sample runs its last token
and up to MAX_DRAFT guessed tokens, and keeps a guess only where the token chosen before
it (the argmax, or the sample's own draw) is that guess, so its text is the
one-token-per-step text, in fewer steps (a small model's answer often repeats itself to
the length limit).

Not `model.generate`: that draws every row from one random stream, so a sample would
depend on its batch-mates. Here each sample has its own generator (`decoding.py`) and
every row's computation is its own, so a sample is the same for any slot count, order
or batch-mates.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from proctor.backends.decode_attention import DecodeStep, Prefill, PrefixGroup, SlotCache, length_mask, write_index
from proctor.backends.decoding import StopWatch, greedy_tokens, row_generator, sample_tokens
from proctor.backends.llama_decode import decode, for_decoder
from proctor.backends.lookup_drafts import NgramIndex
from proctor.backends.packed_attention import PackedLayout, packed
from proctor.backends.prefix_kv import run_prefix
from proctor.engine.gen_plan import GenRow
from proctor.engine.prefix import common_prefix_length
from proctor.requests import Generation, all_finished, finished_samples

OnDone = Callable[[int, tuple[Generation, ...]], None]

MIN_SHARED_PREFIX = 32   # tokens; rows sharing less are prefilled whole
PREFILL_TOKENS = 2048    # suffix tokens per packed prefill forward pass
MAX_DRAFT = 7            # drafted tokens per sample and step (prompt lookup)
# Rows (slots x tokens) a drafting step may run. A CPU runs ~6 float32 FLOPs per byte of
# weights it reads, so a matmul of up to ~12 rows costs about what reading its weights
# does, and more rows cost compute: drafts are checked only while that is nearly free.
DRAFT_ROWS = 16


def prefix_groups(rows: Sequence[tuple[int, ...]], minimum: int = MIN_SHARED_PREFIX) -> list[tuple[int, list[int]]]:
    """(shared prefix length, row indices) of groups of rows that share at least `minimum` tokens.

    Sorted, rows sharing a prefix are contiguous; a group runs while its common prefix
    stays that long. Every row keeps at least its last token to itself (its prefill gives
    the first logits); a group of one row shares nothing.
    """
    order = sorted(range(len(rows)), key=lambda i: rows[i])
    groups: list[tuple[int, list[int]]] = []
    for i in order:
        if groups:
            shared, members = groups[-1]
            common = min(shared, common_prefix_length(rows[members[-1]], rows[i]))
            if common >= minimum:
                groups[-1] = (common, members + [i])
                continue
        groups.append((len(rows[i]), [i]))
    out = []
    for shared, members in groups:
        shared = min(shared, min(len(rows[i]) for i in members) - 1) if len(members) > 1 else 0
        out.append((shared, members) if shared >= minimum else (0, members))
    return out


@dataclass
class _Prompt:
    group: int
    offset: int                       # tokens of the group's prefix before the suffix
    suffix: tuple[int, ...]
    waiting: int                      # samples not finished (queued or live)
    queued: int                       # samples not started
    watch: StopWatch
    slot: Optional[int] = None        # prompt slot, from its prefill until its last sample starts
    logits: Optional[torch.Tensor] = None  # at its last token, until its last sample starts


@dataclass
class _Sample:
    row: int
    index: int                        # among its row's seeds
    slot: int
    generator: Optional[torch.Generator]
    tokens: list[int] = field(default_factory=list)
    lookup: Optional[NgramIndex] = None   # its prompt and tokens, for drafts (on the direct Llama step)
    draft_size: int = MAX_DRAFT           # its next draft's length: grows while drafts are kept, shrinks when not


class ContinuousBatch:
    """One run of `rows` through `slots` sample slots; `run()` gives each row's samples in seed order."""

    def __init__(self, decoder: Any, head: Any, tokenizer: Any, eos: frozenset[int], rows: Sequence[GenRow],
                 slots: int, on_done: Optional[OnDone] = None):
        if any(not r.tokens for r in rows):
            raise ValueError("a generation row needs at least one context token")
        self.decoder, self.head, self.rows, self.on_done = decoder, head, rows, on_done
        self.device = next(decoder.parameters()).device
        groups = prefix_groups([r.tokens for r in rows])
        self.prefixes = [rows[members[0]].tokens[:shared] for shared, members in groups]
        self.prefix_kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.group_waiting = [len(members) for _, members in groups]
        self.prompts: list[Optional[_Prompt]] = [None] * len(rows)
        self.queue: deque[tuple[int, int]] = deque()
        for g, (shared, members) in enumerate(groups):
            for i in members:
                row = rows[i]
                watch = StopWatch(tokenizer, row.stop, eos, row.max_new_tokens)
                self.prompts[i] = _Prompt(g, shared, row.tokens[shared:], len(row.seeds), len(row.seeds), watch)
                self.queue.extend((i, j) for j in range(len(row.seeds)))
        self.slots: list[Optional[_Sample]] = [None] * max(1, min(slots, len(self.queue)))
        longest = max(len(p.suffix) for p in self._prompts())
        self.cache = SlotCache(len(self.slots), longest, longest + max(r.max_new_tokens for r in rows) + MAX_DRAFT)
        self.dtype = next(decoder.parameters()).dtype
        self.fast = for_decoder(decoder)
        # a step checks drafts on the direct Llama step only, where the query heads per key/value head are known
        self.query_groups = self.fast.heads // self.fast.kv_heads if self.fast is not None else 1
        self.free_prompt_slots: list[int] = []
        self.prompt_slots_made = 0
        self.results: list[list[Optional[Generation]]] = [[None] * len(r.seeds) for r in rows]

    def _prompts(self) -> list[_Prompt]:
        return [p for p in self.prompts if p is not None]

    def _prompt(self, row: int) -> _Prompt:
        prompt = self.prompts[row]
        assert prompt is not None
        return prompt

    @torch.inference_mode()
    def run(self) -> list[tuple[Generation, ...]]:
        """Fill free slots and decode step by step until every sample has ended; return each row's samples."""
        while True:
            self._fill()
            live = [b for b, s in enumerate(self.slots) if s is not None]
            if not live:
                return all_finished(self.results)
            if not self.queue and len(self.slots) - len(live) >= max(1, len(self.slots) // 8):
                live = self._shrink(live)
            samples: list[_Sample] = [self.slots[b] for b in live]  # type: ignore[misc]
            drafts = self._drafts(samples)
            self._advance(samples, self._step(live, drafts), drafts)

    def _fill(self) -> None:
        """Start queued samples in the free slots, prefilling their prompts as needed."""
        while self.queue and None in self.slots:
            free = [b for b, s in enumerate(self.slots) if s is None][: len(self.queue)]
            starting = [self.queue.popleft() for _ in free]
            self._prefill(list(dict.fromkeys(r for r, _ in starting if self._prompt(r).logits is None)))
            samples = []
            for b, (r, j) in zip(free, starting):
                row, prompt = self.rows[r], self._prompt(r)
                prompt.queued -= 1
                assert prompt.slot is not None
                self.cache.start_sample(b, prompt.slot, len(prompt.suffix))
                generator = row_generator(row.seeds[j], self.device) if row.do_sample else None
                lookup = NgramIndex(row.tokens) if self.fast is not None else None
                samples.append(_Sample(r, j, b, generator, lookup=lookup))
                self.slots[b] = samples[-1]
            logits = torch.stack([self._prompt(s.row).logits for s in samples])  # type: ignore[misc]
            for r in {s.row for s in samples}:
                prompt = self._prompt(r)
                if prompt.queued == 0:  # every sample has its copy of the suffix
                    assert prompt.slot is not None
                    heapq.heappush(self.free_prompt_slots, prompt.slot)
                    prompt.logits, prompt.slot = None, None
            self._advance(samples, logits[:, None], [[] for _ in samples])

    def _prefill(self, rows: list[int]) -> None:
        """Prefill the suffixes of `rows`' prompts, packed, a group and PREFILL_TOKENS at a time."""
        rows = sorted(rows, key=lambda r: self._prompt(r).group)
        while rows:
            group = self._prompt(rows[0]).group
            chunk: list[int] = []
            tokens = 0
            while rows and self._prompt(rows[0]).group == group and (
                    not chunk or tokens + len(self._prompt(rows[0]).suffix) <= PREFILL_TOKENS):
                tokens += len(self._prompt(rows[0]).suffix)
                chunk.append(rows.pop(0))
            self._prefill_chunk(group, [self._prompt(r) for r in chunk])

    def _prefill_chunk(self, group: int, prompts: list[_Prompt]) -> None:
        prefix = self.prefixes[group]
        if prefix and group not in self.prefix_kv:
            self.prefix_kv[group] = run_prefix(self.decoder, prefix, self.device)
        bounds, at = [], 0
        for prompt in prompts:
            prompt.slot = self._take_prompt_slot()
            bounds.append((at, at + len(prompt.suffix)))
            at += len(prompt.suffix)
        ids = torch.tensor([[t for p in prompts for t in p.suffix]], device=self.device)
        positions = torch.cat([torch.arange(len(prefix), len(prefix) + len(p.suffix)) for p in prompts])
        layout = PackedLayout(tuple(bounds), tuple(self.prefix_kv.get(group, ())))
        with packed(Prefill(layout, self.cache, tuple(p.slot for p in prompts))):  # type: ignore[misc]
            hidden = self.decoder(input_ids=ids, position_ids=positions[None].to(self.device),
                                  use_cache=False).last_hidden_state[0]
        logits = self.head(hidden[[b - 1 for _, b in bounds]])
        for prompt, row_logits in zip(prompts, logits):
            prompt.logits = row_logits

    def _take_prompt_slot(self) -> int:
        if self.free_prompt_slots:
            return heapq.heappop(self.free_prompt_slots)
        self.prompt_slots_made += 1
        return self.prompt_slots_made - 1

    def _drafts(self, samples: list[_Sample]) -> list[list[int]]:
        """Each live sample's drafted tokens (its prompt lookup), while the step stays thin."""
        most = min(MAX_DRAFT, DRAFT_ROWS // len(self.slots) - 1)
        if most < 1:
            return [[] for _ in samples]
        return [s.lookup.draft(min(most, s.draft_size, self.rows[s.row].max_new_tokens - len(s.tokens) - 1))
                if s.lookup is not None else [] for s in samples]

    def _step(self, live: list[int], drafts: list[list[int]]) -> torch.Tensor:
        """Logits [live, T, vocab] after one decode step of every slot: each live slot's last token and its draft."""
        n, t = len(self.slots), 1 + max(len(d) for d in drafts)
        ids, positions, write_at = [[0] * t for _ in range(n)], [list(range(t)) for _ in range(n)], [0] * n
        group_rows: dict[int, list[int]] = {}
        for b, draft in zip(live, drafts):
            s = self.slots[b]
            assert s is not None
            prompt = self._prompt(s.row)
            write_at[b] = len(prompt.suffix) + len(s.tokens) - 1
            ids[b][:1 + len(draft)] = [s.tokens[-1], *draft]
            positions[b] = [prompt.offset + write_at[b] + k for k in range(t)]
            if prompt.offset:
                group_rows.setdefault(prompt.group, []).append(b)
        dev = self.device
        at = torch.tensor(write_at, device=dev)
        groups = tuple(PrefixGroup(self.prefix_kv[g], None if len(rows) == n else torch.tensor(rows, device=dev))
                       for g, rows in group_rows.items())
        mask = length_mask(at + 1, max(write_at) + t, self.dtype, t, self.query_groups)
        hidden = decode(self.decoder, self.fast, torch.tensor(ids, device=dev), torch.tensor(positions, device=dev),
                        DecodeStep(self.cache, write_index(at, t), mask, groups))
        if len(live) < n:
            hidden = hidden[live]
        return self.head(hidden.reshape(-1, hidden.shape[-1])).view(len(live), t, -1)

    def _advance(self, samples: list[_Sample], logits: torch.Tensor, drafts: list[list[int]]) -> None:
        """Append each sample's next tokens and end those that are done.

        logits [samples, T, vocab]: at the sample's last token, then at each drafted token.
        The first token is chosen as always (argmax, or a draw); a drafted token is kept
        where it is the token chosen at the position before, and then the token after it is
        chosen in turn from the logits at the drafted token: the argmax, or the sample's next
        draw from its own generator. Each kept token is thus chosen from what one token per
        step computes, and a sample draws exactly as often as it would token by token (once
        per token it keeps), so its text is the one-token-per-step text.
        """
        first = self._choose(samples, logits[:, 0])
        predicted = greedy_tokens(logits[:, 1:]).tolist() if logits.shape[1] > 1 else [[] for _ in samples]
        for i, (sample, token, draft, after) in enumerate(zip(samples, first, drafts, predicted)):
            new, row = [token], self.rows[sample.row]
            for k, drafted in enumerate(draft):
                if drafted != new[-1]:
                    break
                if row.do_sample:
                    assert sample.generator is not None
                    new.extend(sample_tokens(logits[i, k + 1][None], row.temperature, row.top_p, [sample.generator]))
                else:
                    new.append(after[k])
            if draft:
                whole = len(new) > len(draft)
                sample.draft_size = min(MAX_DRAFT, sample.draft_size + 2) if whole else max(1, sample.draft_size - 1)
            for token in new:
                sample.tokens.append(token)
                if sample.lookup is not None:
                    sample.lookup.append(token)
                reason = self._prompt(sample.row).watch.finish_reason(sample.tokens)
                if reason is not None:
                    self._finish(sample, reason)
                    break

    def _choose(self, samples: list[_Sample], logits: torch.Tensor) -> list[int]:
        """Argmax, or for sampled rows a draw with each sample's own generator."""
        chosen = greedy_tokens(logits).tolist()
        by_setting: dict[tuple[float, float], list[int]] = {}
        for k, s in enumerate(samples):
            row = self.rows[s.row]
            if row.do_sample:
                by_setting.setdefault((row.temperature, row.top_p), []).append(k)
        for (temperature, top_p), ks in by_setting.items():
            draws = sample_tokens(logits[ks], temperature, top_p, [samples[k].generator for k in ks])  # type: ignore[misc]
            for k, token in zip(ks, draws):
                chosen[k] = token
        return chosen

    def _finish(self, sample: _Sample, reason: str) -> None:
        prompt = self._prompt(sample.row)
        self.results[sample.row][sample.index] = Generation(prompt.watch.text(sample.tokens), len(sample.tokens), reason)
        self.slots[sample.slot] = None
        prompt.waiting -= 1
        if prompt.waiting == 0:
            self.group_waiting[prompt.group] -= 1
            if self.group_waiting[prompt.group] == 0:
                self.prefix_kv.pop(prompt.group, None)
        if self.on_done is not None and (done := finished_samples(self.results[sample.row])) is not None:
            self.on_done(sample.row, done)

    def _shrink(self, live: list[int]) -> list[int]:
        """Drop the empty slots once nothing is queued: the live ones become slots 0, 1, ..."""
        self.cache.keep_samples(torch.tensor(live, device=self.device))
        self.slots = [self.slots[b] for b in live]
        for b, s in enumerate(self.slots):
            s.slot = b  # type: ignore[union-attr]
        return list(range(len(live)))


def generate_rows(decoder: Any, head: Any, tokenizer: Any, eos: frozenset[int], rows: Sequence[GenRow],
                  slots: int, on_done: Optional[OnDone] = None) -> list[tuple[Generation, ...]]:
    """Each row's samples in seed order; `on_done(i, samples)` as soon as row i has all of its own."""
    if not rows:
        return []
    return ContinuousBatch(decoder, head, tokenizer, eos, rows, slots, on_done).run()
