"""A decode step's time against the memory-bandwidth floor: what one more generated token costs.

    python benchmarks/bench_decode_step.py                  # batch 1, 8, 32
    python benchmarks/bench_decode_step.py --batches 1 --steps 128 --json step.json

A decode step reads every weight once whatever its batch, so at small batches its time is
bounded below by (bytes it reads) / (the memory bandwidth). This script measures both on
this machine, float32, 2 threads:

- step time: proctor's decode loop (`hf_generate.generate_rows` inside `packed_linears`, what
  `engine.generate` runs) on B greedy GSM8K prompts (`gsm8k::olmes`, the first B questions, as proctor tokenizes
  them), with no EOS and no stop string, to K+1 and to 1 new tokens; a step is the
  difference over K (the prefill and the first token cancel out). Best of `--repeat` runs.
  One token per step: greedy prompt-lookup drafts are off for this. The last column runs
  the same with them on (what `engine.generate` does): time per generated token.
- bytes per step: every parameter once (the tied embedding is the LM head, read every
  step; the input embedding reads one row per sample) plus the keys and values the step
  attends to, every layer: a shared few-shot prefix once, each prompt's own tokens, and
  each sample's generated tokens (half of K on average).
- bandwidth: the best of several copies of a 1 GiB float32 buffer into another, on the
  same 2 threads: 1 GiB / the copy's time (STREAM would count the 2 GiB read and written).

The floor is bytes per step / bandwidth; the ratio step / floor says how far the step is
from it (1.0 = as fast as a copy moves memory). Reading alone is faster than copying (a
copy also writes), so a step can beat that floor: the table also gives the floor at the
read bandwidth (the best of several sums of the same 1 GiB buffer), the hard limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
THREADS = 2
SPEC = "gsm8k::olmes"


@dataclass(frozen=True)
class StepMeasure:
    batch: int
    steps: int
    step_ms: float
    weight_mb: float
    kv_mb: float
    floor_ms: float
    ratio: float
    read_floor_ms: float
    tokens_per_s: float
    drafted_ms: float   # time per generated token per sample with greedy drafts (prompt lookup) on


def copy_bandwidth(gib: float = 1.0, trials: int = 6) -> float:
    """Bytes per second of the best of `trials` copies of a `gib` GiB buffer (the buffer's size / time).

    A copy reads the buffer and writes as much, so this is the rate at which memory is read
    while as much is written: what a step that reads its weights once runs against.
    """
    import torch

    n = int(gib * (1 << 30)) // 4
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return n * 4 / best


def read_bandwidth(gib: float = 1.0, trials: int = 6) -> float:
    """Bytes per second of the best of `trials` sums of a `gib` GiB buffer: memory read and nothing written."""
    import torch

    n = int(gib * (1 << 30)) // 4
    src = torch.ones(n)
    src.sum()
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        src.sum()
        best = min(best, time.perf_counter() - t0)
    return n * 4 / best


def generate_seconds(backend: Any, rows: list[Any], new_tokens: int, single: bool = True) -> float:
    """Wall seconds of proctor's decode loop over `rows`, each to exactly `new_tokens` (no EOS, no stop).

    `single`: one token per step (no prompt-lookup drafts), so the time is K steps' time.
    """
    from proctor.backends import hf_generate
    from proctor.backends.decode_linear import packed_linears

    rows = [replace(r, max_new_tokens=new_tokens) for r in rows]
    drafts, hf_generate.MAX_DRAFT = hf_generate.MAX_DRAFT, 0 if single else hf_generate.MAX_DRAFT
    t0 = time.perf_counter()
    try:
        with packed_linears(backend.model):
            done = hf_generate.generate_rows(backend.model.get_decoder(), backend._head_at, backend.tokenizer,
                                             frozenset(), rows, slots=len(rows))
    finally:
        hf_generate.MAX_DRAFT = drafts
    seconds = time.perf_counter() - t0
    if any(g.num_tokens != new_tokens for samples in done for g in samples):
        raise SystemExit(f"a sample ended before {new_tokens} tokens")
    return seconds


def measure(batches: list[int], steps: int, repeat: int) -> tuple[list[StepMeasure], float, float]:
    import torch

    torch.set_num_threads(THREADS)
    from proctor.backends.hf_generate import prefix_groups
    from proctor.engine.gen_plan import GenRow
    from proctor.pipeline import plan
    from proctor.runtime import session

    bandwidth, read = copy_bandwidth(), read_bandwidth()
    run = plan([SPEC], DATA_DIR, max(batches)).tasks[SPEC]
    requests = [inst.request for inst in run.instances]
    out = []
    with session("smollm2-135m", device="cpu", dtype="float32", max_length=2048, batch_size="auto",
                 progress=False, cache=False) as runtime:
        backend = runtime.backend
        model, config = backend.model, backend.model.config
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        embedding = model.get_input_embeddings().weight
        if model.get_output_embeddings().weight is not embedding:  # untied: the input table is not read whole
            weights -= embedding.numel() * embedding.element_size()
        kv_per_token = (2 * config.num_hidden_layers * config.num_key_value_heads
                        * (config.hidden_size // config.num_attention_heads) * embedding.element_size())
        contexts = runtime.engine.policy.request_generation_contexts(requests)
        rows = [GenRow(tuple(c.tokens), 1, (), False, 0.0, 1.0, (0,)) for c in contexts]
        for b in batches:
            chosen = rows[:b]
            # a prefix shared by a group of prompts (the 8-shot block) is stored and read once
            prompt = sum(len(chosen[members[0]].tokens[:shared]) + sum(len(chosen[i].tokens) - shared for i in members)
                         for shared, members in prefix_groups([r.tokens for r in chosen]))
            best_step = best_drafted = float("inf")
            for _ in range(repeat):
                short = generate_seconds(backend, chosen, 1)
                long = generate_seconds(backend, chosen, steps + 1)
                drafted = generate_seconds(backend, chosen, steps + 1, single=False)
                best_step = min(best_step, (long - short) / steps)
                best_drafted = min(best_drafted, (drafted - short) / steps)
            kv = kv_per_token * (prompt + b * steps / 2)  # the mean step reads half the generated tokens
            floor = (weights + kv) / bandwidth
            out.append(StepMeasure(b, steps, best_step * 1e3, weights / 1e6, kv / 1e6, floor * 1e3,
                                   best_step / floor, (weights + kv) / read * 1e3, b / best_step,
                                   best_drafted * 1e3))
    return out, bandwidth, read


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32], help="samples decoded per step")
    p.add_argument("--steps", type=int, default=64, help="decode steps timed per run")
    p.add_argument("--repeat", type=int, default=2, help="runs per batch (the best is kept)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    rows, bandwidth, read = measure(args.batches, args.steps, args.repeat)
    print(f"SmolLM2-135M-Instruct float32, CPU, {THREADS} threads; copy bandwidth {bandwidth / 1e9:.1f} GB/s "
          f"(1 GiB copied / time), read bandwidth {read / 1e9:.1f} GB/s (1 GiB summed / time)\n")
    print("| batch | step ms | weights MB | keys/values MB | floor ms | step / floor | read floor ms "
          "| new tokens/s | ms per token, drafts on |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.batch} | {r.step_ms:.1f} | {r.weight_mb:.0f} | {r.kv_mb:.0f} | {r.floor_ms:.1f} | "
              f"{r.ratio:.2f}× | {r.read_floor_ms:.1f} | {r.tokens_per_s:.1f} | {r.drafted_ms:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"bandwidth_bytes_per_s": bandwidth, "read_bytes_per_s": read,
                                         "rows": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
