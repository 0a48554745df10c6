"""Choosing the next token and recognising the end of a generation; pure, per sample row.

Sampling draws from the distribution transformers' `TemperatureLogitsWarper` then
`TopPLogitsWarper` define (vLLM defines both the same way): the softmax of the logits
divided by the temperature, restricted to the most likely tokens whose probability mass
before them (in decreasing order) is below top_p, the most likely always kept, and
renormalised. The draw is one uniform number from the row's own `torch.Generator`,
inverted through that distribution's cumulative sum (in decreasing order of probability).
Only the top candidates are sorted (`torch.topk`, widened until the cut lies inside
them), not the whole vocabulary, and every step works row by row, so a row draws the
same token whatever rows come with it.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import torch


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Argmax of each row (ties: the lowest token id, as torch.argmax)."""
    return logits.float().argmax(dim=-1)


_CANDIDATES = 256  # tokens sorted first for top-p; doubled until the cut lies inside them


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generators: Sequence[torch.Generator]) -> list[int]:
    """One draw per row of [rows, vocab] logits with temperature and top-p, row i with generators[i]."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        index, kept = None, probs
    else:
        k = min(_CANDIDATES, probs.shape[-1])
        while True:
            top, index = torch.topk(probs, k, dim=-1)
            before = top.cumsum(dim=-1) - top        # mass of the more likely candidates
            keep = before < top_p
            keep[:, 0] = True
            if k == probs.shape[-1] or not bool(keep[:, -1].any()):
                break
            k = min(2 * k, probs.shape[-1])
        kept = top * keep
    cumulative = kept.cumsum(dim=-1)
    chosen = []
    for i, generator in enumerate(generators):
        u = torch.rand((), generator=generator, device=probs.device) * cumulative[i, -1]
        j = min(int(torch.searchsorted(cumulative[i], u[None], right=True)), kept.shape[-1] - 1)
        while kept[i, j] == 0:  # u landed on the last kept token's upper edge: take it
            j -= 1
        chosen.append(j if index is None else int(index[i, j]))
    return chosen


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """One draw from a row's [vocab] logits with temperature and top-p, using `generator`."""
    return sample_tokens(logits[None, :], temperature, top_p, [generator])[0]


def eos_token_ids(tokenizer: Any, configured: Any) -> frozenset[int]:
    """Return the model's end tokens: the tokenizer's EOS and the generation config's `eos_token_id`.

    `configured` is an int, a list of them, or None.
    """
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, (list, tuple)):
        ids.update(int(i) for i in configured)
    return frozenset(ids)


def model_eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """`eos_token_ids` of a transformers model (its `generation_config`)."""
    return eos_token_ids(tokenizer, getattr(getattr(model, "generation_config", None), "eos_token_id", None))


def row_generator(seed: int, device: torch.device) -> torch.Generator:
    """Return a generator on `device` seeded with `seed`, for one sample row's draws."""
    return torch.Generator(device=device).manual_seed(seed)


def find_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    """Where the earliest of `stops` begins in `text` (empty stop strings never match)."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(found) if found else None


def stop_window(stops: Sequence[str]) -> int:
    """Tokens to decode at the end of a generation to see any stop string it just completed.

    A byte-level token may hold a fraction of a character, so a stop string of c
    characters spans at most 4c tokens (UTF-8 bytes); two more cover a boundary merge.
    """
    return 4 * max((len(s) for s in stops), default=0) + 2


class TextDecoder(Protocol):
    """The slice of a tokenizer `StopWatch` needs."""

    def decode(self, tokens: list[int], skip_special_tokens: bool = ...) -> str:
        """Return the text of `tokens`."""
        ...


class StopWatch:
    """Decides, token by token, whether one sample has ended, and its final text."""

    def __init__(self, tokenizer: TextDecoder, stops: Sequence[str], eos_ids: frozenset[int],
                 max_new_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.stops = tuple(s for s in stops if s)
        self.window = stop_window(self.stops)
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens

    def finish_reason(self, tokens: list[int]) -> Optional[str]:
        """"eos", "stop" or "length" once `tokens` (all generated so far) end the sample, else None."""
        if tokens[-1] in self.eos_ids:
            return "eos"
        if self.stops:
            # special tokens kept: a stop string like "</s>" may be one (lm-eval's stopping criterion)
            tail = self.tokenizer.decode(tokens[-self.window:], skip_special_tokens=False)
            if find_stop(tail, self.stops) is not None:
                return "stop"
        if len(tokens) >= self.max_new_tokens:
            return "length"
        return None

    def text(self, tokens: list[int]) -> str:
        """Return the generation's text as lm-eval returns it.

        Special tokens are dropped and the text is cut before the first stop; an ending EOS token
        is dropped even when the tokenizer does not call it special.
        """
        if tokens and tokens[-1] in self.eos_ids:
            tokens = tokens[:-1]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cut = find_stop(text, self.stops)
        return text if cut is None else text[:cut]
