"""Shared-prefix scoring on the real model: the same items with and without prefix sharing.

    python benchmarks/bench_prefix_sharing.py --task mmlu_computer_security:mc::olmes --items 40

Prints, for each mode, wall time, items/s, tokens the model computed vs the tokens an
unshared run computes, and the largest |Δ sum_logits| and prediction agreement between modes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", help="task spec (repeatable)")
    parser.add_argument("--items", type=int, default=40, help="items per task")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--data-dir", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from proctor.runtime import session
    from proctor.tasks.registry import resolve

    torch.set_num_threads(args.threads)
    batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    docs = []
    for spec in args.task or ["mmlu_computer_security:mc::olmes"]:
        (task,) = resolve(spec)
        docs += task.instances(args.data_dir, args.items)
    requests = [r for d in docs for r in d.requests]

    results = {}
    with session(args.model, device="cpu", dtype="float32", cache=False, progress=False) as loaded:
        for share in (True, False):  # one runtime per mode on the one loaded model
            loaded.backend.shares_prefixes = share
            with session(loaded.backend, batch_size=batch_size, cache=False, progress=False) as runtime:
                start = time.perf_counter()
                results[share] = runtime.engine.run(requests)
                wall = time.perf_counter() - start
                s = runtime.engine.stats
            print(f"{'shared  ' if share else 'unshared'} {wall:7.1f} s  {len(docs) / wall:6.2f} items/s  "
                  f"tokens computed {s.tokens_run} of {s.tokens_total} ({s.tokens_run / s.tokens_total:.1%})  "
                  f"batches {s.batches}  prefixes {s.prefixes_run}  {s.tokens_run / wall:.0f} tokens/s")

    shared, plain = results[True], results[False]
    worst = max(abs(a.sum_logits - b.sum_logits) for a, b in zip(shared, plain))
    agree, at = 0, 0
    for doc in docs:
        n = len(doc.requests)
        mine, ref = [r.sum_logits for r in shared[at:at + n]], [r.sum_logits for r in plain[at:at + n]]
        agree += mine.index(max(mine)) == ref.index(max(ref))
        at += n
    print(f"max |Δ sum_logits| {worst:.2e}; identical predictions {agree}/{len(docs)}")


if __name__ == "__main__":
    main()
