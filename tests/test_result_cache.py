"""The resume cache opened by several processes at once (data-parallel ranks on one machine)."""

import multiprocessing as mp

import pytest

from proctor.engine.cache import ResultCache
from proctor.requests import LoglikelihoodResult


def _open_and_store(path, barrier, rank, errors):
    barrier.wait()  # every process opens the new file at the same moment
    try:
        ResultCache(path).put_many("fp", {f"key{rank}": LoglikelihoodResult(-1.0 * rank, 1, True)})
    except Exception as e:  # reported to the parent: a child's traceback would not fail the test
        errors.put(repr(e))


@pytest.mark.slow  # heavy: subprocesses, over 3 s
def test_processes_opening_a_new_cache_at_once_all_succeed(tmp_path):
    # SQLite answers "database is locked" at once, without waiting, to processes that switch a
    # new file to WAL together; ResultCache retries. 5 of 180 openings failed here without it.
    ctx = mp.get_context("fork")
    for trial in range(15):
        path = tmp_path / f"cache{trial}.sqlite"
        barrier, errors = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_and_store, args=(path, barrier, r, errors)) for r in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        assert errors.empty(), errors.get()
        assert ResultCache(path).get_many("fp", [f"key{r}" for r in range(6)]).keys() == {f"key{r}" for r in range(6)}
