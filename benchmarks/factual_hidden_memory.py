"""Peak memory of hidden-state extraction as the bank grows (issue 6: bounded for 40,000+ queries).

Builds the real bank (../shared/data/factual), runs `extract_hidden` through the engine
with a tiny random Llama (the model's size is not what is measured) in a fresh process
per size, and prints each process's peak RSS. The engine computes the states batch by
batch, stores each batch in the result cache (a SQLite file in the run's temporary
directory, unless --no-cache) and hands each state on as it comes, straight into the
memory-mapped .npy files, so the peak should not grow with the number of queries beyond
the bank rows and the requests themselves: compare it with `state_mib` (queries x stored
layers x hidden size x 2 bytes), what holding every state at once would take.

    python benchmarks/factual_hidden_memory.py [--sizes 4000 40000] [--no-cache]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def child(n: int, data_dir: Path, work: Path, cache: bool) -> None:
    from proctor.engine import ResultCache
    from proctor.factual.bank import build_bank
    from proctor.factual.hidden import extract_hidden
    from proctor.runtime import session
    from tests.tinylm import build_tiny_model

    rows = build_bank(data_dir, facts_per_relation=150, languages=("fr", "ru", "zh", "ja", "ar", "es")).rows
    main = [row for row in rows if row["use_for_main_forward"]]
    while len(main) < n:  # repeat the bank under new ids if it is smaller than asked
        main += [dict(row, query_id=f"{row['query_id']}_{len(main)}") for row in main[: n - len(main)]]
    main = main[:n]
    with session(str(build_tiny_model(work / "tiny")), device="cpu", dtype="float32", batch_size=64,
                 progress=False, cache=cache, result_cache=ResultCache(work / "results.sqlite") if cache else None
                 ) as runtime:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        index = extract_hidden(main, runtime.engine, work / "hidden", model_name="tiny", bank_version="bench")
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"queries": n, "peak_rss_mib": peak / 1024, "rss_before_extraction_mib": before / 1024,
                      "state_mib": len(index.query_ids) * len(index.layers) * index.d_model * 2 / 2**20,
                      "batches_run": runtime.engine.stats.batches_run, "cache": cache, "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 40000])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--no-cache", action="store_true", help="run without the result cache")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.data_dir), Path(args.work), cache=not args.no_cache)
        return
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as work:
            out = subprocess.run([sys.executable, __file__, "--child", str(n), "--work", work,
                                  "--data-dir", args.data_dir, *(["--no-cache"] if args.no_cache else [])],
                                 check=True, capture_output=True, text=True)
            print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
