"""`proctor run` killed with SIGKILL and run again gives byte-identical outputs."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tinylm import build_tiny_model

SPEC = "mmlu_stem:mc::olmes"


def cached_rows(cache_dir: Path) -> int:
    path = cache_dir / "results.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM loglikelihood").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet, or locked for a moment
        return 0


def start(model: Path, data_dir: Path, out: Path, cache_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PROCTOR_CACHE_DIR=str(cache_dir), HF_HUB_OFFLINE="1")
    args = [
        sys.executable, "-m", "proctor", "run", "--model", str(model), "--tasks", SPEC, "--limit", "12",
        "--batch-size", "2", "--data-dir", str(data_dir), "--output", str(out), "--no-progress",
    ]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outputs(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != "metrics.json"  # metrics.json carries timings
    }


def test_sigkill_then_rerun_is_byte_identical(data_dir, tmp_path):
    model = build_tiny_model(tmp_path / "tiny")
    out, cache = tmp_path / "run", tmp_path / "cache"

    victim = start(model, data_dir, out, cache)
    deadline = time.monotonic() + 300
    while cached_rows(cache) < 20 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim.poll() is None, "the run finished before it could be killed: " + victim.stderr.read()[-2000:]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done_before_kill = cached_rows(cache)
    assert 0 < done_before_kill < 18 * 12
    assert not out.exists()  # nothing half-written stands at the output path

    resumed = start(model, data_dir, out, cache)
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()[-2000:]
    fresh_out = tmp_path / "fresh"
    fresh = start(model, data_dir, fresh_out, tmp_path / "fresh-cache")
    assert fresh.wait(timeout=600) == 0, fresh.stderr.read()[-2000:]

    resumed_files, fresh_files = outputs(out), outputs(fresh_out)
    assert len([n for n in fresh_files if n.endswith("predictions.jsonl")]) == 18
    assert resumed_files == fresh_files
