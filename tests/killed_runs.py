"""Helpers for tests that SIGKILL a real `proctor run` and run it again."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


def stored_rows(cache_dir: Path, table: str) -> int:
    """Results stored in the run's SQLite cache table so far (0 before it exists)."""
    path = cache_dir / "results.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=1) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet, or locked for a moment
        return 0


def start_run(args: list[str], cache_dir: Path, **env: str) -> subprocess.Popen:
    """`proctor run <args>` in a child process with its own results cache."""
    environ = dict(os.environ, PROCTOR_CACHE_DIR=str(cache_dir), HF_HUB_OFFLINE="1", **env)
    return subprocess.Popen([sys.executable, "-m", "proctor", "run", *args], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_when_stored(victim: subprocess.Popen, cache_dir: Path, table: str, rows: int) -> int:
    """SIGKILL `victim` once `rows` results are stored; the number stored when it died."""
    deadline = time.monotonic() + 300
    while stored_rows(cache_dir, table) < rows and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim.poll() is None, "the run finished before it could be killed: " + victim.stderr.read()[-2000:]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    return stored_rows(cache_dir, table)


def finish(run: subprocess.Popen) -> None:
    assert run.wait(timeout=600) == 0, run.stderr.read()[-2000:]


def outputs(run_dir: Path) -> dict[str, bytes]:
    """Every output file's bytes except metrics.json (which carries timings) and the manifest
    (which holds metrics.json's hash)."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in ("metrics.json", ".proctor-manifest.json")}
