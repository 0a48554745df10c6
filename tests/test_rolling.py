"""Rolling (whole-document) requests in the engine, against a plain transformers forward by hand."""

import sqlite3

import pytest
import torch

from proctor.engine import Engine, ResultCache
from proctor.engine import rolling as rolling_mod
from proctor.engine.rolling import chunk_key, rolling_fingerprint
from proctor.requests import Loglikelihood, LoglikelihoodResult, RollingLoglikelihood

from tinylm import build_tiny_model

MAX_LENGTH = 16
LONG = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
        "Paris is the capital of France. Berlin is the capital of Germany. " * 3)
DOCS = [
    LONG,                                              # many chunks of 16
    "Paris is the capital of France.",                # one chunk
    "",                                               # no tokens: no chunks
    "Question: Which planet is closest to the sun?",  # one chunk, a few tokens
    "Berlin",                                         # a short one
    LONG[:-40],                                       # shares a long start with LONG
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def backend(tiny_dir):
    from proctor.backends import load_backend

    return load_backend(str(tiny_dir), device="cpu", max_length=MAX_LENGTH)


def hand_windows(tokenizer, text: str, max_length: int) -> list[tuple[list[int], list[int]]]:
    """(inputs, targets) of each chunk, written out from the rule: every token a target once,
    the first after EOS (the tiny tokenizer has no BOS), later chunks after the previous token."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    out = []
    for begin in range(0, len(ids), max_length):
        targets = ids[begin:begin + max_length]
        before = tokenizer.eos_token_id if begin == 0 else ids[begin - 1]
        out.append(([before] + targets[:-1], targets))
    return out


def hand_score(model, tokenizer, text: str, max_length: int) -> tuple[float, int]:
    """Sum of log-probs of every target and their count, one unbatched forward per chunk."""
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets in hand_windows(tokenizer, text, max_length):
            logits = model(input_ids=torch.tensor([inputs])).logits[0].double()
            logprobs = torch.log_softmax(logits, dim=-1)
            total += float(logprobs[torch.arange(len(targets)), torch.tensor(targets)].sum())
            count += len(targets)
    return total, count


def test_long_document_has_more_than_three_chunks(backend):
    n = len(backend.tokenizer.encode(LONG, add_special_tokens=False))
    assert n > 3 * MAX_LENGTH and n % MAX_LENGTH != 0


def test_rolling_equals_a_hand_computed_forward(backend):
    results = Engine(backend, batch_size="auto", progress=False).run([RollingLoglikelihood(d) for d in DOCS])
    for doc, res in zip(DOCS, results):
        expected, count = hand_score(backend.model, backend.tokenizer, doc, MAX_LENGTH)
        assert res.num_tokens == count
        assert res.sum_logits == pytest.approx(expected, rel=1e-5, abs=1e-4)
    assert results[2] == LoglikelihoodResult(0.0, 0, True)  # the empty document


def test_results_do_not_depend_on_batch_size(backend):
    requests = [RollingLoglikelihood(d) for d in DOCS]
    runs = [Engine(backend, batch_size=b, progress=False).run(requests) for b in (1, 3, "auto")]
    for results in runs[1:]:
        for a, b in zip(runs[0], results):
            assert a.num_tokens == b.num_tokens
            assert a.sum_logits == pytest.approx(b.sum_logits, abs=1e-5)


def test_mixed_with_loglikelihood_requests(backend):
    plain = [Loglikelihood("Paris is the capital of", " France"), Loglikelihood("Question:", " Mercury")]
    rolling = [RollingLoglikelihood(d) for d in DOCS]
    engine = Engine(backend, batch_size=4, progress=False)
    mixed = engine.run([plain[0], *rolling, plain[1], rolling[0]])  # a repeat, deduped
    assert engine.stats.unique == len(plain) + len(DOCS)
    chunks = sum(len(hand_windows(backend.tokenizer, d, MAX_LENGTH)) for d in DOCS)
    assert engine.stats.rolling_chunks == chunks
    alone_plain = Engine(backend, batch_size=4, progress=False).run(plain)
    alone_rolling = Engine(backend, batch_size=4, progress=False).run(rolling)
    for got, want in zip([mixed[0], mixed[-2]], alone_plain):
        assert got.sum_logits == pytest.approx(want.sum_logits, abs=1e-5)
    for got, want in zip(mixed[1:-2], alone_rolling):
        assert got.num_tokens == want.num_tokens
        assert got.sum_logits == pytest.approx(want.sum_logits, abs=1e-5)
    assert mixed[-1] == mixed[1]


def test_rows_longer_than_the_cpu_token_budget_are_scored_alone(tiny_dir):
    from proctor.backends import load_backend

    wide = load_backend(str(tiny_dir), device="cpu", max_length=2048)
    assert wide.token_budget() == 1024
    text = LONG * 6
    n = len(wide.tokenizer.encode(text, add_special_tokens=False))
    assert 1024 < n < 2048  # one chunk, longer than a CPU batch may hold
    engine = Engine(wide, batch_size="auto", progress=False)
    result, short = engine.run([RollingLoglikelihood(text), RollingLoglikelihood("Berlin")])
    expected, count = hand_score(wide.model, wide.tokenizer, text, 2048)
    assert result.num_tokens == count == n
    assert result.sum_logits == pytest.approx(expected, rel=1e-5)
    assert engine.stats.batches == 2 and short.num_tokens > 0


def test_resume_scores_nothing_stored(backend, tmp_path):
    requests = [RollingLoglikelihood(d) for d in DOCS]
    cache = ResultCache(tmp_path / "cache.sqlite")
    first_engine = Engine(backend, batch_size=3, cache=cache, progress=False)
    first = first_engine.run(requests)
    assert first_engine.stats.batches_run > 0

    again = Engine(backend, batch_size=3, cache=cache, progress=False)
    calls = backend.forward_calls
    assert again.run(requests) == first
    assert backend.forward_calls == calls and again.stats.cached == len(DOCS)
    assert again.stats.plan_seconds == 0.0  # answered without tokenizing

    # A run killed mid-document stored some chunks but not the request's sum: resumed,
    # only the missing chunks are scored and the sums are the same.
    fp = rolling_fingerprint(again.fingerprint)
    long_key = requests[0].key
    n_chunks = len(hand_windows(backend.tokenizer, LONG, MAX_LENGTH))
    db = sqlite3.connect(str(tmp_path / "cache.sqlite"))
    with db:
        db.execute("DELETE FROM loglikelihood WHERE fingerprint = ? AND key = ?", (fp, long_key))
        db.execute("DELETE FROM loglikelihood WHERE fingerprint = ? AND key = ?", (fp, chunk_key(long_key, 1)))
    db.close()
    resumed = Engine(backend, batch_size=1, cache=cache, progress=False)
    assert resumed.run(requests) == first
    assert resumed.stats.cached == len(DOCS) - 1 and resumed.stats.batches_run == 1
    assert resumed.stats.rolling_chunks >= n_chunks

    # Every chunk stored but not the sum: nothing is scored.
    with sqlite3.connect(str(tmp_path / "cache.sqlite")) as db:
        db.execute("DELETE FROM loglikelihood WHERE fingerprint = ? AND key = ?", (fp, long_key))
    calls = backend.forward_calls
    assert Engine(backend, batch_size=1, cache=cache, progress=False).run(requests) == first
    assert backend.forward_calls == calls
    cache.close()


def test_a_new_rolling_policy_misses_the_cache(backend, tmp_path, monkeypatch):
    requests = [RollingLoglikelihood(DOCS[1])]
    with ResultCache(tmp_path / "cache.sqlite") as cache:
        Engine(backend, cache=cache, progress=False).run(requests)
        monkeypatch.setattr(rolling_mod, "ROLLING_POLICY_VERSION", "rolling-test")
        engine = Engine(backend, cache=cache, progress=False)
        engine.run(requests)
        assert engine.stats.cached == 0 and engine.stats.batches_run == 1


def test_rolling_request_identity():
    a, b = RollingLoglikelihood("some text"), RollingLoglikelihood("some text")
    assert a == b and a.key == b.key and hash(a) == hash(b)
    assert a.key != RollingLoglikelihood("other").key
    assert a.key != Loglikelihood("", "some text").key
    assert a.to_dict() == {"request_type": "loglikelihood_rolling", "text": "some text"}
    assert chunk_key(a.key, 0) not in (a.key, chunk_key(a.key, 1))
