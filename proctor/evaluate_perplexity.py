"""Scoring a perplexity task's run: each document's rolling result -> records and corpus ratios.

Per document (predictions.jsonl `metrics`): `nll` (nats, = -sum_logits), `sum_logits`,
`num_tokens` (targets scored), `num_bytes` (UTF-8 bytes of the text) and `bits_per_byte`.
Task aggregates are corpus totals over the documents (`RatioStat`), matching the in-loop
C4Metric/PalomaMetric: `bpb` = sum(nll) / ln 2 / sum(bytes) (primary) and `ce_loss` =
sum(nll) / sum(tokens). A document whose text yields no tokens (possible only with an
unusual tokenizer: empty texts are not instances) adds neither tokens nor bytes, as the
in-loop chunking skips it; its `bits_per_byte` is null.

Perplexity documents have no answer to be right or wrong about, so they add no rows to
the query-metadata sidecar (whose columns are is_correct/predicted_answer/...).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

from proctor.metrics import RatioStat
from proctor.outputs.records import Prediction
from proctor.requests import LoglikelihoodResult
from proctor.tasks.perplexity import PerplexityTask

if TYPE_CHECKING:
    from proctor.evaluate import TaskRun

LN2 = math.log(2)


def is_perplexity_run(run: "TaskRun") -> bool:
    return isinstance(run.task, PerplexityTask)


def document_metrics(text: str, result: LoglikelihoodResult) -> dict:
    nll = -result.sum_logits
    num_bytes = len(text.encode("utf-8"))
    return {
        "nll": nll,
        "sum_logits": result.sum_logits,
        "num_tokens": result.num_tokens,
        "num_bytes": num_bytes,
        "bits_per_byte": nll / LN2 / num_bytes if result.num_tokens else float("nan"),
    }


def score_perplexity(run: "TaskRun", results: Mapping[str, LoglikelihoodResult]) -> None:
    """Fill a perplexity task run's predictions and its `bpb` / `ce_loss` corpus ratios."""
    scored = []
    for inst in run.instances:
        result = results[inst.request.key]
        metrics = document_metrics(inst.text, result)
        run.predictions.append(Prediction(
            query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id, metrics=metrics,
            model_output=[{"sum_logits": result.sum_logits, "num_tokens": result.num_tokens,
                           "is_greedy": result.is_greedy}],
            label=None,
        ))
        if result.num_tokens:
            scored.append(metrics)
    run.metrics = {
        "bpb": RatioStat.of((m["nll"] / LN2, m["num_bytes"]) for m in scored),
        "ce_loss": RatioStat.of((m["nll"], m["num_tokens"]) for m in scored),
    }


def perplexity_totals(run: "TaskRun") -> dict:
    """The corpus totals behind the ratios (metrics.json), for exact comparisons."""
    bpb, ce = run.metrics["bpb"], run.metrics["ce_loss"]
    assert isinstance(bpb, RatioStat) and isinstance(ce, RatioStat)
    return {"nll": ce.numerator, "num_tokens": int(ce.denominator), "num_bytes": int(bpb.denominator),
            "num_docs_scored": ce.count}
