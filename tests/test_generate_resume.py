"""Generations are cached per request and a killed run resumes without redoing finished requests."""

import json
from pathlib import Path

import pytest
import torch

from proctor.engine import Engine, ResultCache
from proctor.requests import Generate

from killed_runs import finish, kill_when_stored, outputs, start_run
from tinylm import build_tiny_model

N8 = "gsm8k::olmo3:n8:v2"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


class Interrupted(Exception):
    pass


class CountingBackend:
    """Delegates to a real backend; counts generated rows; can fail after `fail_after` finished rows."""

    def __init__(self, inner, fail_after=None):
        self.inner, self.fail_after, self.finished = inner, fail_after, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, rows, on_done=None, slots=None):
        def counted(i, samples):
            if self.fail_after is not None and self.finished >= self.fail_after:
                raise Interrupted
            self.finished += 1
            on_done(i, samples)

        return self.inner.generate(rows, on_done=counted, slots=slots)


def requests():
    return [Generate(context=f"Question: {i} plus {i}?\nAnswer:", max_gen_toks=12 + i, do_sample=True,
                     temperature=0.7, top_p=0.95, repeats=3) for i in range(6)]


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add synchronisation
    yield
    torch.set_num_threads(threads)


def test_interrupted_run_resumes_without_redoing_finished_requests(tiny_dir, tmp_path, one_thread):
    from proctor.backends import load_backend

    backend = load_backend(str(tiny_dir), device="cpu", max_length=128)
    fresh = Engine(backend, batch_size=3, progress=False).generate(requests())

    cache = ResultCache(tmp_path / "results.sqlite")
    dying = CountingBackend(backend, fail_after=2)
    with pytest.raises(Interrupted):
        Engine(dying, batch_size=3, cache=cache, progress=False).generate(requests())
    # batch_size 3 = one request (3 samples) per batch: two finished requests were stored
    counting = CountingBackend(backend)
    engine = Engine(counting, batch_size=3, cache=cache, progress=False)
    resumed = engine.generate(requests())
    assert engine.stats.gen_cached == 2 and counting.finished == 4
    assert resumed == fresh

    # all cached now: nothing generated; another seed is not answered by the cache
    again = Engine(CountingBackend(backend), batch_size=3, cache=cache, progress=False)
    assert again.generate(requests()) == fresh and again.stats.gen_cached == 6
    reseeded = Engine(backend, batch_size=3, cache=cache, progress=False, seed=99)
    assert reseeded.generate(requests()) != fresh and reseeded.stats.gen_cached == 0


N8_DOCS = 2  # killed when the first is stored: one question resumes from the cache, one is generated


def n8_args(model: Path, data_dir: Path, out: Path) -> list[str]:
    # --deterministic: one sample per step, so no step's arithmetic depends on which samples share
    # it (a resumed run shares steps differently, and a matmul's last bits can flip a draw)
    return ["--model", str(model), "--tasks", N8, "--limit", str(N8_DOCS), "--deterministic", "--max-length", "640",
            "--data-dir", str(data_dir), "--output", str(out), "--no-progress", "--seed", "5"]


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_n8_sigkill_then_rerun_is_byte_identical(tiny_dir, data_dir, tmp_path):
    """gsm8k::olmo3:n8:v2 end to end on the tiny model (8 samples x up to 512 tokens), killed midway."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    # one thread: the tiny model's matrices are too small to gain from more
    victim = start_run(n8_args(tiny_dir, data_dir, out), cache, OMP_NUM_THREADS="1")
    done_before = kill_when_stored(victim, cache, "generation", 1)
    assert done_before == 1 and not out.exists()

    # the resumed run and an uninterrupted one side by side: one thread each, one core each
    resumed = start_run(n8_args(tiny_dir, data_dir, out), cache, OMP_NUM_THREADS="1")
    fresh_out = tmp_path / "fresh"
    fresh = start_run(n8_args(tiny_dir, data_dir, fresh_out), tmp_path / "fresh-cache", OMP_NUM_THREADS="1")
    finish(resumed)
    finish(fresh)
    assert outputs(out) == outputs(fresh_out)

    metrics = json.loads((out / "metrics.json").read_text())
    engine = metrics["engine"]
    assert engine["gen_cached"] >= done_before and engine["gen_samples"] == 8 * (N8_DOCS - engine["gen_cached"])
    assert metrics["model_config"]["seed"] == 5
    task = metrics["tasks"][N8]
    assert task["generation"]["repeats"] == 8 and task["generation"]["temperature"] == 0.6
    assert set(task["metrics"]) >= {"pass_at_1", "pass_at_8", "maj_at_8", "exact_match"}
    preds = [json.loads(line) for line in (out / "gsm8k-olmo3-n8-v2" / "predictions.jsonl").open()]
    assert [p["doc_id"] for p in preds] == list(range(N8_DOCS))
    for p in preds:
        assert len(p["model_output"]) == 8
        assert all(o["num_tokens"] <= 512 and o["finish_reason"] in ("stop", "eos", "length")
                   for o in p["model_output"])
