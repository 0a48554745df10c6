"""Per-document parity of the bridge (`lm_eval:<task>`) with lm-eval's own run, family by family.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=2 \
        python benchmarks/harness_parity.py --json /tmp/parity.json          # every family
    python benchmarks/harness_parity.py --families arc_easy,mmlu --limit 40  # a subset, more documents
    HF_ALLOW_CODE_EVAL=1 python benchmarks/harness_parity.py --families humaneval \
        --allow-code-eval --code-eval-dir DIR                                # HumanEval (runs generated code)

For each family, lm-eval's `simple_evaluate` with its HFLM (batch_size 8, max_length 2048) and
`proctor.evaluate` on the bridge score the same documents with the same SmolLM2-135M model
object (`proctor.backends.load_backend("smollm2-135m")`, float32, CPU), rows from --data-dir
(`proctor.harness.offline.local_datasets` for lm-eval, the bridge's own `data_dir`), lm-eval
first. Compared per document, under every filter:

- metrics: a document agrees when every (metric, filter) value equals lm-eval's; "exact" counts
  bit-equal values, "agree" allows |Δ| <= 1e-4 for floats (TruthfulQA MC2's probability mass,
  BLEU, ... are computed from log-likelihoods that differ in the last digits);
- filtered responses: equal (log-likelihoods within 1e-4, is_greedy equal);
- raw responses: max |Δ loglikelihood| over all requests; for generations, the share of
  identical generated texts;
- the task's aggregated metrics: max |Δ| against lm-eval's results.

Loglikelihood families run first; the JSON (--json) is rewritten after each family. HumanEval
scores by running the generated programs with the HF `evaluate` library's code_eval metric, so it
runs only with --allow-code-eval (sets HF_ALLOW_CODE_EVAL=1, lm-eval's confirm_run_unsafe_code=True
and the bridge's allow_unsafe_exec=True); offline, lm-eval's humaneval/utils.py can load code_eval only from
a directory `code_eval/` under the working directory (`--code-eval-dir` names the directory
holding it, a copy of metrics/code_eval of github.com/huggingface/evaluate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

TOLERANCE = 1e-4


@dataclass(frozen=True)
class Family:
    """lm-eval tasks scored together: their names, num_fewshot (None: each task's own) and documents each."""

    tasks: tuple[str, ...]
    shots: Optional[int] = None
    limit: int = 20
    note: str = ""


#: loglikelihood families first (generation is the slow part), so partial results exist early
FAMILIES: dict[str, Family] = {
    "arc_easy": Family(("arc_easy",)),
    "arc_challenge": Family(("arc_challenge",)),
    "hellaswag": Family(("hellaswag",), note="0-shot: the data dir lacks HellaSwag's train split"),
    "mmlu": Family(("mmlu_abstract_algebra", "mmlu_college_biology", "mmlu_high_school_geography",
                    "mmlu_world_religions"), shots=5, limit=5, note="4 subjects x 5 documents, 5-shot"),
    "truthfulqa_mc1": Family(("truthfulqa_mc1",)),
    "truthfulqa_mc2": Family(("truthfulqa_mc2",)),
    "leaderboard_bbh": Family(("leaderboard_bbh_boolean_expressions",)),
    "bigbench": Family(("bigbench_strategyqa_multiple_choice",)),
    "social_iqa": Family(("social_iqa",)),
    "gsm8k": Family(("gsm8k",), note="5-shot, greedy"),
    "bbh_cot": Family(("bbh_cot_fewshot_boolean_expressions",)),
    "gsm8k_cot": Family(("gsm8k_cot",), limit=10, note="8-shot CoT, 10 documents (20: over 10 minutes)"),
    "humaneval": Family(("humaneval",), limit=10, note="10 documents (up to 1024 new tokens each)"),
    "truthfulqa_gen": Family(("truthfulqa_gen",)),
}


@dataclass
class Parity:
    """One family's comparison."""

    family: str
    specs: list[str]
    shots: str
    documents: int = 0
    requests: int = 0
    metrics_agree: int = 0               # documents whose every metric agrees (floats within TOLERANCE)
    metrics_exact: int = 0               # documents whose every metric is bit-equal
    filtered_agree: int = 0              # documents whose every filtered response agrees
    max_abs_delta_loglik: Optional[float] = None
    texts_same: int = 0
    texts: int = 0
    max_abs_delta_task_metric: Optional[float] = None
    bridge_seconds: float = 0.0
    lm_eval_seconds: float = 0.0
    status: str = "ok"                   # ok | skipped | error
    note: str = ""
    differences: list[str] = field(default_factory=list)  # the first few, to investigate


# ---- the two runs ------------------------------------------------------------------------


@contextmanager
def working_directory(path: Optional[Path]) -> Iterator[None]:
    """Run within `path` (None: where we are)."""
    before = Path.cwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def lm_eval_run(backend: Any, family: Family, limit: int, data_dir: Path,
                unsafe: bool) -> tuple[dict[str, list[dict]], dict[str, dict], float]:
    """Return lm-eval's own per-document samples and results of the family's tasks, and its seconds."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    from proctor.harness.offline import local_datasets
    from proctor.harness.specs import task_manager

    started = time.perf_counter()
    lm = HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=8, max_length=2048)
    with local_datasets(data_dir):
        out = lm_eval.simple_evaluate(model=lm, tasks=list(family.tasks), limit=limit, num_fewshot=family.shots,
                                      log_samples=True, bootstrap_iters=0, task_manager=task_manager(),
                                      confirm_run_unsafe_code=unsafe)
    return out["samples"], out["results"], time.perf_counter() - started


def bridge_run(backend: Any, family: Family, limit: int, data_dir: Path, unsafe: bool) -> tuple[Any, float]:
    """Return the bridge's run record of the family's tasks (no result cache) and its seconds."""
    import proctor

    started = time.perf_counter()
    record = proctor.evaluate(backend, tasks=[f"lm_eval:{t}" for t in family.tasks], limit=limit,
                              num_fewshot=family.shots, data_dir=data_dir, cache=False, allow_unsafe_exec=unsafe)
    return record, time.perf_counter() - started


# ---- the comparison ----------------------------------------------------------------------


def agrees(ours: Any, theirs: Any, tolerance: float = TOLERANCE) -> bool:
    """Whether two JSON-like values agree: numbers within `tolerance`, everything else equal."""
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return ours == theirs
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return ours == theirs or (math.isnan(ours) and math.isnan(theirs)) or abs(ours - theirs) <= tolerance
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(agrees(a, b, tolerance) for a, b in zip(ours, theirs))
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(agrees(ours[k], theirs[k], tolerance) for k in ours)
    return ours == theirs


def compare_task(row: Parity, task: str, record: Any, samples: list[dict], results: dict) -> None:
    """Add one task's per-document comparison to the family's row."""
    from proctor.harness.library import metric_key
    from proctor.harness.task import as_json

    by_filter: dict[str, dict[int, dict]] = {}
    for sample in samples:
        by_filter.setdefault(sample["filter"], {})[sample["doc_id"]] = sample
    first = next(iter(by_filter.values()))
    for doc in record.records:
        exact = agree = filtered = True
        for filter_key, theirs in by_filter.items():
            ref = theirs[doc.doc_id]
            for metric in ref["metrics"]:
                key = metric_key(metric, filter_key)
                mine, expected = doc.metrics.get(key), as_json(ref[metric])
                exact &= mine == expected
                if not agrees(mine, expected):
                    agree = False
                    row.differences.append(f"{doc.query_id} {key}: bridge {mine!r} lm-eval {expected!r}")
            expected = as_json(ref["filtered_resps"])
            if not agrees(doc.filtered.get(filter_key), expected):
                filtered = False
                row.differences.append(f"{doc.query_id} filtered[{filter_key}]: bridge "
                                       f"{str(doc.filtered.get(filter_key))[:200]} lm-eval {str(expected)[:200]}")
        row.documents += 1
        row.metrics_exact += exact
        row.metrics_agree += agree
        row.filtered_agree += filtered
        for output, response in zip(doc.model_output, first[doc.doc_id]["resps"]):
            row.requests += 1
            if "sum_logits" in output:
                delta = abs(output["sum_logits"] - response[0][0])
                row.max_abs_delta_loglik = max(row.max_abs_delta_loglik or 0.0, delta)
            else:
                texts = [s["text"] for s in output["samples"]]
                row.texts += len(response)
                same = sum(a == b for a, b in zip(texts, response))
                row.texts_same += same
                if same < len(response):
                    row.differences.append(f"{doc.query_id} text: bridge {texts[0][:160]!r} lm-eval "
                                           f"{response[0][:160]!r}")
    for key, summary in record.metrics.items():
        name = key if "," in key else f"{key},none"
        theirs_value = results.get(name)
        if isinstance(theirs_value, (int, float)) and isinstance(summary.mean, (int, float)):
            delta = abs(summary.mean - theirs_value)
            row.max_abs_delta_task_metric = max(row.max_abs_delta_task_metric or 0.0, delta)


def compare(backend: Any, name: str, family: Family, limit: Optional[int], data_dir: Path, allow_code_eval: bool,
            code_eval_dir: Optional[Path]) -> Parity:
    """Score one family both ways and compare document by document."""
    from proctor.harness.offline import first_line

    n = limit or family.limit
    row = Parity(name, [f"lm_eval:{t}" for t in family.tasks],
                 "task's own" if family.shots is None else str(family.shots), note=family.note)
    unsafe = "humaneval" in name
    if unsafe and not allow_code_eval:
        row.status, row.note = "skipped", "runs generated code: pass --allow-code-eval (and --code-eval-dir offline)"
        return row
    if unsafe:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    try:
        with working_directory(code_eval_dir if unsafe else None):
            samples, results, row.lm_eval_seconds = lm_eval_run(backend, family, n, data_dir, unsafe)
            record, row.bridge_seconds = bridge_run(backend, family, n, data_dir, unsafe)
    except Exception as e:  # a family that cannot run offline (no local data, a metric's package): recorded
        row.status, row.note = "error", f"{type(e).__name__}: {first_line(e)}"
    row.lm_eval_seconds, row.bridge_seconds = round(row.lm_eval_seconds, 1), round(row.bridge_seconds, 1)
    if row.status == "error":
        return row
    for task in family.tasks:
        compare_task(row, task, record.tasks[f"lm_eval:{task}"], samples[task], results[task])
    row.differences = row.differences[:20]
    return row


# ---- the report ----------------------------------------------------------------------------


def table(rows: list[Parity]) -> list[str]:
    """Markdown: one line per family."""
    lines = ["| family | spec | shots | docs | requests | max \\|Δ loglik\\| | metrics agreement (exact) "
             "| filtered agreement | text agreement | max \\|Δ task metric\\| | bridge s | lm-eval s | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        specs = ", ".join(r.specs) if len(r.specs) < 3 else f"{r.specs[0]} +{len(r.specs) - 1}"
        if r.status != "ok":
            lines.append(f"| {r.family} | {specs} | {r.shots} | | | | | | | | | | {r.status}: {r.note} |")
            continue
        delta = "" if r.max_abs_delta_loglik is None else f"{r.max_abs_delta_loglik:.1e}"
        task_delta = "" if r.max_abs_delta_task_metric is None else f"{r.max_abs_delta_task_metric:.1e}"
        texts = f"{r.texts_same}/{r.texts}" if r.texts else ""
        lines.append(f"| {r.family} | {specs} | {r.shots} | {r.documents} | {r.requests} | {delta} "
                     f"| {r.metrics_agree}/{r.documents} ({r.metrics_exact}) | {r.filtered_agree}/{r.documents} "
                     f"| {texts} | {task_delta} | {r.bridge_seconds} | {r.lm_eval_seconds} | {r.note} |")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated: " + ",".join(FAMILIES))
    parser.add_argument("--limit", type=int, help="documents per task (default: each family's, mostly 20)")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--json", type=Path, help="also write the rows here (after each family)")
    parser.add_argument("--allow-code-eval", action="store_true",
                        help="run HumanEval: executes the generated programs (HF evaluate's code_eval)")
    parser.add_argument("--code-eval-dir", type=Path,
                        help="a directory holding code_eval/code_eval.py (HF evaluate's metric), for offline runs")
    args = parser.parse_args(argv)
    names = args.families.split(",")
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; have {', '.join(FAMILIES)}")
    json_path = args.json.resolve() if args.json else None
    data_dir = args.data_dir.resolve()
    code_eval_dir = args.code_eval_dir.resolve() if args.code_eval_dir else None

    from proctor.backends import load_backend

    started = time.perf_counter()
    backend = load_backend("smollm2-135m", device="cpu", dtype="float32", max_length=2048)
    print(f"model loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    rows: list[Parity] = []
    for name in names:
        row = compare(backend, name, FAMILIES[name], args.limit, data_dir, args.allow_code_eval, code_eval_dir)
        rows.append(row)
        print(json.dumps(asdict(row)), file=sys.stderr, flush=True)
        if json_path:
            json_path.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    print(f"## Bridge vs lm-eval's own run, SmolLM2-135M float32 CPU ({time.perf_counter() - started:.0f} s)\n")
    print("\n".join(table(rows)))
    for r in rows:
        if r.differences:
            print(f"\n{r.family}: first differences\n" + "\n".join(r.differences))
    ran = [r for r in rows if r.status == "ok"]
    return 0 if all(r.metrics_agree == r.documents for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
