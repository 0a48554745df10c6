"""Evaluation to data attribution on this machine: proctor run -> export -> Bergson -> join.

    python benchmarks/attribution_e2e.py --work DIR [--limit 1] [--docs 200] [--doc-tokens 128]

1. `proctor run --tasks data_attribution::olmo3 --limit L --save-requests` (SmolLM2-135M),
2. `proctor export bergson RUN --target gold`,
3. `bergson build` a gradient index of the exported queries (projection_dim 16, fp32, CPU),
4. `bergson score` the first D documents of ../shared/data/c4 (cut to T tokens) against it,
   by cosine similarity of the gradients (`--unit_normalize`: raw dot products let a few
   documents with large gradients top every query),
5. `proctor attribution join`, then print each stage's seconds and, for a few queries, the
   sidecar's facts and the three training documents Bergson ranks highest.
Every step reuses what DIR already holds, so a rerun only prints.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

C4 = "c4/yxanul_validation/c4_validation_2k.parquet"


def step(name: str, command: list[str], done: Path, seconds: dict[str, float]) -> None:
    if done.exists():
        print(f"{name}: {done} exists, reused")
        return
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds[name] = time.perf_counter() - started
    print(f"{name}: {seconds[name]:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--doc-tokens", type=int, default=128)
    parser.add_argument("--show", type=int, default=4, help="queries to print the top documents of")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    data = Path(os.environ.get("PROCTOR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    run, export, index, scores = work / "run", work / "export", work / "index", work / "scores"
    train = work / "train"
    seconds: dict[str, float] = {}
    proctor = [sys.executable, "-m", "proctor"]
    bergson = [sys.executable, "-m", "bergson"]

    step("proctor run", [*proctor, "run", "--tasks", "data_attribution::olmo3", "--limit", str(args.limit),
                         "--save-requests", "--no-progress", "--output", str(run)], run / "metrics.json", seconds)
    step("proctor export", [*proctor, "export", "bergson", str(run), "--output", str(export), "--target", "gold"],
         export / "export.json", seconds)
    from proctor.export.bergson import read_manifest

    manifest = read_manifest(export)
    if not train.exists():
        import pyarrow.parquet as pq
        from datasets import Dataset

        texts = pq.read_table(data / C4, columns=["text"]).slice(0, args.docs).column("text").to_pylist()
        Dataset.from_dict({"text": texts}).save_to_disk(str(train))
    common = ["--model", str(manifest.bergson_model), "--projection_dim", "16", "--nproc_per_node", "1",
              "--overwrite"]
    step("bergson build", [*bergson, "build", str(index), "--dataset", str(export), "--precision", "fp32",
                           "--token_batch_size", "2048", *common], index / "info.json", seconds)
    step("bergson score", [*bergson, "score", str(scores), "--dataset", str(train), "--query_path", str(index),
                           "--score", "individual", "--unit_normalize", "--truncation", "--token_batch_size", str(args.doc_tokens),
                           "--index_cfg.precision", "fp32", "--score_cfg.precision", "fp32", *common],
         scores / "scores.bin", seconds)
    joined = work / "attribution.parquet"
    step("proctor attribution join", [*proctor, "attribution", "join", str(export), str(scores), "--output",
                                      str(joined)], joined, seconds)

    import pyarrow.parquet as pq
    from datasets import load_from_disk

    table = pq.read_table(joined).to_pandas()
    sidecar = pq.read_table(run / "query_metadata.parquet").to_pandas()
    texts = load_from_disk(str(train))["text"]
    print(f"\n{manifest.rows} query rows x {len(texts)} documents = {len(table)} scores; "
          f"seconds: {', '.join(f'{k} {v:.0f}' for k, v in seconds.items()) or 'all reused'}")
    merged = table.merge(sidecar, on="query_id")
    # one query of each benchmark (socialiqa, mmlu_social_science, mmlu_stem, gsm8k), in run order
    picks = merged.drop_duplicates("benchmark")["query_id"].tolist()[: args.show]
    for query_id in picks:
        top = merged[(merged["query_id"] == query_id) & (merged["rank"] <= 3)].sort_values("rank")
        first = top.iloc[0]
        kind = next((first[c] for c in ("subject", "reasoning_type") if isinstance(first[c], str)), "-")
        print(f"\n{query_id} ({first['benchmark']}, {kind}; correct={first['is_correct']}, "
              f"gold {first['correct_answer']!r})")
        for _, row in top.iterrows():
            snippet = " ".join(texts[int(row["train_index"])].split())[:90]
            print(f"  {int(row['rank'])}. doc {int(row['train_index']):>3}  score {row['score']:+.3g}  {snippet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
