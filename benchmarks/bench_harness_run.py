"""Whole-process speed of lm-eval's own tasks: proctor's bridge vs `lm_eval --model hf` vs lm-eval driving ProctorLM.

    python benchmarks/bench_harness_run.py                      # the three workloads below
    python benchmarks/bench_harness_run.py --workloads gsm8k --json out.json

Each workload runs three ways, each a fresh process timed from start to exit, with a fresh
result cache and the same threads (`--threads`, default 2). lm-eval's task index (its
~14,000 YAML files parsed, ~12 s) is in proctor's cache as after any earlier `lm_eval:` run
(`proctor/harness/index_cache.py`); `--cold-index` leaves it out, so a proctor run parses
the YAML files as lm-eval does:

- `proctor run --tasks lm_eval:<task> ...` — the bridge: lm-eval's task objects, proctor's engine;
- `proctor lm-eval run --model hf ...` — lm-eval's own command line and its HFLM (proctor only
  serves the local data, as `--data-dir` does for the bridge);
- `proctor lm-eval run --model proctor ...` — lm-eval's command line with ProctorLM.

The model is SmolLM2-135M's plain transformers copy (the embedded GGUF converted once), in
float32 on the CPU, for all three. Workloads:

- `mmlu`: MMLU 5-shot, 100 documents (25 of each of four subjects);
- `hellaswag`: HellaSwag, 40 documents, 0-shot: lm-eval's 10-shot draws its examples from the
  train split, which the local data directory lacks (offline, lm-eval cannot run it either);
- `gsm8k`: GSM8K 5-shot greedy (lm-eval's `gsm8k`), 8 documents.

lm-eval's HFLM gets `--batch_size 8` (its `auto` runs a batch-size search of full-logit
forwards, minutes on a CPU); proctor and ProctorLM their default (the engine sizes its own
batches). The
script checks that the three report the same primary score of every task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
MMLU_SUBJECTS = ("anatomy", "astronomy", "college_biology", "computer_security")

#: workload -> (lm-eval task names, --limit per task, --num-fewshot or None for the task's own)
WORKLOADS: dict[str, tuple[tuple[str, ...], int, Optional[int]]] = {
    "mmlu": (tuple(f"mmlu_{s}" for s in MMLU_SUBJECTS), 25, 5),
    "hellaswag": (("hellaswag",), 40, None),
    "gsm8k": (("gsm8k",), 8, None),
}
TOOLS = ("proctor", "lm_eval_hf", "lm_eval_proctorlm")


def model_dir() -> Path:
    """Return SmolLM2-135M's plain transformers directory (converting the embedded GGUF on first use)."""
    from proctor.backends.models import model_directory
    from proctor.backends.sources import resolve_source

    return model_directory(resolve_source("smollm2-135m"))[0]


def command(tool: str, model: Path, tasks: tuple[str, ...], limit: int, shots: Optional[int],
            out: Path) -> list[str]:
    """Return the command line one tool runs a workload with."""
    if tool == "proctor":
        cmd = ["proctor", "run", "--model", str(model), "--tasks", *(f"lm_eval:{t}" for t in tasks),
               "--limit", str(limit), "--data-dir", str(DATA_DIR), "--output", str(out), "--no-progress"]
        return cmd + (["--num-fewshot", str(shots)] if shots is not None else [])
    lm_model = (["--model", "hf", "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu"]
                if tool == "lm_eval_hf" else ["--model", "proctor", "--model_args", f"model={model}"])
    batch = ["--batch_size", "8"] if tool == "lm_eval_hf" else []  # ProctorLM: the engine's own batches
    cmd = ["proctor", "lm-eval", "--data-dir", str(DATA_DIR), "run", *lm_model, "--tasks", ",".join(tasks),
           "--limit", str(limit), *batch, "--output_path", str(out)]
    return cmd + (["--num_fewshot", str(shots)] if shots is not None else [])


def warm_index(root: Path) -> Path:
    """Build lm-eval's task index once into a cache directory of its own; return that directory."""
    subprocess.run([sys.executable, "-c", "from proctor.harness.specs import task_manager; task_manager()"],
                   env={**os.environ, "PROCTOR_CACHE_DIR": str(root)}, check=True)
    return root / "lm_eval"


def run_one(tool: str, workload: str, model: Path, threads: int, index: Optional[Path]) -> dict[str, Any]:
    """Run one tool on one workload in a fresh process with a fresh result cache; return its wall time and scores."""
    tasks, limit, shots = WORKLOADS[workload]
    with tempfile.TemporaryDirectory(prefix=f"bench-{tool}-") as tmp:
        out = Path(tmp) / "out"
        if index is not None:
            shutil.copytree(index, Path(tmp) / "cache" / "lm_eval")
        env = {**os.environ, "PROCTOR_CACHE_DIR": str(Path(tmp) / "cache"), "OMP_NUM_THREADS": str(threads),
               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(Path(tmp) / "hf"),
               "TOKENIZERS_PARALLELISM": "false"}
        cmd = command(tool, model, tasks, limit, shots, out)
        started = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            return {"tool": tool, "workload": workload, "failed": done.stderr.strip().splitlines()[-3:],
                    "seconds": seconds}
        return {"tool": tool, "workload": workload, "seconds": round(seconds, 1), "scores": scores(tool, out), "command": " ".join(cmd)}


def scores(tool: str, out: Path) -> dict[str, float]:
    """Return each task's scores by lm-eval's metric key (`acc,none`, `exact_match,strict-match`)."""
    if tool == "proctor":
        metrics = json.loads((out / "metrics.json").read_text())
        found = {}
        for name, task in metrics["tasks"].items():
            for key, summary in task["metrics"].items():
                found[f"{name.removeprefix('lm_eval:')}/{key if ',' in key else key + ',none'}"] = summary["mean"]
        return found
    (results,) = out.rglob("results_*.json")
    found = {}
    for name, values in json.loads(results.read_text())["results"].items():
        for key, value in values.items():
            if "," in key and "stderr" not in key and isinstance(value, (int, float)):
                found[f"{name}/{key}"] = value
    return found


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: mmlu,hellaswag,gsm8k")
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ",".join(TOOLS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cold-index", action="store_true", help="no cached lm-eval task index")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    model = model_dir()
    warm = tempfile.TemporaryDirectory(prefix="bench-index-")
    index = None if args.cold_index else warm_index(Path(warm.name))
    rows = []
    for workload in args.workloads.split(","):
        for tool in args.tools.split(","):
            row = run_one(tool, workload, model, args.threads, index)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "scores"}), file=sys.stderr, flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1) + "\n")
    failed = report(rows)
    return 1 if failed else 0


def report(rows: list[dict[str, Any]]) -> bool:
    """Print the table (seconds and speedup over lm-eval's HF per workload); return whether any run failed or disagreed."""
    bad = False
    print("| workload | tool | whole process (s) | vs lm_eval --model hf | scores agree |")
    print("|---|---|---|---|---|")
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = {r["tool"]: r for r in rows if r["workload"] == workload}
        reference = mine.get("lm_eval_hf")
        for tool, row in mine.items():
            if "failed" in row:
                bad = True
                print(f"| {workload} | {tool} | FAILED: {' / '.join(row['failed'])} | | |")
                continue
            speedup = (f"{reference['seconds'] / row['seconds']:.1f}x" if reference and "failed" not in reference
                       else "")
            agree = ""
            if reference and "failed" not in reference:
                theirs, ours = reference["scores"], row["scores"]
                shared = set(theirs) & set(ours)
                agree = all(abs(theirs[k] - ours[k]) < 1e-9 for k in shared) and bool(shared)
                bad |= not agree
                agree = f"{'yes' if agree else 'NO'} ({len(shared)} metrics)"
            print(f"| {workload} | {tool} | {row['seconds']:.1f} | {speedup} | {agree} |")
    return bad


if __name__ == "__main__":
    sys.exit(main())
