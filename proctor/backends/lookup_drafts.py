"""Draft tokens by prompt lookup: what followed the sequence's last n tokens before.

A sample often repeats what it has already seen: the numbers and phrases of its
question, the few-shot answers' wording, its own earlier sentences, and for a small
model a loop that runs to the length limit. What followed the last earlier occurrence of
its final `n` tokens is a cheap guess at what comes next. A decode step then runs the
sample's last token and its draft together and keeps each drafted token only where the
token chosen at the position before (the argmax, or the sample's draw) is that token
(`hf_generate`), so the text is the one token-by-token decoding gives, in fewer steps.
"""

from __future__ import annotations

from typing import Sequence


class NgramIndex:
    """A growing token sequence, and where each of its n-grams was last followed by a token.

    Several lengths n are indexed and the longest final n-gram seen before decides the
    draft: in a loop whose period holds a short n-gram twice with different successors
    ("of that much is 1/2 ... of that much is 1/4"), a longer context tells them apart.
    """

    def __init__(self, tokens: Sequence[int], lengths: Sequence[int] = (8, 3)):
        self.lengths = sorted(lengths, reverse=True)
        self.tokens: list[int] = []
        # per length: n-gram -> index of the token that last followed it
        self.after: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.lengths}
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        """Extend the sequence by one token."""
        self.tokens.append(token)
        end = len(self.tokens) - 1
        for n in self.lengths:
            if end >= n:
                self.after[n][tuple(self.tokens[end - n:end])] = end

    def draft(self, most: int) -> list[int]:
        """`most` tokens that followed the final n-gram's last earlier occurrence ([] if none).

        Past the sequence's end the guess goes on as the sequence would if it repeats
        (a loop's period is the distance between the two occurrences).
        """
        if most <= 0:
            return []
        start = next((self.after[n][key] for n in self.lengths if len(self.tokens) >= n
                      and (key := tuple(self.tokens[-n:])) in self.after[n]), None)
        if start is None:
            return []
        end = len(self.tokens)
        out: list[int] = []
        for i in range(start, start + most):
            out.append(self.tokens[i] if i < end else out[i - end])
        return out
