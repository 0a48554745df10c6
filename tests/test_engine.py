"""Engine on a tiny random model: grouping, batching invariance, dedupe, cache, resume after SIGKILL."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proctor.engine import Engine, ResultCache
from proctor.engine.plan import BatchLimits, PlannedRow, Readout, Row, partition, plan_rows
from proctor.engine.tokens import Window
from proctor.errors import UserError
from proctor.requests import Loglikelihood

from tinylm import build_tiny_model

TESTS = Path(__file__).resolve().parent

QUESTIONS = [
    "Which planet is closest to the sun?",
    "What is the boiling point of water at sea level?",
    "The quick brown fox jumps over which animal?",
    "Paris is the capital of which country?",
    "Berlin is the capital of which country?",
    "A stitch in time saves how many?",
    "Which planet is red?",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def backend(tiny_dir):
    from proctor.backends import load_backend

    return load_backend(str(tiny_dir), device="cpu")


def mc_requests(n_docs: int = len(QUESTIONS)) -> list[Loglikelihood]:
    """MC prompts; " A"/" B"/" C" are single tokens in the tiny tokenizer, " D" is two."""
    out = []
    for i, q in enumerate(QUESTIONS[:n_docs]):
        prompt = "Question: " + q + "\n A. Mercury\n B. Venus\n C. Earth\n D. Mars\nAnswer:"
        prompt = "The fox. " * i + prompt  # vary lengths
        out += [Loglikelihood(prompt, c) for c in (" A", " B", " C")]
    return out


def rc_requests() -> list[Loglikelihood]:
    return [Loglikelihood("Question: " + q + "\nAnswer:", c)
            for q in QUESTIONS for c in (" Mercury", " the lazy dog", " D")]


def per_request(backend, requests):
    """Reference: every request scored alone in its own row and forward pass."""
    from proctor.engine.tokens import TokenizationPolicy

    policy = TokenizationPolicy(backend.tokenizer, max_length=backend.max_length)
    out = []
    for r in requests:
        w = policy.window(r.context, r.continuation)
        (res,) = backend.score([Row(w.inputs, (Readout(w.start, w.targets),))])
        out.append(res[0])
    return out


def test_single_token_choices_share_one_forward_pass(backend):
    requests = mc_requests()
    assert all(len(backend.tokenizer.encode(c, add_special_tokens=False)) == 1 for c in (" A", " B", " C"))
    before = backend.forward_calls
    engine = Engine(backend, batch_size=1, progress=False)
    results = engine.run(requests)
    assert backend.forward_calls - before == len(QUESTIONS)  # one per context, not per choice
    assert engine.stats.rows == len(QUESTIONS)
    reference = per_request(backend, requests)
    for got, want in zip(results, reference):
        assert got.num_tokens == want.num_tokens == 1
        assert got.sum_logits == pytest.approx(want.sum_logits, abs=1e-5)
        assert got.is_greedy == want.is_greedy


def test_multi_token_continuations_get_their_own_rows(backend):
    requests = rc_requests()
    engine = Engine(backend, batch_size=4, progress=False)
    results = engine.run(requests)
    n_single = sum(r.num_tokens == 1 for r in results)
    assert n_single < len(requests)
    assert engine.stats.rows == len(requests) - n_single + (len(QUESTIONS) if n_single else 0)
    for got, want in zip(results, per_request(backend, requests)):
        assert got.num_tokens == want.num_tokens
        assert got.sum_logits == pytest.approx(want.sum_logits, abs=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, "auto"])
def test_batch_size_does_not_change_results(backend, batch_size):
    requests = mc_requests() + rc_requests()
    base = Engine(backend, batch_size=2, progress=False).run(requests)
    got = Engine(backend, batch_size=batch_size, progress=False).run(requests)
    for a, b in zip(base, got):
        assert a.sum_logits == pytest.approx(b.sum_logits, abs=1e-5)
        assert (a.num_tokens, a.is_greedy) == (b.num_tokens, b.is_greedy)
    for i in range(0, len(requests), 3):
        pick = lambda rs, i=i: max(range(3), key=lambda j: rs[i + j].sum_logits)  # noqa: E731
        assert pick(base) == pick(got)


def test_duplicates_are_scored_once_and_order_is_restored(backend):
    requests = mc_requests(3)
    shuffled = requests + requests[::-1]
    random.Random(0).shuffle(shuffled)
    engine = Engine(backend, batch_size="auto", progress=False)
    results = engine.run(shuffled)
    assert engine.stats.unique == len(requests)
    single = dict(zip(requests, Engine(backend, batch_size=1, progress=False).run(requests)))
    for r, res in zip(shuffled, results):
        assert res.sum_logits == pytest.approx(single[r].sum_logits, abs=1e-5)


def test_plan_does_not_depend_on_request_order(backend):
    requests = mc_requests() + rc_requests()
    shuffled = list(requests)
    random.Random(1).shuffle(shuffled)
    engine = Engine(backend, batch_size=3, progress=False)
    assert [b.keys for b in engine.plan(requests)] == [b.keys for b in engine.plan(shuffled)]


def test_partition_respects_row_and_token_limits():
    def planned(n):
        return PlannedRow(Row(tuple(range(n)), (Readout(n - 1, (1,)),)), (f"k{n}",))

    rows = plan_rows([(f"k{n}", Window(tuple(range(n)), n - 1, (1,))) for n in (3, 9, 5, 7, 1)])
    assert [len(r.row.tokens) for r in rows] == [9, 7, 5, 3, 1]  # longest first
    by_rows = partition(rows, BatchLimits(max_rows=2))
    assert [len(b.rows) for b in by_rows] == [2, 2, 1]
    by_tokens = partition(rows, BatchLimits(max_tokens=18))
    assert [[len(r.row.tokens) for r in b.rows] for b in by_tokens] == [[9, 7], [5, 3, 1]]
    assert all(b.padded_tokens <= 18 for b in by_tokens)
    oversized = partition([planned(40)], BatchLimits(max_tokens=18))
    assert len(oversized) == 1  # a row longer than the budget still runs, alone


def test_bad_batch_size_is_a_user_error(backend):
    for bad in (0, -1, "big", 2.5):
        with pytest.raises(UserError, match="batch size"):
            Engine(backend, batch_size=bad)


def test_cache_second_run_computes_nothing(backend, tiny_dir, tmp_path):
    from proctor.backends import load_backend

    requests = mc_requests() + rc_requests()
    with ResultCache(tmp_path / "cache.sqlite") as cache:
        first = Engine(backend, batch_size=4, cache=cache, progress=False)
        results = first.run(requests)
        assert first.stats.batches_run == first.stats.batches > 0
        before = backend.forward_calls
        second = Engine(backend, batch_size=1, cache=cache, progress=False)
        assert second.run(requests) == results
        assert second.stats.cached == second.stats.unique
        assert second.stats.batches_run == 0 and backend.forward_calls == before

        other = load_backend(str(tiny_dir), device="cpu", max_length=1024)  # another fingerprint
        third = Engine(other, batch_size=4, cache=cache, progress=False)
        third.run(requests)
        assert third.stats.cached == 0 and third.stats.batches_run == third.stats.batches
    with ResultCache(tmp_path / "cache.sqlite") as reopened:  # persisted on disk
        assert reopened.count(first.fingerprint) == len(set(requests))


WORKER = textwrap.dedent("""
    import json, os, signal, sys
    from proctor.backends import load_backend
    from proctor.engine import Engine, ResultCache
    from proctor.requests import Loglikelihood

    model_dir, cache_path, requests_path, out_path, kill_after = sys.argv[1:6]
    backend = load_backend(model_dir, device="cpu")
    score, calls = backend.score, []

    def score_then_maybe_die(rows, **kwargs):
        if len(calls) == int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)
        calls.append(1)
        return score(rows, **kwargs)

    backend.score = score_then_maybe_die
    requests = [Loglikelihood(c, x) for c, x in json.load(open(requests_path))]
    engine = Engine(backend, batch_size=2, cache=ResultCache(cache_path), progress=False)
    results = engine.run(requests)
    with open(out_path, "w") as f:
        json.dump({"results": [[repr(r.sum_logits), r.num_tokens, r.is_greedy] for r in results],
                   "batches_run": engine.stats.batches_run, "batches": engine.stats.batches}, f)
""")


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_resume_after_sigkill_gives_identical_results(tiny_dir, tmp_path):
    requests = mc_requests() + rc_requests()
    (tmp_path / "requests.json").write_text(json.dumps([[r.context, r.continuation] for r in requests]))
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))

    def start(cache: str, out: str, kill_after: int) -> subprocess.Popen:
        args = [sys.executable, str(tmp_path / "worker.py"), str(tiny_dir), str(tmp_path / cache),
                str(tmp_path / "requests.json"), str(tmp_path / out), str(kill_after)]
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(process: subprocess.Popen) -> tuple[int, str]:
        _, err = process.communicate(timeout=600)
        return process.returncode, err[-2000:]

    code, err = wait(start("resumed.sqlite", "never.json", kill_after=3))
    assert code == -signal.SIGKILL, err
    assert not (tmp_path / "never.json").exists()

    # the resumed run and an uninterrupted one side by side
    resumed, fresh = start("resumed.sqlite", "resumed.json", -1), start("fresh.sqlite", "fresh.json", -1)
    for process in (resumed, fresh):
        code, err = wait(process)
        assert code == 0, err

    r, f = (json.loads((tmp_path / n).read_text()) for n in ("resumed.json", "fresh.json"))
    assert r["results"] == f["results"]  # byte-identical floats (repr)
    assert r["batches_run"] == f["batches"] - 3  # the 3 committed batches were skipped
    assert f["batches_run"] == f["batches"]


def test_empty_request_list(backend):
    assert Engine(backend, progress=True).run([]) == []


def test_without_a_tty_no_bar_is_drawn_but_the_work_is_said_once(backend, capsys):
    from proctor.engine.progress import Progress

    bar = Progress(10, enabled=True)  # pytest's stderr is not a TTY
    bar.advance(4, tokens=100)
    bar.close()
    assert capsys.readouterr().err == ""
    Engine(backend, batch_size=2, progress=True).run(mc_requests(2))
    assert capsys.readouterr().err == "loglikelihood: 6 requests: 124 tokens in 1 batch\n"
    Engine(backend, batch_size=2, progress=False).run(mc_requests(2))
    assert capsys.readouterr().err == ""


def test_a_run_says_its_work_and_from_the_second_on_a_rough_time(backend, tmp_path, capsys):
    from proctor.engine import ResultCache
    from proctor.engine.workload import MIN_MEASURED_SECONDS

    with ResultCache(tmp_path / "results.sqlite") as cache:
        engine = Engine(backend, batch_size=2, progress=True, cache=cache)
        engine.run(mc_requests(2))
        first = capsys.readouterr().err
        assert "measured here" not in first  # a call this short measures no rate
        cache.put_rate(engine.fingerprint, "loglikelihood", 62.0)  # as a run of MIN_MEASURED_SECONDS or more keeps
        engine.run(mc_requests(3))
        said = capsys.readouterr().err
    assert said == ("loglikelihood: 3 requests (6 more cached): 146 tokens in 1 batch; about 2 s at the 62 "
                    "tokens/s measured here before\n"), (said, MIN_MEASURED_SECONDS)


def test_a_rate_is_kept_per_fingerprint_and_kind_and_a_tampered_one_is_dropped(tmp_path):
    import sqlite3

    from proctor.engine import ResultCache

    path = tmp_path / "results.sqlite"
    with ResultCache(path) as cache:
        cache.put_rate("fp", "generate", 10.0)
        cache.put_rate("fp", "generate", 12.5)  # the last rate measured wins
        assert cache.get_rate("fp", "generate") == 12.5 and cache.get_rate("fp", "loglikelihood") is None
        assert cache.get_rate("other", "generate") is None
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rate SET tokens_per_second = 1e9")
    with ResultCache(path) as cache:
        assert cache.get_rate("fp", "generate") is None and cache.tampered == 1


def test_out_of_memory_halves_the_batch_and_retries(backend):
    from proctor.errors import BatchTooLarge

    requests = mc_requests() + rc_requests()
    expected = Engine(backend, batch_size=1, progress=False).run(requests)
    score = backend.score

    def small_batches_only(rows, **kwargs):
        if len(rows) > 2:
            raise BatchTooLarge(f"{len(rows)} rows")
        return score(rows, **kwargs)

    backend.score = small_batches_only
    try:
        engine = Engine(backend, batch_size=8, progress=False)
        results = engine.run(requests)
    finally:
        del backend.score
    assert engine.stats.oom_splits > 0
    assert [r.num_tokens for r in results] == [r.num_tokens for r in expected]
    assert all(abs(a.sum_logits - b.sum_logits) < 1e-5 for a, b in zip(results, expected))


def test_a_single_row_that_does_not_fit_is_a_user_error(backend):
    from proctor.errors import BatchTooLarge

    def never_fits(rows, **kwargs):
        raise BatchTooLarge("no memory at all")

    backend.score = never_fits
    try:
        with pytest.raises(UserError, match="does not fit in the device's memory"):
            Engine(backend, batch_size=4, progress=False).run(mc_requests(1))
    finally:
        del backend.score


def test_hf_backend_turns_out_of_memory_into_batch_too_large(backend, monkeypatch):
    from proctor.errors import BatchTooLarge

    def oom(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")

    # the model's forward itself fails, whichever path (packed or padded) the backend takes
    monkeypatch.setattr(backend.model.get_decoder(), "forward", oom)
    windows = [Engine(backend, progress=False).policy.window("Question: x\nAnswer:", " A")]
    rows = [Row(w.inputs, (Readout(w.start, w.targets),)) for w in windows]
    with pytest.raises(BatchTooLarge):
        backend.score(rows)

    def other(*args, **kwargs):
        raise RuntimeError("some other failure")

    monkeypatch.setattr(backend.model.get_decoder(), "forward", other)
    with pytest.raises(RuntimeError, match="some other failure"):
        backend.score(rows)


def test_a_plan_says_its_documents_requests_and_generation_bound_before_any_model(data_dir):
    from proctor.pipeline import PromptOptions, plan

    evaluation = plan(["mmlu_astronomy:mc::olmes", "gsm8k::olmo3:n8:v2"], data_dir, 2, PromptOptions())
    assert evaluation.summary() == ("2 tasks, 4 documents: 8 loglikelihood requests, 2 generations (16 samples) of "
                                    "up to 512 new tokens")
