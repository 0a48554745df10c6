r"""Phonebook: synthetic retrieval (after Jelassi et al., 2024, §4.3) as 2-shot BPB tasks.

`phonebook_{length}_bpb_2shot` for the BABILong length labels (0k 1k 2k 4k 8k 16k 32k 64k
128k 256k 512k 1M 10M, case-sensitive). Each example is one document with one scored
continuation (metric_type "bpb"). Exactly:

    book         = "".join(name + ": " + number + "\n" for name, number in entries)
    prompt       = (book + "\n"
                    + "Question: What is the phone number of " + name1 + "?\nAnswer: " + number1 + "\n\n"
                    + "Question: What is the phone number of " + name2 + "?\nAnswer: " + number2 + "\n\n"
                    + "Question: What is the phone number of " + name3 + "?\nAnswer:")
    continuation = " " + number3          # the only scored tokens

for example (0k):

    Iex Umytzxec: 807-660-3574
    Ktohe Oxwakbpajq: 482-972-8557
    Cqrh Uctxd: 597-722-1950

    Question: What is the phone number of Cqrh Uctxd?
    Answer: 597-722-1950

    Question: What is the phone number of Iex Umytzxec?
    Answer: 807-660-3574

    Question: What is the phone number of Ktohe Oxwakbpajq?
    Answer:

Names are random alphabetic words: "<First> <Last>", an upper-case letter then 2-7
lower-case letters, then an upper-case letter and 3-9 lower-case letters. Numbers read
like 609-323-7777 (3-3-4 digits; the first two groups 200-999). Names and numbers are
unique within a book; (name1, name2, name3) are three distinct entries of the book,
drawn uniformly.

Book size: "0k" is exactly three entries. A positive length budgets the book in
tokenizer tokens, 1024 per k and 1024**2 per M, rounded down to whole entries: the book's
own token count (`tokenizer.encode(book, add_special_tokens=False)`) is at most the
budget and adding the next entry would exceed it. Demonstrations, question and answer
come on top; the prompt is left-truncated to `model_ctx_len` inputs like every task, so
set model_ctx_len above the budget to keep the whole book.

Determinism: example i of a split draws its entries from `random.Random(s)`, `s` the first
8 bytes of SHA-256 of "phonebook\0<seed>\0<split>\0<i>", and picks its three entries with
`random.Random(s ^ 0x5EED)` -- never Python's salted `hash()` -- so the same
arguments give byte-identical prompts in every process, example i does not depend on
`num_samples`, and validation and test differ. Books are measured incrementally (each
entry tokenized once, in batches), then the exact count of the whole book is verified.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from dataclasses import dataclass
from typing import Any, Callable, Optional

from proctor.errors import UserError, check_positive_int
from proctor.inloop.babilong import LENGTHS as BABILONG_LENGTHS
from proctor.inloop.icl import ChoiceDoc, ICLDataset

LENGTHS: tuple[str, ...] = BABILONG_LENGTHS
SPLITS = ("validation", "test")
# task name -> length
TASKS: dict[str, str] = {f"phonebook_{length}_bpb_2shot": length for length in LENGTHS}
NUMBER_FORMAT = re.compile(r"^\d{3}-\d{3}-\d{4}$")
_DRAW_MAX = 1 << 16  # most entries drawn and tokenized in one tokenizer call


def token_budget(length: str) -> Optional[int]:
    """Book budget in tokens: None for "0k" (three entries), else 1024 per k, 1024**2 per M."""
    match = re.fullmatch(r"(\d+)([kM])", length)
    if length not in LENGTHS or match is None:
        raise UserError(f"unknown Phonebook length {length!r}; use one of {', '.join(LENGTHS)} "
                        "(case-sensitive)")
    n = int(match.group(1))
    return None if n == 0 else n * (1024 if match.group(2) == "k" else 1024 ** 2)


def example_seed(seed: int, split: str, index: int) -> int:
    """Return the random seed of example `index` of `split`: a hash, so examples never share a stream."""
    digest = hashlib.sha256(f"phonebook\x00{seed}\x00{split}\x00{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class PhonebookExample:
    """One generated example: the book, two answered questions and the query, and its gold number."""

    prompt: str
    answer: str           # the gold number, without the leading space
    num_entries: int
    book_tokens: int      # the book's own token count (no special tokens)


class _Book:
    """Unique entries drawn on demand, each with its own token count."""

    def __init__(self, rng: random.Random, count_many: Callable[[list[str]], list[int]]):
        self.rng, self.count_many = rng, count_many
        self.lines: list[str] = []
        self.entries: list[tuple[str, str]] = []
        self.costs: list[int] = []
        self._names: set[str] = set()
        self._numbers: set[str] = set()

    def _word(self, low: int, high: int) -> str:
        rest = self.rng.choices(string.ascii_lowercase, k=self.rng.randint(low, high))
        return self.rng.choice(string.ascii_uppercase) + "".join(rest)

    def _entry(self) -> tuple[str, str]:
        while True:
            name = f"{self._word(2, 7)} {self._word(3, 9)}"
            number = (f"{self.rng.randint(200, 999)}-{self.rng.randint(200, 999)}-"
                      f"{self.rng.randint(0, 9999):04d}")
            if name not in self._names and number not in self._numbers:
                self._names.add(name)
                self._numbers.add(number)
                return name, number

    def ensure(self, n: int) -> None:
        """Draw entries (tokenizing them in one batch) until there are at least n."""
        if len(self.entries) >= n:
            return
        new = [self._entry() for _ in range(n - len(self.entries))]
        lines = [f"{name}: {number}\n" for name, number in new]
        self.entries.extend(new)
        self.lines.extend(lines)
        self.costs.extend(self.count_many(lines))

    def text(self, k: int) -> str:
        self.ensure(k)
        return "".join(self.lines[:k])


def _fit(book: _Book, budget: int, count: Callable[[str], int]) -> tuple[int, int]:
    """(k, tokens): the most entries whose book fits the budget, by exact count.

    Starts from the sum of per-entry counts, then corrects by exact counts of the whole
    book, stepping by the per-entry estimates, inside a shrinking bracket: `lo` entries
    fit, `hi` entries do not; done when hi == lo + 1.
    """
    k, total = 0, 0
    while True:
        if k == len(book.costs):  # draw about what the rest of the budget holds, in one batch
            if not book.costs:
                book.ensure(32)
                continue
            mean = sum(book.costs) / len(book.costs)
            book.ensure(k + min(_DRAW_MAX, int((budget - total) / max(mean, 1.0)) + 16))
        if total + book.costs[k] > budget:
            break
        total += book.costs[k]
        k += 1
    lo, hi, lo_tokens = None, None, 0
    while True:
        exact = count(book.text(k)) if k else 0
        if exact <= budget:
            lo, lo_tokens = k, exact
        else:
            hi = k
        if lo is not None and hi == lo + 1:
            return lo, lo_tokens
        if exact <= budget:
            slack, nxt = budget - exact, k
            book.ensure(nxt + 1)
            while book.costs[nxt] <= slack:
                slack -= book.costs[nxt]
                nxt += 1
                book.ensure(nxt + 1)
            k = max(k + 1, nxt) if hi is None else min(max(k + 1, nxt), hi - 1)
        else:
            excess, prev = exact - budget, k
            while prev > 0 and excess > 0:
                prev -= 1
                excess -= book.costs[prev]
            k = min(prev, k - 1) if lo is None else max(min(prev, k - 1), lo + 1)


def draw_entries(seed: int, split: str, index: int, n: int) -> list[tuple[str, str]]:
    """Return the first n (name, number) entries example `index` draws; its book is a prefix of them."""
    book = _Book(random.Random(example_seed(seed, split, index)), lambda lines: [0] * len(lines))
    book.ensure(n)
    return book.entries[:n]


def _question(name: str) -> str:
    return f"Question: What is the phone number of {name}?\nAnswer:"


def build_example(seed: int, split: str, index: int, budget: Optional[int],
                  count: Callable[[str], int], count_many: Callable[[list[str]], list[int]]
                  ) -> PhonebookExample:
    """Generate example `index`: the most entries that fit `budget` (None: three), two shots and a query.

    The shots and the query ask for three distinct entries of the book.
    """
    s = example_seed(seed, split, index)
    book = _Book(random.Random(s), count_many)
    if budget is None:
        book.ensure(3)
        k, tokens = 3, count(book.text(3))
    else:
        k, tokens = _fit(book, budget, count)
        if k < 3:
            raise UserError(f"a phonebook budget of {budget} tokens holds only {k} entries with "
                            "this tokenizer; the task needs at least three (two shots and a query)")
    # the picks use their own stream, so they do not depend on how many entries were drawn
    picks = random.Random(s ^ 0x5EED).sample(range(k), 3)
    (n1, p1), (n2, p2), (nq, pq) = (book.entries[i] for i in picks)
    prompt = (book.text(k) + "\n" + _question(n1) + f" {p1}\n\n" + _question(n2) + f" {p2}\n\n"
              + _question(nq))
    return PhonebookExample(prompt=prompt, answer=pq, num_entries=k, book_tokens=tokens)


def _counters(tokenizer: Any) -> tuple[Callable[[str], int], Callable[[list[str]], list[int]]]:
    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    def count_many(texts: list[str]) -> list[int]:
        if getattr(tokenizer, "is_fast", False):
            return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        return [count(t) for t in texts]

    return count, count_many


class Phonebook(ICLDataset):
    """`num_samples` generated phonebook retrieval examples of one length (module doc)."""

    def __init__(self, tokenizer: Any, dataset_name: str = "4k", num_samples: int = 100,
                 seed: int = 42, model_ctx_len: int = 8192, split: str = "validation"):
        budget = token_budget(dataset_name)
        if split not in SPLITS:
            raise UserError(f"unknown Phonebook split {split!r}; use one of {', '.join(SPLITS)}")
        check_positive_int("num_samples", num_samples)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UserError(f"seed must be an integer, got {seed!r}")
        self.dataset_name, self.split, self.seed, self.budget = dataset_name, split, seed, budget
        count, count_many = _counters(tokenizer)
        self.examples: list[PhonebookExample] = [
            build_example(seed, split, i, budget, count, count_many) for i in range(num_samples)]
        docs = [ChoiceDoc(e.prompt, (" " + e.answer,), 0) for e in self.examples]
        super().__init__(docs, tokenizer, model_ctx_len=model_ctx_len, metric_type="bpb",
                         what=f"phonebook_{dataset_name}_bpb_2shot")

    def __repr__(self) -> str:
        return (f"Phonebook({self.dataset_name!r}, split={self.split!r}, seed={self.seed}, "
                f"documents={self.num_documents}, model_ctx_len={self.model_ctx_len})")


def entries_of(example: PhonebookExample) -> list[tuple[str, str]]:
    """Return the (name, number) entries of an example's book: the prompt's first `num_entries` lines."""
    lines = example.prompt.split("\n")[: example.num_entries]
    return [(name, number) for name, number in (line.split(": ", 1) for line in lines)]
