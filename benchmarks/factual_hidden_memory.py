"""Peak memory of hidden-state extraction as the bank grows (issue 6: bounded for 40,000+ queries).

Builds the real bank (../shared/data/factual), runs `extract_hidden` with a tiny random
Llama (the model's size is not what is measured) in a fresh process per size, and prints
each process's peak RSS. States stream into memory-mapped .npy files one batch at a time,
so the peak should not grow with the number of queries beyond the bank rows themselves.

    python benchmarks/factual_hidden_memory.py [--sizes 4000 40000]
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


def child(n: int, data_dir: Path, work: Path) -> None:
    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source
    from proctor.factual.bank import build_bank
    from proctor.factual.hidden import extract_hidden
    from tests.tinylm import build_tiny_model

    rows = build_bank(data_dir, facts_per_relation=150, languages=("fr", "ru", "zh", "ja", "ar", "es")).rows
    main = [row for row in rows if row["use_for_main_forward"]]
    while len(main) < n:  # repeat the bank under new ids if it is smaller than asked
        main += [dict(row, query_id=f"{row['query_id']}_{len(main)}") for row in main[: n - len(main)]]
    main = main[:n]
    import torch

    loaded = load_model(resolve_source(str(build_tiny_model(work / "tiny"))), dtype=torch.float32,
                        device=torch.device("cpu"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    extract_hidden(main, loaded.model, loaded.tokenizer, work / "hidden", model_name="tiny",
                   model_identity="tiny", bank_version="bench", batch_size=64, progress=False)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"queries": n, "peak_rss_mib": peak / 1024, "rss_before_extraction_mib": before / 1024,
                      "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 40000])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.data_dir), Path(args.work))
        return
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as work:
            out = subprocess.run([sys.executable, __file__, "--child", str(n), "--work", work,
                                  "--data-dir", args.data_dir], check=True, capture_output=True, text=True)
            print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
