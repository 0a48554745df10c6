"""In-loop `c4_en` BPB throughput against the model's raw forward throughput.

    python benchmarks/bench_inloop_c4.py --docs 2000 --ctx 2048 --batch-size 4

Three loops over the same documents, on the same model (SmolLM2-135M, float32, CPU):

- raw:     the model's forward pass alone over the in-loop task's own batches (collated
           beforehand, nothing else timed) — the ceiling;
- in-loop: the seed's loop as a training job runs it: DataLoader + collate_fn + forward +
           C4Metric.update, then C4Metric.compute;
- plain:   a plain transformers loop, one document at a time, chunks of `ctx` tokens,
           `model(input_ids, labels=input_ids)` (the usual perplexity recipe), on
           `--plain-docs` documents.

ai2-olmo-eval (PyPI, 0.9.0, the latest) has no C4/Paloma/BABILong/Phonebook task (its 252
tasks are multiple-choice/ICL ones), so it cannot be the comparison here (see README,
"In-loop evaluation").
Prints scored tokens/s of each loop, in-loop/raw, and the BPB each loop measured.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000, help="C4 documents (the local set has 2,000)")
    parser.add_argument("--ctx", type=int, default=2048, help="model_ctx_len")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--plain-docs", type=int, default=200, help="documents for the plain loop")
    parser.add_argument("--repeats", type=int, default=1, help="alternating raw/in-loop passes")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from torch.utils.data import DataLoader

    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source
    from proctor.inloop import C4English, C4Metric

    torch.set_num_threads(args.threads)
    # a plain transformers model (SDPA attention), as a training loop holds it
    loaded = load_model(resolve_source(args.model), dtype=torch.float32, device=torch.device("cpu"))
    model, tokenizer = loaded.model.eval(), loaded.tokenizer

    started = time.perf_counter()
    task = C4English(tokenizer, num_samples=args.docs, model_ctx_len=args.ctx, data_dir=args.data_dir)
    prepare = time.perf_counter() - started
    batches = list(DataLoader(task, batch_size=args.batch_size, collate_fn=task.collate_fn))
    scored = sum(int((b["labels"] != -100).sum()) for b in batches)
    padded = sum(b["input_ids"].numel() for b in batches)
    print(f"{args.docs} docs -> {len(task)} chunks, {scored} scored tokens "
          f"({scored / padded:.1%} of {padded} batch positions); prepared in {prepare:.1f} s")

    def raw() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            for b in batches:
                model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        return time.perf_counter() - start

    def inloop() -> tuple[float, dict]:
        start = time.perf_counter()
        loader = DataLoader(task, batch_size=args.batch_size, collate_fn=task.collate_fn)
        metric = C4Metric()
        with torch.no_grad():
            for batch in loader:
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                metric.update(batch, logits)
        result = metric.compute()
        return time.perf_counter() - start, result

    raw_times, inloop_times = [], []
    for _ in range(args.repeats):
        raw_times.append(raw())
        seconds, result = inloop()
        inloop_times.append(seconds)
    raw_s, inloop_s = min(raw_times), min(inloop_times)
    print(f"raw forward   {raw_s:8.1f} s  {scored / raw_s:8.0f} tokens/s")
    print(f"in-loop c4_en {inloop_s:8.1f} s  {scored / inloop_s:8.0f} tokens/s  "
          f"= {raw_s / inloop_s:.1%} of raw  bpb {result['bpb']:.4f}  ce {result['ce_loss']:.4f}")

    if args.plain_docs:
        texts = _texts(args.data_dir, args.plain_docs)
        nll = tokens = nbytes = 0.0
        start = time.perf_counter()
        with torch.no_grad():
            for text in texts:
                ids = tokenizer(text, return_tensors="pt").input_ids
                for begin in range(0, ids.shape[1], args.ctx):
                    chunk = ids[:, begin : begin + args.ctx]
                    if chunk.shape[1] < 2:
                        continue
                    loss = model(input_ids=chunk, labels=chunk).loss
                    nll += float(loss) * (chunk.shape[1] - 1)
                    tokens += chunk.shape[1] - 1
                nbytes += len(text.encode("utf-8"))
        plain_s = time.perf_counter() - start
        print(f"plain loop    {plain_s:8.1f} s  {tokens / plain_s:8.0f} tokens/s  ({len(texts)} docs, "
              f"bpb {nll / math.log(2) / nbytes:.4f}: no BOS, first token of each chunk unscored)")


def _texts(data_dir: Path, n: int) -> list[str]:
    from proctor.data.corpora import c4_documents

    return [d.text for d in c4_documents(data_dir, n) if d.text]


if __name__ == "__main__":
    main()
