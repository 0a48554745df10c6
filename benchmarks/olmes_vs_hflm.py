"""proctor's OLMES-v0.1 specs against lm-eval's HFLM on the very same request strings, request by request.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 python benchmarks/olmes_vs_hflm.py --data-dir ../shared/data \
        --limit 100 --json /tmp/olmes_vs_hflm.json

For each spec (the ten OLMES-v0.1 tasks, MC and RC: `<task>:<fmt>::olmes`; OpenBookQA's validation
form `:olmes:val`, its test split not being at hand offline; MMLU's largest subject,
`mmlu_miscellaneous`), the first --limit documents:

- proctor: `proctor.evaluate` on SmolLM2-135M (float32, CPU, no result cache); each document's
  record holds every continuation's summed log-likelihood (`model_output[i].sum_logits`).
- lm-eval: its `HFLM` on the same model object (batch size 8, max_length 2048) scores the
  same (context, continuation) strings, as `proctor prompts` builds them
  (`HFLM.loglikelihood`); unconditioned requests are left out.
- compared: max |Δ loglikelihood| over every request, and per document whether the argmax over
  its continuations agrees (raw, and per character: OLMES's acc_raw and acc_per_char).

Prints a markdown table; --json writes the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

TASKS = ("arc_easy", "arc_challenge", "boolq", "csqa", "hellaswag", "openbookqa", "piqa", "socialiqa", "winogrande",
         "mmlu_miscellaneous")


def specs() -> list[str]:
    """The twenty specs compared."""
    out = []
    for task in TASKS:
        for fmt in ("mc", "rc"):
            out.append(f"{task}:{fmt}::olmes:val" if task == "openbookqa" else f"{task}:{fmt}::olmes")
    return out


@dataclass
class Row:
    spec: str
    documents: int
    requests: int
    max_abs_delta: float
    raw_agree: int
    per_char_agree: int
    proctor_s: float
    lm_eval_s: float


def argmax(values: list[float]) -> int:
    """Index of the largest value, the lowest on a tie."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def compare(spec: str, backend: Any, lm: Any, data_dir: Path, limit: int) -> Row:
    """Score the spec's first `limit` documents both ways and compare."""
    import proctor
    from lm_eval.api.instance import Instance as HarnessInstance
    from proctor.pipeline import PromptOptions, plan

    (run,) = plan([spec], data_dir, limit, PromptOptions()).tasks.values()
    started = time.perf_counter()
    record = proctor.evaluate(backend, tasks=[spec], limit=limit, data_dir=str(data_dir), cache=False, progress=False)
    proctor_s = time.perf_counter() - started
    (task,) = record.tasks.values()
    ours = {r.doc_id: [c.sum_logits for c in r.model_output] for r in task.records}
    pairs = [(inst.doc_id, i, request.context, request.continuation)
             for inst in run.instances for i, request in enumerate(inst.requests)]
    started = time.perf_counter()
    results = lm.loglikelihood([HarnessInstance("loglikelihood", {}, (context, continuation), i)
                                for i, (_, _, context, continuation) in enumerate(pairs)], disable_tqdm=True)
    lm_eval_s = time.perf_counter() - started
    theirs: dict[int, list[float]] = {}
    for (doc_id, _, _, _), (ll, _) in zip(pairs, results):
        theirs.setdefault(doc_id, []).append(ll)
    delta = max(abs(a - b) for d in ours for a, b in zip(ours[d], theirs[d]))
    chars = {inst.doc_id: [len(c) for c in inst.continuations] for inst in run.instances}

    def per_char(lls: list[float], n: list[int]) -> int:
        return argmax([ll / max(c, 1) for ll, c in zip(lls, n)])

    return Row(spec=spec, documents=len(ours), requests=len(pairs), max_abs_delta=delta,
               raw_agree=sum(argmax(ours[d]) == argmax(theirs[d]) for d in ours),
               per_char_agree=sum(per_char(ours[d], chars[d]) == per_char(theirs[d], chars[d]) for d in ours),
               proctor_s=proctor_s, lm_eval_s=lm_eval_s)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=100, help="documents per spec (default 100)")
    parser.add_argument("--only", help="a comma-separated subset of the specs")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)

    from lm_eval.models.huggingface import HFLM
    from proctor.backends import load_backend

    backend = load_backend("smollm2-135m", device="cpu", dtype="float32", max_length=2048)
    lm = HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=8, max_length=2048)
    wanted = args.only.split(",") if args.only else specs()
    rows = []
    for spec in wanted:
        rows.append(compare(spec, backend, lm, args.data_dir, args.limit))
        r = rows[-1]
        print(f"{spec}: {r.requests} requests, max |Δ| {r.max_abs_delta:.2e}, argmax agrees {r.raw_agree}/{r.documents} "
              f"(per char {r.per_char_agree}/{r.documents}); proctor {r.proctor_s:.1f} s, lm-eval {r.lm_eval_s:.1f} s",
              file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps([asdict(x) for x in rows], indent=1))
    print("| spec | docs | requests | max abs Δ loglikelihood | argmax agrees (raw / per char) | proctor s | lm-eval s |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| `{r.spec}` | {r.documents} | {r.requests} | {r.max_abs_delta:.2e} | {r.raw_agree} / {r.per_char_agree} "
              f"| {r.proctor_s:.1f} | {r.lm_eval_s:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
