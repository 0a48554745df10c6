"""A real GSM8K n=8 run with SmolLM2, SIGKILLed mid-run, then resumed.

    python benchmarks/gsm8k_kill_resume.py                 # 20 items x 8 samples
    python benchmarks/gsm8k_kill_resume.py --items 4 --kill-after 2

Runs `proctor run --tasks gsm8k::olmo3:n8:v2` in a child process with a fresh results
cache (the converted model is shared with the usual cache), kills it with SIGKILL once
`--kill-after` requests (of 8 samples each) are stored, then runs the same command
again. Checks that the second run took every stored request from the cache, generated
only the others, and left the stored samples untouched; prints timings and scores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
SPEC = "gsm8k::olmo3:n8:v2"


def stored(db: Path) -> dict[str, str]:
    """Generation rows in the results cache: key -> samples (JSON)."""
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT key, samples FROM generation"))
    except sqlite3.OperationalError:  # table not created yet
        return {}


def command(args: argparse.Namespace, output: Path) -> list[str]:
    return [sys.executable, "-m", "proctor", "run", "--model", "smollm2-135m", "--tasks", SPEC,
            "--limit", str(args.items), "--batch-size", str(args.batch_size), "--data-dir", str(DATA_DIR),
            "--output", str(output), "--no-progress"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--kill-after", type=int, default=8, help="stored requests before the SIGKILL")
    parser.add_argument("--batch-size", type=int, default=64, help="sample rows per generation batch")
    args = parser.parse_args()

    from proctor.backends.models import cache_root

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = work / "cache"
        cache.mkdir()
        (cache / "models").symlink_to(cache_root() / "models")
        env = {**os.environ, "PROCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
        db = cache / "results.sqlite"

        t0 = time.perf_counter()
        child = subprocess.Popen(command(args, work / "first"), env=env, cwd=ROOT)
        while child.poll() is None and len(stored(db)) < args.kill_after:
            time.sleep(1)
        if child.poll() is not None:
            raise SystemExit(f"the first run ended (exit {child.returncode}) before {args.kill_after} "
                             "requests were stored; lower --kill-after")
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed_at = time.perf_counter() - t0
        before = stored(db)
        print(f"killed after {killed_at:.0f} s with {len(before)} of {args.items} requests stored")
        if (work / "first").exists():
            raise SystemExit("FAILED: the killed run left an output directory")

        t1 = time.perf_counter()
        subprocess.run(command(args, work / "second"), env=env, cwd=ROOT, check=True)
        resumed = time.perf_counter() - t1
        after = stored(db)
        metrics = json.loads((work / "second" / "metrics.json").read_text())
        engine = metrics["engine"]
        fresh = args.items - len(before)
        checks = {
            "stored requests reused": engine["gen_cached"] == len(before),
            "only the others generated": engine["gen_samples"] == 8 * fresh,
            "stored samples untouched": all(after[k] == v for k, v in before.items()),
            "every request stored": len(after) == args.items,
        }
        task = metrics["tasks"][SPEC]["metrics"]
        print(f"resumed run: {resumed:.0f} s, generated {engine['gen_samples']} samples "
              f"({engine['gen_tokens']} tokens, {engine['generated_tokens_per_second']:.1f} tokens/s), "
              f"took {engine['gen_cached']} requests from the cache")
        print("scores: " + ", ".join(f"{k} {task[k]['mean']:.3f}" for k in
                                      ("pass_at_1", "pass_at_8", "maj_at_8", "exact_match") if k in task))
        for name, ok in checks.items():
            print(f"  {'ok' if ok else 'FAILED'}: {name}")
        if not all(checks.values()):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
