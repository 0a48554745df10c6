"""Data-parallel `proctor run` under torchrun: the same outputs as one process, and no lost work.

The CLI tests launch the real thing (`python -m torch.distributed.run --nproc-per-node 2
-m proctor run ...`, gloo on CPU) on the embedded SmolLM2; the engine tests run a tiny
model on spawned gloo ranks, each with its own cache file (as on separate machines).
Every process runs one thread: the result must not depend on the thread count, which
changes float sums in a CPU matmul.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distributed_runs import run_ranks
from killed_runs import outputs, stored_rows
from proctor.engine import Engine, ResultCache
from proctor.engine.distributed import DistributedContext
from proctor.errors import UserError
from proctor.requests import Generate, Loglikelihood, RollingLoglikelihood
from tinylm import build_tiny_model

SPEC = "mmlu_abstract_algebra:mc::olmes"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


# ---- the CLI under torchrun, on the real model ----------------------------------------

def cache(tmp_path: Path, name: str, models: Path) -> Path:
    """A new results cache that reuses the converted model."""
    directory = tmp_path / name
    directory.mkdir()
    (directory / "models").symlink_to(models)
    return directory


def command(out: Path, data_dir: Path, ranks: int = 1) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    return [*(launcher if ranks > 1 else [sys.executable]), "-m", "proctor", "run", "--model", "smollm2-135m",
            "--tasks", SPEC, "--limit", "8", "--batch-size", "1", "--data-dir", str(data_dir),
            "--output", str(out), "--no-progress"]


def start(cmd: list[str], cache_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PROCTOR_CACHE_DIR=str(cache_dir), **ONE_THREAD)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(run: subprocess.Popen) -> str:
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err[-3000:]
    return err


def engine_stats(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {**metrics["engine"], "world_size": metrics["run_config"]["world_size"]}


def workers(launcher: int) -> dict[int, int]:
    """rank -> pid of the processes torchrun (pid `launcher`) started."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == launcher:
                env = dict(v.split("=", 1) for v in (entry / "environ").read_text().split("\0") if "=" in v)
                found[int(env["RANK"])] = int(entry.name)
        except (OSError, KeyError, IndexError, ValueError):
            continue
    return found


@pytest.fixture(scope="module")
def single(tmp_path_factory, data_dir) -> Path:
    """An uninterrupted 1-process run; its cache holds the converted model the other runs link to."""
    tmp = tmp_path_factory.mktemp("single")
    finish(start(command(tmp / "run", data_dir), tmp / "cache"))
    return tmp / "run"


@pytest.fixture(scope="module")
def models(single) -> Path:
    return single.parent / "cache" / "models"


@pytest.mark.slow  # torchrun ranks on the real SmolLM2
def test_two_ranks_equal_one_process(single, models, data_dir, tmp_path):
    finish(start(command(tmp_path / "two", data_dir, ranks=2), cache(tmp_path, "cache", models)))
    assert outputs(tmp_path / "two") == outputs(single)  # records and predictions, byte for byte
    two, one = engine_stats(tmp_path / "two"), engine_stats(single)
    assert two["world_size"] == 2 and one["world_size"] == 1
    assert two["batches"] == one["batches"] == two["batches_run"] == one["batches_run"] > 2


@pytest.mark.slow  # torchrun ranks on the real SmolLM2
def test_a_killed_rank_loses_nothing_and_one_process_resumes(single, models, data_dir, tmp_path):
    shared = cache(tmp_path, "cache", models)
    run = start(command(tmp_path / "killed", data_dir, ranks=2), shared)
    deadline = time.monotonic() + 300
    while stored_rows(shared, "loglikelihood") == 0 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    ranks = workers(run.pid)
    assert run.poll() is None and set(ranks) == {0, 1}, "the run ended before a rank could be killed"
    os.kill(ranks[1], signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode != 0 and not (tmp_path / "killed").exists()
    # the surviving rank says what happened and what to do, without a traceback of its own
    assert "rank 0 of 2" in err and "finished work is cached, rerun the same command" in err
    stored = stored_rows(shared, "loglikelihood")
    assert stored > 0

    finish(start(command(tmp_path / "resumed", data_dir), shared))
    resumed, one = engine_stats(tmp_path / "resumed"), engine_stats(single)
    assert resumed["cached"] == stored < resumed["unique"]  # every stored result reused
    assert 0 < resumed["batches_run"] < one["batches_run"]
    assert outputs(tmp_path / "resumed") == outputs(single)


# ---- the engine on spawned ranks, a tiny model, one cache per rank ---------------------

LONG = "The quick brown fox jumps over the lazy dog. Paris is the capital of France. " * 3


def requests() -> tuple[list, list[Generate]]:
    scored = [Loglikelihood(f"Question: {i} plus {i}?\nAnswer:", f" {2 * i} apples") for i in range(7)]
    scored += [RollingLoglikelihood(LONG[:n]) for n in (0, 20, 150, len(LONG))]
    # five samples at three rows a batch: a request's rows run on into the next batch
    generated = [Generate(context=f"Question: {i} plus {i}?\nAnswer:", max_gen_toks=6 + i, do_sample=True,
                          temperature=0.7, top_p=0.95, repeats=5) for i in range(4)]
    generated += [Generate(context="Paris is the capital of", max_gen_toks=5)]
    return scored, generated


def engine_pass(model_dir: str, caches: list[str]) -> dict:
    """One rank's (or the only process's) results and summed stats; rank r uses caches[r], on a
    machine of its own (LOCAL_RANK 0)."""
    import torch.distributed as dist

    from proctor.backends import load_backend

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    backend = load_backend(model_dir, device="cpu", max_length=32)
    engine = Engine(backend, batch_size=3, cache=ResultCache(caches[rank]), progress=False,
                    distributed=DistributedContext(rank, world, local_rank=0))
    scored, generated = requests()
    result = {"scored": engine.run(scored), "generated": engine.generate(generated)}
    stats = engine.total_stats()
    return {**result, "cached": stats.cached + stats.gen_cached, "batches": stats.batches + stats.gen_batches,
            "batches_run": stats.batches_run + stats.gen_batches_run}


def copy_some(source: Path, target: Path) -> int:
    """Copy every other stored result (loglikelihoods, rolling chunks, generations) to a new cache."""
    ResultCache(target).close()
    with sqlite3.connect(target) as db:
        db.execute("ATTACH ? AS source", (str(source),))
        for table in ("loglikelihood", "generation"):
            keys = [k for (k,) in db.execute(f"SELECT key FROM source.{table} ORDER BY key")][::2]
            db.executemany(f"INSERT INTO {table} SELECT * FROM source.{table} WHERE key = ?", [(k,) for k in keys])
        return sum(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("loglikelihood", "generation"))


@pytest.mark.slow  # heavy: several processes, tens of seconds
def test_engine_ranks_on_separate_machines_share_results_and_any_world_resumes(tmp_path, one_torch_thread):
    model = str(build_tiny_model(tmp_path / "tiny"))
    alone = engine_pass(model, [str(tmp_path / "alone.sqlite")])
    assert alone["batches"] == alone["batches_run"] > len(requests()[1])

    # two machines, no shared cache; machine 1 holds some results of an earlier run
    caches = [str(tmp_path / "machine0.sqlite"), str(tmp_path / "machine1.sqlite")]
    assert copy_some(tmp_path / "alone.sqlite", Path(caches[1])) > 0
    ranks = run_ranks(engine_pass, 2, model, caches)
    for rank in ranks:
        assert rank["scored"] == alone["scored"] and rank["generated"] == alone["generated"]
        assert 0 < rank["batches_run"] < alone["batches_run"] and rank["cached"] > 0

    # each machine's cache now answers everything, for any number of ranks
    for path in caches:
        again = engine_pass(model, [path])
        assert again["batches_run"] == 0 and again["scored"] == alone["scored"]
        assert again["generated"] == alone["generated"]


# ---- the launch environment --------------------------------------------------------------

def test_context_from_torchrun_environment():
    assert DistributedContext.from_env({}) == DistributedContext(0, 1, 0)
    assert DistributedContext.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == DistributedContext(3, 4, 1)
    assert DistributedContext(1, 3).mine(list(range(8))) == [1, 4, 7]
    with pytest.raises(UserError, match="RANK=4 is not a rank of WORLD_SIZE=4"):
        DistributedContext.from_env({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(UserError, match="whole numbers"):
        DistributedContext.from_env({"RANK": "x", "WORLD_SIZE": "2"})
