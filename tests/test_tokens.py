"""The tokenization policy (olmes.md): space move, whole-minus-context split, no BOS, truncation."""

import re

import pytest

from proctor.errors import UserError
from proctor.engine.tokens import EncodedPair, TokenizationPolicy, split_trailing_space, window


class WordEncoder:
    """Words (with their leading space) are tokens; `add_special_tokens=True` would add BOS=1."""

    bos_token_id = 1
    eos_token_id = 2

    def __init__(self):
        self.vocab = {"<s>": 1, "</s>": 2}
        self.calls = 0

    def encode(self, text, add_special_tokens=True):
        self.calls += 1
        pieces = re.findall(r"<s>| ?\w+| ?[^\w\s]|\s+", text)
        ids = [self.vocab.setdefault(p, len(self.vocab) + 1) for p in pieces]
        return ([1] if add_special_tokens else []) + ids


class MergingEncoder(WordEncoder):
    """Merges "ab" into one token even across the context/continuation boundary."""

    def encode(self, text, add_special_tokens=True):
        out, i = [], 0
        while i < len(text):
            if text.startswith("ab", i):
                out.append(100)
                i += 2
            else:
                out.append(ord(text[i]) + 200)
                i += 1
        return out


def test_trailing_spaces_move_to_the_continuation():
    assert split_trailing_space("Answer: ", "A") == ("Answer:", " A")
    assert split_trailing_space("Answer:\n \t", "A") == ("Answer:", "\n \tA")
    assert split_trailing_space("Answer:", " A") == ("Answer:", " A")
    policy = TokenizationPolicy(WordEncoder(), max_length=2048)
    assert policy.encode("Answer: ", "A") == policy.encode("Answer:", " A")


def test_no_bos_and_continuation_is_whole_minus_context():
    enc = WordEncoder()
    policy = TokenizationPolicy(enc, max_length=2048)
    pair = policy.encode("Question: why?\nAnswer:", " Because")
    ctx = enc.encode("Question: why?\nAnswer:", add_special_tokens=False)
    assert pair.context == tuple(ctx)
    assert 1 not in pair.context  # no BOS
    assert pair.continuation == (enc.vocab[" Because"],)


def test_continuation_tokens_come_from_the_whole_encoding():
    policy = TokenizationPolicy(MergingEncoder(), max_length=2048)
    pair = policy.encode("xa", "bc")
    # whole "xabc" = [x, ab, c]; context "xa" = [x, a]; continuation = whole[2:] = [c]
    assert pair.context == (ord("x") + 200, ord("a") + 200)
    assert pair.continuation == (ord("c") + 200,)


def test_multi_token_continuation_window():
    policy = TokenizationPolicy(WordEncoder(), max_length=2048)
    pair = policy.encode("The capital is", " Paris , France")
    assert len(pair.continuation) == 3
    w = window(pair, 2048)
    assert w.inputs == (pair.context + pair.continuation)[:-1]
    assert w.start == len(pair.context) - 1
    assert w.targets == pair.continuation


def test_left_truncation_to_max_length():
    pair = EncodedPair(context=tuple(range(1, 11)), continuation=(11, 12))
    w = window(pair, 5)
    assert w.inputs == (7, 8, 9, 10, 11)  # (ctx+cont)[-6:][:-1]
    assert w.start == 3  # positions 3 and 4 predict 11 and 12
    assert w.targets == (11, 12)
    assert w.dropped == 6  # context tokens 1-6 cut
    assert window(pair, 11).inputs == tuple(range(1, 12))  # fits exactly: nothing cut
    assert window(pair, 11).dropped == 0
    with pytest.raises(UserError, match="does not fit in max_length"):
        window(EncodedPair((1,), (2, 3, 4)), 2)


def test_single_token_window_is_the_context():
    pair = EncodedPair(context=(5, 6, 7), continuation=(8,))
    w = window(pair, 2048)
    assert w.inputs == (5, 6, 7) and w.start == 2


def test_empty_context_conditions_on_the_prefix_token():
    enc = WordEncoder()
    policy = TokenizationPolicy(enc, max_length=2048)
    pair = policy.encode("", " Paris")
    assert pair.context == (1,)  # BOS as prefix
    assert pair.continuation == (enc.vocab[" Paris"],)
    # a continuation that starts with the prefix token: its first token becomes the context
    pair = policy.encode("", "<s> Paris")
    assert pair == EncodedPair(context=(1,), continuation=(enc.vocab[" Paris"],))
    # whitespace-only context: spaces move, then treated as empty
    pair = policy.encode("  ", "Paris")
    assert pair.context == (1,)
    assert pair.continuation == tuple(enc.encode("  Paris", add_special_tokens=False))


def test_prefix_token_falls_back_to_eos():
    enc = WordEncoder()
    enc.bos_token_id = None
    assert TokenizationPolicy(enc, max_length=8).encode("", " x").context == (2,)


def test_empty_continuation_is_refused():
    with pytest.raises(ValueError, match="no tokens"):
        TokenizationPolicy(WordEncoder(), max_length=8).encode("Answer:", "")


def test_each_distinct_text_is_encoded_once():
    enc = WordEncoder()
    policy = TokenizationPolicy(enc, max_length=2048)
    pairs = [("Question: x\nAnswer:", c) for c in (" A", " B", " C", " D", " A")]
    assert policy.encode_many(pairs) == [policy.encode(c, x) for c, x in pairs]
    enc.calls = 0
    policy.encode_many(pairs)
    assert enc.calls == 4 + 1  # one whole per distinct choice, the shared context once


def test_rolling_windows_score_every_token_once_sharing_one_context_token():
    from proctor.engine.tokens import rolling_windows

    tokens = list(range(100, 110))  # 10 text tokens
    windows = rolling_windows(tokens, prefix_token=1, max_length=4)
    assert [w.inputs for w in windows] == [(1, 100, 101, 102), (103, 104, 105, 106), (107, 108)]
    assert [w.targets for w in windows] == [(100, 101, 102, 103), (104, 105, 106, 107), (108, 109)]
    assert all(w.start == 0 and len(w.inputs) == len(w.targets) <= 4 for w in windows)
    assert [t for w in windows for t in w.targets] == tokens  # each once, no EOS target
    for before, after in zip(windows, windows[1:]):  # the one shared token, no earlier context
        assert after.inputs[0] == before.targets[-1]
    assert rolling_windows([], prefix_token=1, max_length=4) == []
    assert rolling_windows([7], prefix_token=1, max_length=4)[0].inputs == (1,)


def test_policy_rolling_windows_start_from_bos_else_eos():
    from proctor.engine.tokens import TokenizationPolicy

    class Encoder:
        is_fast = False
        eos_token_id = 0

        def __init__(self, bos):
            self.bos_token_id = bos

        def encode(self, text, add_special_tokens=False):
            assert add_special_tokens is False
            return [ord(c) for c in text]

    for bos, first in ((None, 0), (5, 5)):
        out = TokenizationPolicy(Encoder(bos), max_length=3).rolling_windows(["abcd", ""])
        assert out[1] == []
        assert out[0][0].inputs == (first, 97, 98) and out[0][1].inputs == (99,)
