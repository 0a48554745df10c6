"""The factual probe's generations on three backends, and how far they agree.

Builds a ~300-query bank of all five families from the real sources (`--data-dir`), then
runs `proctor factual generate` on it with `--backend hf` (float32), `--backend llamacpp`,
`--backend vllm` (float32, where vLLM is installed) and `--backend openai` against llama-cpp-python's own server on the same GGUF (as the
backend tests do), validates each file, and prints each backend's time and how many
`raw_response`s equal the HF ones. With `--reference FILE` (a generations file made
earlier, e.g. by an older proctor) it also says whether the HF rows equal its rows.

    python benchmarks/factual_backends.py --data-dir ../shared/data --work /tmp/factual-backends
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from proctor.backends.sources import resolve_source
from proctor.factual.bank import build_bank, write_bank

# llama.cpp's sampler defaults (repeat penalty 1.1, top-k 40, min-p 0.05) off: plain greedy
PLAIN = '{"repeat_penalty": 1.0, "top_k": 0, "min_p": 0.0}'


def small_bank(data_dir: Path, path: Path, size: int) -> None:
    """Whole facts, taken in turn from each family's facts, until `size` queries."""
    rows = build_bank(data_dir, facts_per_relation=2, languages=("fr", "zh", "ar")).rows
    by_family: dict[str, list[str]] = {}
    fact_rows: dict[str, int] = {}
    for row in rows:
        by_family.setdefault(row["condition_family"], []).append(row["fact_id"])
        fact_rows[row["fact_id"]] = fact_rows.get(row["fact_id"], 0) + 1
    turns = itertools.zip_longest(*[list(dict.fromkeys(facts)) for facts in by_family.values()])
    keep: set[str] = set()
    n = 0
    for fact in dict.fromkeys(f for turn in turns for f in turn if f):
        if n + fact_rows[fact] <= size:
            keep.add(fact)
            n += fact_rows[fact]
    write_bank(path, [row for row in rows if row["fact_id"] in keep], {})


def generate(work: Path, bank: Path, name: str, *options: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "proctor", "factual", "generate", "--bank", str(bank), "--output-dir",
                    str(work), "--name", name, "--no-progress", *options], check=True)
    subprocess.run([sys.executable, "-m", "proctor", "factual", "validate", "--bank", str(bank), "--generations",
                    str(work / "generations" / f"{name}.jsonl")], check=True)
    return time.perf_counter() - started


def serve(gguf: str, port: int, log: Path) -> subprocess.Popen:
    import httpx

    process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--model_alias",
                                "smollm2-135m", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                                "--n_threads", str(os.cpu_count() or 1), "--seed", "0"],
                               stdout=log.open("wb"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1.0).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"llama_cpp.server did not come up; see {log}")


def responses(work: Path, name: str) -> list[str]:
    lines = (work / "generations" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["raw_response"] for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("PROCTOR_DATA_DIR", "../shared/data")))
    parser.add_argument("--work", type=Path, required=True, help="a fresh directory for the bank and the files")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--reference", type=Path, help="an earlier HF generations file of the same bank")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=False)
    bank = args.work / "bank.jsonl"
    small_bank(args.data_dir, bank, args.queries)
    seconds = {"hf": generate(args.work, bank, "hf", "--dtype", "float32"),
               "llamacpp": generate(args.work, bank, "llamacpp", "--backend", "llamacpp")}
    if importlib.util.find_spec("vllm") is not None:
        seconds["vllm"] = generate(args.work, bank, "vllm", "--backend", "vllm", "--dtype", "float32")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = serve(resolve_source("smollm2-135m").location, port, args.work / "server.log")
    try:
        seconds["openai"] = generate(args.work, bank, "openai", "--backend", "openai", "--base-url",
                                     f"http://127.0.0.1:{port}/v1", "--tokenizer", "smollm2-135m",
                                     "--openai-extra", PLAIN)
    finally:
        server.terminate()
        server.wait()
    hf = responses(args.work, "hf")
    for name, took in seconds.items():
        same = sum(a == b for a, b in zip(hf, responses(args.work, name)))
        print(f"{name:9s} {took:6.0f} s (with model load)  raw_response equal to hf: {same} / {len(hf)}")
    print(f"llamacpp = openai: {sum(a == b for a, b in zip(responses(args.work, 'llamacpp'), responses(args.work, 'openai')))}")
    if args.reference is not None:  # every field but the model's name
        def rows(path: Path) -> list[dict]:
            return [{**json.loads(line), "model": ""} for line in path.read_text(encoding="utf-8").splitlines()]
        same = rows(args.reference) == rows(args.work / "generations" / "hf.jsonl")
        print(f"hf rows equal to {args.reference}'s: {same}")


if __name__ == "__main__":
    main()
