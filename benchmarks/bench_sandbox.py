"""The sandbox's cost per HumanEval program: wall ms per canonical solution, run one at a
time and through the pool, on the real scoring path (`HumanEvalTask.score_many`).

    python benchmarks/bench_sandbox.py                       # all 164, sequential and pooled
    python benchmarks/bench_sandbox.py --sequential 40 --workers 4
    PYTHONPATH=/tmp/proctor_before python benchmarks/bench_sandbox.py   # another checkout

Every canonical solution must pass (the script exits 1 otherwise), so a figure is only
printed for a sandbox that judged all of them right. It imports whichever `proctor` comes
first on sys.path, so the same script measures an older checkout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))


def timed(task, instances, workers: int) -> float:
    """Seconds to score `instances` (one canonical sample each) with `workers` at a time."""
    from proctor.requests import GenerateResult, Generation

    task.workers = workers
    results = [GenerateResult((Generation(i.target.canonical_solution, 1, "stop"),)) for i in instances]
    start = time.perf_counter()
    scores = task.score_many(instances, results)
    elapsed = time.perf_counter() - start
    failed = [i.native_id for i, s in zip(instances, scores) if not s.is_correct]
    if failed:
        sys.exit(f"canonical solutions failed: {failed[:5]} ({len(failed)} in all)")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequential", type=int, default=164, help="problems run one at a time")
    parser.add_argument("--workers", type=int, default=None, help="pool size (default: the task's)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of each measurement (median kept)")
    args = parser.parse_args()

    import proctor
    from proctor import sandbox
    from proctor.sandbox.run import default_workers
    from proctor.tasks.registry import resolve

    task = resolve("humaneval::greedy")[0]
    task.allow_unsafe_exec = not sandbox.detect().network_isolated
    instances = task.instances(DATA_DIR)
    workers = args.workers or default_workers()
    print(f"proctor from {Path(proctor.__file__).parent}; sandbox {sandbox.detect().describe()}; "
          f"{os.cpu_count()} CPUs")
    timed(task, instances[:4], 1)   # warm-up: isolation probe, page cache
    seq = statistics.median(timed(task, instances[:args.sequential], 1) for _ in range(args.repeats))
    pool = statistics.median(timed(task, instances, workers) for _ in range(args.repeats))
    print(f"sequential: {args.sequential} programs in {seq:.2f} s = {1000 * seq / args.sequential:.0f} ms/program")
    print(f"pool of {workers}: {len(instances)} programs in {pool:.2f} s = "
          f"{1000 * pool / len(instances):.0f} ms/program")


if __name__ == "__main__":
    main()
