"""Corpus perplexity tasks: C4 English (`c4_en::bpb`) and each Paloma source (`paloma_<source>::bpb`).

A document is one `RollingLoglikelihood` of its whole text, chunked exactly as the in-loop
tasks chunk it (`proctor.engine.tokens.rolling_windows`). The task's documents are the
first `num_samples` (1,000) documents of the corpus split (`proctor.data.corpora`), in
corpus order; `--limit N` takes the first N of them, so `--limit N` covers the same
documents as the in-loop `C4English(tokenizer, num_samples=N)`. Empty documents (text "")
are left out of the document list, as the in-loop chunking skips them (they still count
among the first N read); `doc_id` is a document's position in that list, i.e. the in-loop
document number (`proctor.inloop.lm`: 0..n-1 over the scored documents, in corpus order).

Scores (proctor.evaluate_perplexity) are corpus totals over the task's documents: bpb =
total NLL / ln 2 / total UTF-8 bytes (primary) and ce_loss = total NLL / total tokens.
There is no Paloma suite: byte-weighted totals across sources are not a mean of members.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from proctor.data import corpora
from proctor.requests import RollingLoglikelihood
from proctor.tasks.base import Task, TaskConfig, assign_query_ids, check_limit

NUM_SAMPLES = 1000  # documents of the corpus prefix a spec evaluates
C4_SPEC = "c4_en::bpb"
PALOMA_SPLIT = "val"


def paloma_spec(source: str) -> str:
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
        return RollingLoglikelihood(self.text)

    @property
    def requests(self) -> tuple[RollingLoglikelihood, ...]:
        return (self.request,)

    @property
    def uncond_requests(self) -> tuple:
        return ()

    @property
    def target(self) -> None:
        """No gold answer (requests.jsonl writes `label: null`)."""
        return None


class PerplexityTask(Task):
    """Rolling loglikelihood of every document of a corpus prefix."""

    def corpus(self, data_dir: Optional[Path]) -> list[corpora.Document]:
        """The first `config.limit` documents of the corpus split, empty ones included."""
        num_samples = int(self.config.limit or NUM_SAMPLES)
        if self.config.dataset_path == corpora.PALOMA_HUB:
            assert self.config.dataset_name is not None
            return corpora.paloma_documents(self.config.dataset_name, self.config.split, num_samples, data_dir)
        return corpora.c4_documents(data_dir, num_samples)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        return [
            {"text": d.text, "native_id": d.native_id, "split": self.config.split, "corpus_index": i}
            for i, d in enumerate(self.corpus(data_dir))
            if d.text
        ]

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[DocumentInstance]:
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
    def cfg(name: str, benchmark: str, dataset: str, subset: str, split: str) -> TaskConfig:
        # `limit`: the corpus prefix (first N documents, not a seeded sample)
        return TaskConfig(name=name, benchmark=benchmark, dataset_path=dataset, dataset_name=subset,
                          split=split, num_shots=0, primary_metric="bpb", limit=NUM_SAMPLES)

    dataset, subset, split = corpora.C4_HUB
    out = {C4_SPEC: cfg(C4_SPEC, "c4_en", dataset, subset, split)}
    for source in corpora.PALOMA_SOURCES:
        name = paloma_spec(source)
        out[name] = cfg(name, f"paloma_{source}", corpora.PALOMA_HUB, source, PALOMA_SPLIT)
    return out


TASK_CLASS = PerplexityTask
