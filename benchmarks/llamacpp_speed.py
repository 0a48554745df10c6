"""llama.cpp backend speed on one build of llama-cpp-python: MMLU scoring and GSM8K greedy.

    python benchmarks/llamacpp_speed.py                          # the installed build
    PYTHONPATH=/tmp/other-build python benchmarks/llamacpp_speed.py --json other.json

Compares builds of llama-cpp-python (e.g. `GGML_NATIVE=ON` against the portable
`GGML_NATIVE=OFF` that scripts/install makes): install a build into a directory with
`pip install --no-deps --target DIR llama_cpp_python-*.whl` and put DIR first on PYTHONPATH.

Each workload is one `proctor run --backend llamacpp --model smollm2-135m` (the embedded
SmolLM2-135M-Instruct Q4_1 GGUF) in a child process, with no result cache and no progress
bar, on `--threads` threads:

- `mmlu`: `mmlu_astronomy:mc::olmes`, the first `--mmlu-items` questions (5-shot, each answer
  letter scored: loglikelihood requests);
- `gsm8k`: `gsm8k::olmes`, the first `--gsm8k-items` questions (8-shot, greedy, up to 512 new tokens).

Reported: the run's wall seconds (model load included), and metrics.json's engine figures:
tokens per second computed (scoring) and generated tokens per second (generation).
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

DATA = Path(os.environ.get("PROCTOR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
WORKLOADS = {"mmlu": "mmlu_astronomy:mc::olmes", "gsm8k": "gsm8k::olmes"}


def build_flags() -> str:
    """Return llama.cpp's system info line for the build this interpreter imports (its CPU features)."""
    code = "import llama_cpp; print(llama_cpp.__file__); print(llama_cpp.llama_print_system_info().decode())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return " | ".join(line.strip() for line in out.splitlines() if line.strip())


def run(spec: str, limit: int, threads: int, work: Path) -> dict:
    """Run one workload in a child `proctor run` and return its figures."""
    output = work / spec.replace(":", "_")
    command = [sys.executable, "-m", "proctor", "run", "--backend", "llamacpp", "--model", "smollm2-135m",
               "--tasks", spec, "--limit", str(limit), "--data-dir", str(DATA), "--threads", str(threads),
               "--output", str(output), "--no-cache", "--no-progress"]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    metrics = json.loads((output / "metrics.json").read_text())
    engine = metrics["engine"]
    return {"spec": spec, "items": limit, "wall_s": round(wall, 1),
            "tokens_per_second": engine["tokens_per_second"],
            "generated_tokens_per_second": engine["generated_tokens_per_second"],
            "primary_score": metrics["tasks"][spec]["primary_score"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mmlu-items", type=int, default=100)
    parser.add_argument("--gsm8k-items", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print(f"build: {build_flags()}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, items in (("mmlu", args.mmlu_items), ("gsm8k", args.gsm8k_items)):
            row = run(WORKLOADS[name], items, args.threads, Path(work))
            rows.append(row)
            print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps({"build": build_flags(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
