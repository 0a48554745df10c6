"""Phonebook: deterministic generation, token budgets, prompt format, and scoring only the gold number."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.engine.tokens import TokenizationPolicy
from proctor.errors import UserError
from proctor.inloop.babilong import LENGTHS as BABILONG_LENGTHS
from proctor.inloop.phonebook import (LENGTHS, NUMBER_FORMAT, TASKS, Phonebook, draw_entries, entries_of,
                                      token_budget)
from tinylm import build_tokenizer

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^[A-Z][a-z]{2,7} [A-Z][a-z]{3,9}$")
QUESTION = "Question: What is the phone number of {}?\nAnswer:"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_task_names_and_budgets():
    assert LENGTHS == BABILONG_LENGTHS
    assert sorted(TASKS) == sorted(f"phonebook_{x}_bpb_2shot" for x in LENGTHS) and len(TASKS) == 13
    assert token_budget("0k") is None
    assert token_budget("1k") == 1024 and token_budget("4k") == 4096 and token_budget("512k") == 512 * 1024
    assert token_budget("1M") == 1024 ** 2 and token_budget("10M") == 10 * 1024 ** 2
    for bad in ("4K", "1m", "3k", "10", ""):
        with pytest.raises(UserError, match="unknown Phonebook length"):
            token_budget(bad)


def test_seed_usage_line(tokenizer):
    # the seed: olmo_eval.tasks.Phonebook(tokenizer, dataset_name="4k", num_samples=10, seed=42, model_ctx_len=8192)
    task = Phonebook(tokenizer, dataset_name="4k", num_samples=10, seed=42, model_ctx_len=8192)
    assert task.metric_type == "bpb" and task.num_documents == len(task) == 10
    assert task.model_ctx_len == 8192 and task.split == "validation"
    policy = TokenizationPolicy(tokenizer, max_length=8192)
    for i, example in enumerate(task.examples):
        pair = policy.encode(example.prompt, " " + example.answer)
        item = task[i]
        # the whole book is kept (4k budget + demos < 8192) and only " <number>" is scored
        assert item["input_ids"] == list(pair.context + pair.continuation)[:-1]
        assert [t for t in item["labels"] if t != -100] == list(pair.continuation)
        assert item["cont_str_len"] == 13 and item["cont_byte_len"] == 13
        assert item["cont_byte_len_no_leading_space"] == 12
    defaults = Phonebook(tokenizer, "0k")
    assert defaults.num_documents == 100 and defaults.seed == 42


def _check_format(example):
    lines = example.prompt.split("\n")
    k = example.num_entries
    book = lines[:k]
    entries = entries_of(example)
    assert ["{}: {}".format(*e) for e in entries] == book
    names = [n for n, _ in entries]
    numbers = [p for _, p in entries]
    assert all(NAME.match(n) for n in names), names[:3]
    assert all(re.fullmatch(r"\d{3}-\d{3}-\d{4}", p) and NUMBER_FORMAT.match(p) for p in numbers)
    assert len(set(names)) == k and len(set(numbers)) == k  # unique entries
    rest = "\n".join(lines[k:])
    match = re.fullmatch(
        r"\n" + re.escape(QUESTION.format("XX")).replace("XX", "(.+)") + r" (\S+)\n\n"
        + re.escape(QUESTION.format("XX")).replace("XX", "(.+)") + r" (\S+)\n\n"
        + re.escape(QUESTION.format("XX")).replace("XX", "(.+)"), rest)
    assert match, rest[:300]
    n1, p1, n2, p2, nq = match.groups()
    lookup = dict(entries)
    assert lookup[n1] == p1 and lookup[n2] == p2  # answered demonstrations from the book
    assert lookup[nq] == example.answer           # the query's gold number
    assert len({n1, n2, nq}) == 3                 # a different entry for each
    assert example.prompt == "".join(f"{n}: {p}\n" for n, p in entries) + "\n" + \
        QUESTION.format(n1) + f" {p1}\n\n" + QUESTION.format(n2) + f" {p2}\n\n" + QUESTION.format(nq)


def test_zero_k_is_exactly_three_entries(tokenizer):
    task = Phonebook(tokenizer, "0k", num_samples=20)
    for example in task.examples:
        assert example.num_entries == 3
        _check_format(example)
        assert example.book_tokens == count(tokenizer, "\n".join(example.prompt.split("\n")[:3]) + "\n")


@pytest.mark.parametrize("length,budget", [("1k", 1024), ("2k", 2048)])
def test_books_fill_their_budget_in_whole_entries(length, budget, tokenizer):
    task = Phonebook(tokenizer, length, num_samples=4, model_ctx_len=4096)
    for i, example in enumerate(task.examples):
        _check_format(example)
        k = example.num_entries
        entries = draw_entries(42, "validation", i, k + 1)
        assert entries[:k] == entries_of(example)
        book = "".join(f"{n}: {p}\n" for n, p in entries[:k])
        assert count(tokenizer, book) == example.book_tokens <= budget
        assert count(tokenizer, book + "{}: {}\n".format(*entries[k])) > budget  # the next entry does not fit


def test_determinism_and_distinct_seeds(tokenizer):
    a = Phonebook(tokenizer, "1k", num_samples=3, model_ctx_len=2048)
    b = Phonebook(tokenizer, "1k", num_samples=3, model_ctx_len=2048)
    assert [e.prompt for e in a.examples] == [e.prompt for e in b.examples]
    assert [a[i] for i in range(len(a))] == [b[i] for i in range(len(b))]
    test = Phonebook(tokenizer, "1k", num_samples=3, model_ctx_len=2048, split="test")
    other = Phonebook(tokenizer, "1k", num_samples=3, model_ctx_len=2048, seed=7)
    for x in (test, other):
        assert all(e.prompt != f.prompt for e, f in zip(a.examples, x.examples))
    assert not set(entries_of(a.examples[0])) & set(entries_of(test.examples[0]))
    # example i does not depend on how many are generated
    more = Phonebook(tokenizer, "1k", num_samples=5, model_ctx_len=2048)
    assert [e.prompt for e in more.examples[:3]] == [e.prompt for e in a.examples]
    assert len({e.prompt for e in more.examples}) == 5
    with pytest.raises(UserError, match="unknown Phonebook split"):
        Phonebook(tokenizer, "0k", split="train")
    with pytest.raises(UserError, match="num_samples"):
        Phonebook(tokenizer, "0k", num_samples=0)


@pytest.mark.slow  # heavy: subprocesses, over 3 s
def test_prompts_are_byte_identical_across_processes():
    script = (
        "import hashlib, sys; sys.path.insert(0, 'tests');"
        "from tinylm import build_tokenizer; from proctor.inloop.phonebook import Phonebook;"
        "t = Phonebook(build_tokenizer(), '1k', num_samples=3, model_ctx_len=2048, split='test');"
        "print(hashlib.sha256('\\x00'.join(e.prompt for e in t.examples).encode()).hexdigest())"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                             text=True, check=True)
        digests.add(out.stdout.strip())
    here = Phonebook(build_tokenizer(), "1k", num_samples=3, model_ctx_len=2048, split="test")
    digests.add(hashlib.sha256("\x00".join(e.prompt for e in here.examples).encode()).hexdigest())
    assert len(digests) == 1


def test_left_truncation_when_the_book_exceeds_the_context(tokenizer):
    task = Phonebook(tokenizer, "1k", model_ctx_len=256, num_samples=2)
    full = Phonebook(tokenizer, "1k", model_ctx_len=4096, num_samples=2)
    for i in range(2):
        assert len(task[i]["input_ids"]) == 256
        assert task[i]["input_ids"] == full[i]["input_ids"][-256:]
        assert [t for t in task[i]["labels"] if t != -100] == [t for t in full[i]["labels"] if t != -100]


def test_a_budget_too_small_for_three_entries_is_refused():
    class CharTokenizer:  # one token per character: 1k holds only a few dozen entries
        bos_token_id, eos_token_id, pad_token_id, is_fast = None, 0, None, False

        def encode(self, text, add_special_tokens=False):
            return [ord(c) % 250 + 1 for c in text]

    task = Phonebook(CharTokenizer(), "1k", num_samples=2, model_ctx_len=4096)
    assert all(e.book_tokens <= 1024 for e in task.examples)
    assert all(e.book_tokens == sum(len(f"{n}: {p}\n") for n, p in entries_of(e)) for e in task.examples)

    class HugeTokenizer(CharTokenizer):  # 100 tokens per character
        def encode(self, text, add_special_tokens=False):
            return [1] * (100 * len(text))

    with pytest.raises(UserError, match="at least three"):
        Phonebook(HugeTokenizer(), "1k", num_samples=1)


class _Chars:
    bos_token_id, eos_token_id, pad_token_id, is_fast = None, 0, None, False


class MergingTokenizer(_Chars):
    """A newline before a letter merges with it: a book has fewer tokens than its entries summed."""

    def encode(self, text, add_special_tokens=False):
        return [1] * (len(text) - len(re.findall(r"\n(?=[A-Z])", text)))


class SplittingTokenizer(_Chars):
    """An inner newline costs two tokens: a book has more tokens than its entries summed."""

    def encode(self, text, add_special_tokens=False):
        return [1] * (len(text) + len(re.findall(r"\n(?=.)", text, flags=re.S)))


@pytest.mark.parametrize("tokenizer_class", [MergingTokenizer, SplittingTokenizer])
def test_exact_book_count_when_entries_do_not_add_up(tokenizer_class):
    tok = tokenizer_class()
    task = Phonebook(tok, "2k", num_samples=3, model_ctx_len=8192)
    for i, example in enumerate(task.examples):
        k = example.num_entries
        entries = draw_entries(42, "validation", i, k + 1)
        assert entries[:k] == entries_of(example)
        book = "".join(f"{n}: {p}\n" for n, p in entries[:k])
        assert count(tok, book) == example.book_tokens <= 2048
        assert count(tok, book + "{}: {}\n".format(*entries[k])) > 2048
