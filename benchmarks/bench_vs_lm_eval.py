"""proctor vs EleutherAI lm-evaluation-harness on the same requests, model, dtype and threads.

    python benchmarks/bench_vs_lm_eval.py                    # full: 200 MMLU + 200 HellaSwag items
    python benchmarks/bench_vs_lm_eval.py --items 12 --batch-sizes 8 --json out.json

Both tools get the identical (context, continuation) pairs, built by proctor's tasks:

- MMLU 5-shot MC (OLMES prompts, shots from dev): the first N/3 test items of each of
  computer_security, us_foreign_policy and high_school_geography.
- HellaSwag RC (hellaswag:rc::olmes): the first N items, 4 multi-token endings each,
  plus the 4 unconditional ("Answer:" + ending) requests per item, because `proctor run`
  computes those for every RC task; lm-eval is given them too, so the work is the same.

Every (tool, task, batch size) runs in its own child process of this one, with a fresh
model load, float32, CPU and 2 threads; the child reports its peak RSS (VmHWM). The
timed region is the scoring call alone: `Engine.run(requests)` (with an empty SQLite
results cache, so proctor really computes and commits) and `HFLM.loglikelihood(requests)`.
Tokenization is inside both. lm-eval "auto" is lm-eval's own batch-size search
(max_batch_size 64 by default, as on its command line), which is inside the timed call:
on CPU it never hits an OOM, so it runs 5 full-logit forwards of 64 x the longest request
(~190k tokens for MMLU, ~13 min here) and then scores at 64 rows with [64, ~600, 49152]
float32 logits (~15 GB peak). `--lm-eval-max-batch-size` caps that search.

Full run on 2 cores: roughly 1.5-2 hours, nearly all of it lm-eval (HellaSwag batch 8
alone ~25-35 min). A failed child (e.g. OOM-killed) shows as FAILED and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
MODEL = "smollm2-135m"
THREADS = 2
MMLU_SUBJECTS = ("computer_security", "us_foreign_policy", "high_school_geography")
HELLASWAG = "hellaswag:rc::olmes"


# ---------------------------------------------------------------- the shared workload

def task_instances(task: str, items: int) -> list[Any]:
    """proctor Instances for a benchmark task: `items` documents in all."""
    from proctor.pipeline import plan

    if task == "mmlu":
        per = [items // 3 + (i < items % 3) for i in range(3)]
        specs = [(f"mmlu_{s}:mc::olmes", n) for s, n in zip(MMLU_SUBJECTS, per) if n]
    elif task == "hellaswag":
        specs = [(HELLASWAG, items)]
    else:
        raise SystemExit(f"unknown task {task!r}; use mmlu or hellaswag")
    instances = []
    for spec, n in specs:
        run = plan([spec], DATA_DIR, n).tasks[spec]
        if len(run.instances) < n:
            raise SystemExit(f"{spec} has only {len(run.instances)} items, {n} asked")
        instances += run.instances
    return instances


def flat_requests(instances: list[Any]) -> list[Any]:
    """Every request proctor's evaluate() would send, in its order (conditional, then uncond)."""
    return [req for inst in instances for req in (*inst.requests, *inst.uncond_requests)]


def predictions(instances: list[Any], sums: list[float], per_char: bool) -> list[int]:
    """Each item's predicted choice by its task's primary metric: acc_raw (MMLU) or acc_per_char."""
    out, at = [], 0
    for inst in instances:
        n = len(inst.continuations)
        scores = sums[at:at + n]
        if per_char:
            scores = [s / max(len(c), 1) for s, c in zip(scores, inst.continuations)]
        out.append(max(range(n), key=lambda i: (scores[i], -i)))  # ties to the lowest index
        at += n + len(inst.uncond_requests)
    return out


# ---------------------------------------------------------------- child: one tool, one task

def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(tool: str, task: str, batch: str, items: int, out: Path, lm_eval_max_batch: int) -> None:
    import torch

    torch.set_num_threads(THREADS)
    from proctor.runtime import session

    started = time.perf_counter()
    instances = task_instances(task, items)
    requests = flat_requests(instances)
    bs: Any = batch if batch == "auto" else int(batch)
    extra: dict[str, Any] = {}
    # proctor's runtime loads the model for both tools; the lm-eval child scores with the same object
    with session(MODEL, device="cpu", dtype="float32", max_length=2048, batch_size=bs, progress=False) as runtime:
        backend = runtime.backend
        if tool == "proctor":
            t0 = time.perf_counter()
            results = runtime.engine.run(requests)
            wall = time.perf_counter() - t0
            sums = [r.sum_logits for r in results]
            stats = runtime.engine.stats
            extra = {"tokens_run": stats.tokens_run, "batches_run": stats.batches_run, "rows": stats.rows,
                     "cached": stats.cached, "parameters": sum(p.numel() for p in backend.model.parameters()),
                     "embedding_parameters": backend.model.get_input_embeddings().weight.numel()}
            if stats.cached:
                raise SystemExit("proctor's results cache was not empty")
        elif tool == "lm-eval":
            from lm_eval.api.instance import Instance
            from lm_eval.models.huggingface import HFLM

            lm = HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=bs, max_length=2048,
                      max_batch_size=lm_eval_max_batch)
            lm_requests = [Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation),
                                    idx=i) for i, r in enumerate(requests)]
            t0 = time.perf_counter()
            results = lm.loglikelihood(lm_requests, disable_tqdm=True)
            wall = time.perf_counter() - t0
            sums = [float(ll) for ll, _ in results]
            extra = {"detected_batch_sizes": {str(k): v for k, v in getattr(lm, "batch_sizes", {}).items()}}
        else:
            raise SystemExit(f"unknown tool {tool!r}")
    record = {"tool": tool, "task": task, "batch_size": batch, "items": len(instances),
              "requests": len(requests), "wall_s": wall, "child_s": time.perf_counter() - started,
              "peak_rss_mb": peak_rss_mb(), "sum_logits": sums,
              "predictions": predictions(instances, sums, per_char=task == "hellaswag"), **extra}
    out.write_text(json.dumps(record))


# ---------------------------------------------------------------- parent: orchestrate, compare

def matmul_flops(threads: int = THREADS) -> dict[str, float]:
    """Float32 matmul rate (FLOP/s) on `threads` threads, square and model-shaped (tokens x 576 x 1536).

    Best of several short trials, so a moment of contention from other processes on the
    machine does not lower the rate (which would flatter the utilisation).
    """
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for name, (m, k, n) in {"1024x1024x1024": (1024, 1024, 1024), "1024x576x1536": (1024, 576, 1536)}.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            torch.matmul(a, b)
        best = 0.0
        for _ in range(8):
            reps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.25:
                torch.matmul(a, b)
                reps += 1
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t0))
        rates[name] = best
    return rates


def spawn(tool: str, task: str, batch: str, items: int, scratch: Path, lm_eval_max_batch: int) -> dict:
    """Run one measurement in a child with an empty proctor results cache (the model is shared)."""
    cache = scratch / f"cache-{tool}-{task}-{batch}"
    cache.mkdir()
    models = Path(os.environ.get("PROCTOR_CACHE_DIR", Path.home() / ".cache" / "proctor")).expanduser() / "models"
    models.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(models, target_is_directory=True)
    out = scratch / f"{tool}-{task}-{batch}.json"
    env = {**os.environ, "PROCTOR_CACHE_DIR": str(cache), "OMP_NUM_THREADS": str(THREADS),
           "MKL_NUM_THREADS": str(THREADS), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, __file__, "--child", tool, task, batch, "--items", str(items),
           "--lm-eval-max-batch-size", str(lm_eval_max_batch)]
    print(f"running {tool:8} {task:9} batch {batch:>4} ...", end="", flush=True)
    proc = subprocess.run([*cmd, "--child-out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(" failed", flush=True)
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {"tool": tool, "task": task, "batch_size": batch, "error": f"exit {proc.returncode}: {tail}"}
    record = json.loads(out.read_text())
    print(f" {record['wall_s']:.1f} s scoring, {record['child_s']:.1f} s in all", flush=True)
    return record


def compare(ours: dict, theirs: dict) -> dict[str, Any]:
    same = sum(a == b for a, b in zip(ours["predictions"], theirs["predictions"]))
    delta = max(abs(a - b) for a, b in zip(ours["sum_logits"], theirs["sum_logits"]))
    return {"identical_predictions": same, "items": len(ours["predictions"]), "max_abs_delta_sum_logits": delta}


def utilisation(record: dict, flops: float) -> dict[str, float]:
    """Useful FLOPs / (wall x matmul rate): 2 x params x tokens proctor computed."""
    body = record["parameters"] - record["embedding_parameters"]  # the LM head runs only at readouts
    per_token = {"non_embedding": body, "all_parameters": record["parameters"]}
    return {k: 2 * n * record["tokens_run"] / (record["wall_s"] * flops) for k, n in per_token.items()}


def fmt_row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def report(records: list[dict], flops: dict[str, float]) -> list[dict]:
    head = ["tool", "task", "batch", "items", "items/s", "wall s", "proctor/lm-eval", "peak RSS MB", "same pred", "max |Δ sum_logits|"]
    rows, summary = [], []
    index = {(r["tool"], r["task"], r["batch_size"]): r for r in records}
    for r in records:
        key = (r["task"], r["batch_size"])
        if "error" in r:
            rows.append([r["tool"], r["task"], r["batch_size"], "-", "FAILED", "-", "-", "-", "-", "-"])
            continue
        rate = r["items"] / r["wall_s"]
        other = index.get(("lm-eval", *key)) if r["tool"] == "proctor" else None
        ratio, agree, delta = "-", "-", "-"
        if other and "error" not in other:
            ours, theirs = r, other
            ratio = f"{(ours['items'] / ours['wall_s']) / (theirs['items'] / theirs['wall_s']):.2f}x"
            cmp = compare(ours, theirs)
            agree = f"{cmp['identical_predictions']}/{cmp['items']}"
            delta = f"{cmp['max_abs_delta_sum_logits']:.2e}"
            r.setdefault("agreement", cmp)
        batch = r["batch_size"]
        if r.get("detected_batch_sizes"):
            batch += "(" + ",".join(map(str, r["detected_batch_sizes"].values())) + ")"
        rows.append([r["tool"], r["task"], batch, str(r["items"]), f"{rate:.2f}", f"{r['wall_s']:.1f}",
                     ratio, f"{r['peak_rss_mb']:.0f}", agree, delta])
        summary.append({k: v for k, v in r.items() if k not in ("sum_logits", "predictions")})
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    print(fmt_row(head, widths))
    print(fmt_row(["-" * w for w in widths], widths))
    for row in rows:
        print(fmt_row(row, widths))
    print("wall s: the scoring call alone (tokenization in, model load out); peak RSS: each child's VmHWM;\n"
          "same pred: items whose predicted choice (acc_raw MMLU, acc_per_char HellaSwag) is identical; "
          "lm-eval auto(N): the batch size its search chose (the search is inside wall s)")

    rate = max(flops.values())
    print("\nmatmul float32, %d threads: %s  (utilisation uses the higher, %.1f GFLOP/s)" % (
        THREADS, ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in flops.items()), rate / 1e9))
    for s in summary:
        if s["tool"] == "proctor":
            u = utilisation(s, rate)
            s["utilisation"] = u
            print(f"proctor {s['task']:9} batch {s['batch_size']:>4}: {s['tokens_run']:,} tokens computed, "
                  f"{s['tokens_run'] / s['wall_s']:.0f} tokens/s, useful-FLOP utilisation "
                  f"{u['non_embedding']:.0%} (2 x {(s['parameters'] - s['embedding_parameters']) / 1e6:.1f}M "
                  f"non-embedding params; {u['all_parameters']:.0%} counting all {s['parameters'] / 1e6:.1f}M)")
    return summary


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=200, help="items per task (MMLU: split over 3 subjects)")
    p.add_argument("--tasks", default="mmlu,hellaswag")
    p.add_argument("--batch-sizes", default="8,auto")
    p.add_argument("--tools", default="proctor,lm-eval")
    p.add_argument("--lm-eval-max-batch-size", type=int, default=64,
                   help="cap of lm-eval's auto batch-size search (lm-eval's default: 64)")
    p.add_argument("--json", type=Path, help="write the summary (no per-request scores) here")
    p.add_argument("--child", nargs=3, metavar=("TOOL", "TASK", "BATCH"), help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(*args.child, items=args.items, out=args.child_out, lm_eval_max_batch=args.lm_eval_max_batch_size)
        return 0

    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    flops = matmul_flops()
    records = []
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as scratch:
        for task in split(args.tasks):
            for batch in split(args.batch_sizes):
                for tool in split(args.tools):
                    records.append(spawn(tool, task, batch, args.items, Path(scratch), args.lm_eval_max_batch_size))
    print(f"\nSmolLM2-135M, float32, CPU, {THREADS} threads, {os.cpu_count()} CPUs; {args.items} items per task\n")
    summary = report(records, flops)
    for r in records:
        if "error" in r:
            print(f"\n{r['tool']} {r['task']} batch {r['batch_size']} failed: {r['error']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"matmul_flops": flops, "items": args.items, "threads": THREADS,
                                         "lm_eval_max_batch_size": args.lm_eval_max_batch_size, "runs": summary,
                                         "failed": [r for r in records if "error" in r]}, indent=2))
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
