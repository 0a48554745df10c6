"""Corpus perplexity tasks: C4 English (`c4_en::bpb`) and each Paloma source (`paloma_<source>::bpb`).

A document is one `RollingLoglikelihood` of its whole text, chunked exactly as the in-loop
tasks chunk it (`proctor.engine.tokens.rolling_windows`). The task's documents are the
first `num_samples` (1,000) documents of the corpus split (`proctor.data.corpora`), in
corpus order; `--limit N` takes the first N of them, so `--limit N` covers the same
documents as the in-loop `C4English(tokenizer, num_samples=N)`. Empty documents (text "")
are left out of the document list, as the in-loop chunking skips them (they still count
among the first N read); `doc_id` is a document's position in that list, i.e. the in-loop
document number (`proctor.inloop.lm`: 0..n-1 over the scored documents, in corpus order).

Per document (predictions.jsonl `metrics`, `DocumentMetrics`): `nll` (nats, = -sum_logits),
`sum_logits`, `num_tokens` (targets scored), `num_bytes` (UTF-8 bytes of the text) and
`bits_per_byte`. Task aggregates are corpus totals over the documents (`RatioStat`),
matching the in-loop C4Metric/PalomaMetric: `bpb` = sum(nll) / ln 2 / sum(bytes) (primary)
and `ce_loss` = sum(nll) / sum(tokens). A document whose text yields no tokens (possible
only with an unusual tokenizer: empty texts are not instances) adds neither tokens nor
bytes, as the in-loop chunking skips it; its `bits_per_byte` is null. Each document has
its sidecar row, with no answer to be right or wrong about (`is_correct` etc. null).
There is no Paloma suite: byte-weighted totals across sources are not a mean of members.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.data import corpora
from proctor.metrics import RatioStat
from proctor.outputs.records import DocumentMetrics, PerplexityRecord, PerplexityTotals, RollingOutput
from proctor.requests import LoglikelihoodResult, RollingLoglikelihood
from proctor.tasks.base import Scored, Task, TaskConfig, assign_query_ids, check_limit, sidecar_row

LN2 = math.log(2)
NUM_SAMPLES = 1000  # documents of the corpus prefix a spec evaluates
C4_SPEC = "c4_en::bpb"
PALOMA_SPLIT = "val"


def paloma_spec(source: str) -> str:
    """Return the spec name of a Paloma source: `paloma_<source>::bpb`."""
    return f"paloma_{source}::bpb"


@dataclass(frozen=True)
class DocumentInstance:
    """One document scored as a whole (`query_id` as for choice instances: `<task>#<native_id>`)."""

    query_id: str
    task: str
    doc_id: int                 # position among the task's (non-empty) documents
    native_id: Any
    text: str
    metadata: dict = field(default_factory=dict)

    @property
    def request(self) -> RollingLoglikelihood:
        """The rolling loglikelihood of the whole text."""
        return RollingLoglikelihood(self.text)

    @property
    def requests(self) -> tuple[RollingLoglikelihood, ...]:
        """The one rolling request."""
        return (self.request,)

    @property
    def uncond_requests(self) -> tuple:
        """Empty: a document has no unconditioned requests."""
        return ()

    @property
    def gold(self) -> None:
        """No gold answer (requests.jsonl writes `label: null`)."""
        return None


def document_metrics(text: str, result: LoglikelihoodResult) -> DocumentMetrics:
    """Compute a document's nll, tokens, UTF-8 bytes and bits per byte (None when no token was scored)."""
    nll = -result.sum_logits
    num_bytes = len(text.encode("utf-8"))
    return DocumentMetrics(nll=nll, sum_logits=result.sum_logits, num_tokens=result.num_tokens,
                           num_bytes=num_bytes, bits_per_byte=nll / LN2 / num_bytes if result.num_tokens else None)


class PerplexityTask(Task):
    """Rolling loglikelihood of every document of a corpus prefix."""

    kind = "perplexity"

    def score_docs(self, instances: Sequence[DocumentInstance],
                   results: Mapping[str, LoglikelihoodResult]) -> Scored:
        """Each document's record and sidecar row, and the `bpb` / `ce_loss` corpus ratios."""
        records, sidecar, scored = [], [], []
        for inst in instances:
            result = results[inst.request.key]
            metrics = document_metrics(inst.text, result)
            records.append(PerplexityRecord(
                query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id, metrics=metrics,
                model_output=(RollingOutput(result.sum_logits, result.num_tokens, result.is_greedy),)))
            sidecar.append(sidecar_row(self.config, inst, is_correct=None, predicted_answer=None,
                                       correct_answer=None))
            if result.num_tokens:
                scored.append(metrics)
        bpb = RatioStat.of((m.nll / LN2, m.num_bytes) for m in scored)
        ce = RatioStat.of((m.nll, m.num_tokens) for m in scored)
        totals = PerplexityTotals(nll=ce.numerator, num_tokens=int(ce.denominator), num_bytes=int(bpb.denominator),
                                  num_docs_scored=ce.count)
        return Scored(records, sidecar, {"bpb": bpb, "ce_loss": ce}, perplexity=totals)

    def corpus(self, data_dir: Optional[Path]) -> list[corpora.Document]:
        """Read the first `config.sample_limit` documents of the corpus split, empty ones included."""
        num_samples = int(self.config.sample_limit or NUM_SAMPLES)
        if self.config.dataset_path == corpora.PALOMA_HUB:
            assert self.config.dataset_name is not None
            return corpora.paloma_documents(self.config.dataset_name, self.config.split, num_samples, data_dir)
        return corpora.c4_documents(data_dir, num_samples)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Return the corpus prefix's non-empty documents, each with its index in the corpus (`corpus_index`)."""
        return [
            {"text": d.text, "native_id": d.native_id, "split": self.config.split, "corpus_index": i}
            for i, d in enumerate(self.corpus(data_dir))
            if d.text
        ]

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[DocumentInstance]:
        """Build one instance per non-empty document among the first `limit` of the corpus read."""
        check_limit(limit)  # before any data is read
        docs = self.docs(data_dir)
        qids, _ = assign_query_ids(self.config.name, [d["native_id"] for d in docs])  # over all docs
        return [
            DocumentInstance(query_id=qid, task=self.config.name, doc_id=doc_id,
                             native_id=d["native_id"], text=d["text"], metadata=self.doc_metadata(d))
            for doc_id, (d, qid) in enumerate(zip(docs, qids))
            if limit is None or d["corpus_index"] < limit
        ]


def configs() -> dict[str, TaskConfig]:
    """Build the configs of C4 English and of each Paloma source."""
    def cfg(name: str, benchmark: str, dataset: str, subset: str, split: str) -> TaskConfig:
        # `sample_limit`: the corpus prefix (first N documents, not a seeded sample)
        return TaskConfig(name=name, benchmark=benchmark, dataset_path=dataset, dataset_name=subset,
                          split=split, num_shots=0, primary_metric="bpb", sample_limit=NUM_SAMPLES)

    dataset, subset, split = corpora.C4_HUB
    out = {C4_SPEC: cfg(C4_SPEC, "c4_en", dataset, subset, split)}
    for source in corpora.PALOMA_SOURCES:
        name = paloma_spec(source)
        out[name] = cfg(name, f"paloma_{source}", corpora.PALOMA_HUB, source, PALOMA_SPLIT)
    return out


TASK_CLASS = PerplexityTask
