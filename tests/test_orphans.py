"""No process proctor starts outlives it: SIGKILL `proctor run` at start-up and mid-run, for the
llama.cpp backend (its model child) and vLLM (its engine core and workers), then count the
processes the run had started that are still alive 5 s later (goal 0), and check that none
of them printed anything after their parent was gone."""

import importlib.util
import signal
import time

import psutil
import pytest

from killed_runs import start_run, stored_rows

pytestmark = pytest.mark.slow   # real model loads in llama.cpp and vLLM

GRACE_S = 5.0
LLAMACPP = importlib.util.find_spec("llama_cpp") is not None
VLLM = importlib.util.find_spec("vllm") is not None


def started_by(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def leftovers_after_kill(victim, ready) -> tuple[int, str]:
    """SIGKILL `victim` once `ready()`; return (its processes alive GRACE_S later, what it printed after)."""
    deadline = time.monotonic() + 400
    while not ready() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert victim.poll() is None, "the run ended before it could be killed: " + victim.stderr.read()[-2000:]
    children = started_by(victim.pid)
    assert children
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    _, alive = psutil.wait_procs(children, timeout=GRACE_S)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:  # leave nothing behind for the next test, whatever this one found
        p.kill()
    return len(alive), victim.stderr.read()


def has_child_named(victim, *words: str):
    def ready() -> bool:
        return any(any(w in " ".join(p.cmdline()) for w in words) for p in started_by(victim.pid)
                   if p.is_running())
    return ready


def run_args(backend: str, data_dir, out) -> list[str]:
    threads = ["--threads", "1"] if backend == "llamacpp" else []
    return ["--backend", backend, "--model", "smollm2-135m", "--tasks", "mmlu_astronomy:mc::olmes", "--limit", "12",
            "--batch-size", "1", *threads, "--data-dir", str(data_dir), "--output", str(out), "--no-progress"]


@pytest.mark.skipif(not LLAMACPP, reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("point", ["start-up", "mid-run"])
def test_the_llamacpp_child_dies_with_a_killed_run(point, tmp_path, data_dir):
    cache = tmp_path / "cache"
    victim = start_run(run_args("llamacpp", data_dir, tmp_path / "out"), cache)
    if point == "start-up":
        ready = has_child_named(victim, "proctor.backends.isolated")
    else:
        def ready() -> bool:
            return stored_rows(cache, "loglikelihood") >= 4
    left, said = leftovers_after_kill(victim, ready)
    assert left == 0
    assert "Traceback" not in said and "BrokenPipeError" not in said, said[-2000:]


@pytest.mark.skipif(not VLLM, reason="vLLM is not installed")
def test_vllms_engine_dies_with_a_run_killed_at_start_up(tmp_path, data_dir):
    victim = start_run(run_args("vllm", data_dir, tmp_path / "out"), tmp_path / "cache")
    engine_started = has_child_named(victim, "EngineCore", "multiprocessing")
    seen: list[float] = []

    def ready() -> bool:  # a moment into the engine's start-up: it loads the model
        if not seen and engine_started():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > 3
    left, said = leftovers_after_kill(victim, ready)
    assert left == 0
    assert "Traceback" not in said, said[-2000:]
