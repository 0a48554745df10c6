"""Choosing the next token and recognising the end of a generation; pure, per sample row.

Sampling follows transformers' `TemperatureLogitsWarper` then `TopPLogitsWarper` (vLLM
defines both the same way): scores divided by the temperature; of the tokens sorted by
probability, those whose cumulative probability from the least likely up stays at or
below 1 - top_p are removed, the most likely always kept; then one draw from the
softmax. Scores are the float32 log-softmax of the logits (the same distribution as the
logits themselves, better conditioned). Each row draws with its own `torch.Generator`,
one row at a time, so a sample never depends on the other rows of its batch.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Argmax of each row (ties: the lowest token id, as torch.argmax)."""
    return logits.float().argmax(dim=-1)


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generators: Sequence[torch.Generator]) -> list[int]:
    """One draw per row of [rows, vocab] logits with temperature and top-p, row i with generators[i].

    Every step works row by row, so a row draws the same token whatever rows come with it.
    """
    scores = torch.log_softmax(logits.float(), dim=-1)
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    probs = torch.softmax(scores, dim=-1)
    return [int(torch.multinomial(probs[i], 1, generator=g)) for i, g in enumerate(generators)]


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """One draw from a row's [vocab] logits with temperature and top-p, using `generator`."""
    return sample_tokens(logits[None, :], temperature, top_p, [generator])[0]


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The model's end tokens: the tokenizer's EOS and the generation config's (int or list)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, (list, tuple)):
        ids.update(int(i) for i in config_eos)
    return frozenset(ids)


def row_generator(seed: int, device: torch.device) -> torch.Generator:
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


class StopWatch:
    """Decides, token by token, whether one sample has ended, and its final text."""

    def __init__(self, tokenizer, stops: Sequence[str], eos_ids: frozenset[int], max_new_tokens: int):
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
        """The generation's text as lm-eval returns it: special tokens dropped, cut before the
        first stop; an ending EOS token is dropped even when the tokenizer does not call it special."""
        if tokens and tokens[-1] in self.eos_ids:
            tokens = tokens[:-1]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cut = find_stop(text, self.stops)
        return text if cut is None else text[:cut]
