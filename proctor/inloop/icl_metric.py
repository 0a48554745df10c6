"""ICLMetric: per-document accuracy and gold-continuation BPB of an in-loop ICL task.

`update(batch, logits)` stores each row's loglikelihood (sum of the log-probabilities of
its labelled tokens: float32 log-softmax, as offline scoring, summed in float64) in a
tensor indexed by `item_id`, with the row's document, continuation, gold index and
lengths. `compute()` adds these tensors over ranks (each row lives on exactly one rank;
`Coverage` refuses a missing or repeated row, so a document with missing choices raises
ValueError instead of giving a wrong number), then per document:

- "acc": the continuation with the largest loglikelihood is the gold one;
- "len_norm": the same with loglikelihood / `cont_str_len` (OLMES acc_per_char);
- "bpb_v2": -ll / ln 2 / `cont_byte_len` of the gold continuation (leading space counted);
- "bpb_v1": the same over `cont_byte_len_no_leading_space`;
- "ce_loss": -ll / `cont_str_len` of the gold continuation;
- "pmi_dc": as "acc" over ll / the continuation's loglikelihood after the document's
  domain-conditional context (the task's `is_domain` rows), as ai2-olmo-eval divides them; the
  gold's negative ratio stands for its CE loss and BPB, as there;

each averaged over documents. Ties go to the lowest index (`proctor.metrics.choice.argmax`).
metric_type "bpb" or "ce_loss" (one scored continuation per document) reports bpb_v1, bpb_v2,
ce_loss, ce_loss_v1 and ce_loss_v2; "f1" (two or more continuations, the first the positive
class, as ai2-olmo-eval's MRPC " yes") adds acc, len_norm and the F1 of the argmax predictions
as f1_v1 and f1_v2 (the same value: ai2-olmo-eval's two come from the same loglikelihoods).

Beside these, `compute()` returns the keys ai2-olmo-eval's `ICLMetric.compute` returns for the
metric type, with its values (v1: lengths without the continuation's first character, its
leading space; v2: with it): `<acc|len_norm>_v1` and `_v2` (both the accuracy under the metric type, as there),
`ce_loss_v1`/`_v2`, `bpb_v1`/`_v2`, and `soft_v1`/`_v2` and `soft_log_v1`/`_v2`: the mean
probability (and log-probability) of the gold continuation under a softmax over the
document's scores (loglikelihoods, or for len_norm loglikelihood per character). For "bpb":
`bpb_v1`/`_v2` (and `ce_loss_v1`/`_v2`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

from proctor.inloop.batching import label_logprob_sums
from proctor.inloop.distributed import SumMetric, all_reduce_max, all_reduce_sum
from proctor.inloop.icl import GOLD_ONLY, METRIC_TYPES
from proctor.metrics.choice import argmax

_FIELDS = ("doc_id", "cont_id", "label_id", "num_choices", "cont_str_len", "cont_byte_len",
           "cont_byte_len_no_leading_space", "is_domain")   # is_domain: only "pmi_dc" rows have it (0 else)


@dataclass(frozen=True)
class DocResult:
    """One document's outcome."""

    doc_id: int
    label: int
    loglikelihoods: tuple[float, ...]
    predicted: int            # argmax of loglikelihoods
    predicted_len_norm: int   # argmax of loglikelihood / characters
    bpb_v1: float             # gold continuation, bytes without the leading space
    bpb_v2: float             # gold continuation, bytes with it
    ce_loss: float            # gold continuation, nats per character
    ce_loss_v1: float         # gold continuation, nats per character without the leading space
    chars: tuple[int, ...]    # each continuation's characters
    chars_v1: tuple[int, ...]  # ... without its leading space

    def scores(self, metric_type: str, v1: bool = False) -> list[float]:
        """Return what the continuations are ranked by: loglikelihoods, or per character for len_norm."""
        if metric_type != "len_norm":
            return list(self.loglikelihoods)
        return [ll / c for ll, c in zip(self.loglikelihoods, self.chars_v1 if v1 else self.chars)]


class ICLMetric(SumMetric):
    """Accuracy, length-normalised accuracy and BPB of an ICL task (see the module doc)."""

    loglikelihoods: torch.Tensor   # buffers (registered in __init__)
    fields: torch.Tensor

    def __init__(self, metric_type: str = "acc"):
        super().__init__()
        if metric_type not in METRIC_TYPES:
            raise ValueError(f"unknown metric_type {metric_type!r}; use one of {', '.join(METRIC_TYPES)}")
        self.metric_type = metric_type
        self.register_buffer("loglikelihoods", torch.zeros(0, dtype=torch.float64), persistent=False)
        self.register_buffer("fields", torch.zeros(0, len(_FIELDS), dtype=torch.int64), persistent=False)

    def reset(self) -> None:
        """Forget every row scored so far, and the coverage counts."""
        device = self.loglikelihoods.device
        self.loglikelihoods = torch.zeros(0, dtype=torch.float64, device=device)
        self.fields = torch.zeros(0, len(_FIELDS), dtype=torch.int64, device=device)
        self.coverage.reset()

    def _grow(self, n: int) -> None:
        have = self.loglikelihoods.numel()
        if have == n:
            return
        if have:
            raise ValueError(f"batches come from datasets of {have} and {n} rows; use one ICLMetric per task")
        device = self.loglikelihoods.device
        self.loglikelihoods = torch.zeros(n, dtype=torch.float64, device=device)
        self.fields = torch.zeros(n, len(_FIELDS), dtype=torch.int64, device=device)

    @torch.no_grad()
    def update(self, batch: Mapping[str, torch.Tensor], logits: torch.Tensor) -> None:
        """Add each batch row's summed label log-prob and fields, at its `item_id`, from the model's logits."""
        num_items = batch["num_items"].reshape(-1)
        if num_items.numel() == 0:
            return
        n = int(num_items.max())
        if int(num_items.min()) != n:
            raise ValueError("a batch mixes rows of datasets of different sizes; use one ICLMetric per task")
        self._grow(n)
        device = self.loglikelihoods.device
        ids = batch["item_id"].reshape(-1).to(device=device, dtype=torch.long)
        ll = label_logprob_sums(logits, batch["labels"]).to(device)
        self.loglikelihoods.index_add_(0, ids, ll)
        self.fields[ids] = torch.stack([batch[k].reshape(-1).to(device=device, dtype=torch.long) if k in batch
                                        else torch.zeros_like(ids) for k in _FIELDS], dim=1)
        self.coverage.add(ids, n)

    def _summed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row state over all ranks (a rank that saw no batch contributes zeros)."""
        device = self.loglikelihoods.device
        n = int(all_reduce_max(torch.tensor([self.loglikelihoods.numel()], device=device)).item())
        ll = torch.zeros(n, dtype=torch.float64, device=device)
        fields = torch.zeros(n, len(_FIELDS), dtype=torch.int64, device=device)
        ll[: self.loglikelihoods.numel()] = self.loglikelihoods
        fields[: self.fields.shape[0]] = self.fields
        return all_reduce_sum(ll), all_reduce_sum(fields)

    def doc_results(self) -> list[DocResult]:
        """Each document's predictions and gold BPB, in document order (all ranks reduced)."""
        self.coverage.check("ICL rows (document, continuation)")
        ll, fields = self._summed()
        ll_list, rows = ll.cpu().tolist(), fields.cpu().tolist()
        by_doc: dict[int, list[tuple[list[int], float]]] = {}
        domain: dict[tuple[int, int], float] = {}
        for f, value in zip(rows, ll_list):
            if f[7]:
                domain[f[0], f[1]] = value
            else:
                by_doc.setdefault(f[0], []).append((f, value))
        if (self.metric_type == "pmi_dc") != bool(domain):
            raise ValueError("metric type pmi_dc needs the domain-conditional rows of a task built with "
                             "metric_type='pmi_dc', and only they have them; use one ICLMetric per task")
        out = []
        for doc_id in sorted(by_doc):
            out.append(_score_doc(doc_id, by_doc[doc_id], domain))
        return out

    def compute(self) -> dict[str, float]:
        """Return the document means: BPB and CE loss, plus accuracies unless metric_type is "bpb"."""
        docs = self.doc_results()
        n = len(docs)
        result = {
            "bpb_v1": sum(d.bpb_v1 for d in docs) / n,
            "bpb_v2": sum(d.bpb_v2 for d in docs) / n,
            "ce_loss": sum(d.ce_loss for d in docs) / n,
        }
        result["ce_loss_v1"] = sum(d.ce_loss_v1 for d in docs) / n
        result["ce_loss_v2"] = result["ce_loss"]
        if self.metric_type in GOLD_ONLY:
            return result
        acc = sum(float(d.predicted == d.label) for d in docs) / n
        len_norm = sum(float(d.predicted_len_norm == d.label) for d in docs) / n
        result.update({"acc": acc, "len_norm": len_norm})
        if self.metric_type == "f1":
            f1 = f1_score([d.label for d in docs], [d.predicted for d in docs], positive=0)
            result.update({"f1_v1": f1, "f1_v2": f1})
            return result
        chosen = len_norm if self.metric_type == "len_norm" else acc
        result.update({f"{self.metric_type}_v1": chosen, f"{self.metric_type}_v2": chosen})
        for version, v1 in (("v1", True), ("v2", False)):
            logs = [torch.log_softmax(torch.tensor(d.scores(self.metric_type, v1), dtype=torch.float64), 0)[d.label]
                    for d in docs]
            result[f"soft_{version}"] = sum(math.exp(float(x)) for x in logs) / n
            result[f"soft_log_{version}"] = sum(float(x) for x in logs) / n
        return result


def f1_score(labels: list[int], predicted: list[int], positive: int) -> float:
    """F1 of the `positive` class alone (0 when it is never predicted or never gold, as ai2-olmo-eval's)."""
    from sklearn.metrics import f1_score as sklearn_f1

    return float(sklearn_f1(labels, predicted, labels=[positive], average="macro", zero_division=0))


def _score_doc(doc_id: int, rows: list[tuple[list[int], float]], domain: Mapping[tuple[int, int], float]) -> DocResult:
    rows = sorted(rows, key=lambda r: r[0][1])
    fields = [f for f, _ in rows]
    num_choices, label = fields[0][3], fields[0][2]
    if [f[1] for f in fields] != list(range(num_choices)) or any(
            f[2] != label or f[3] != num_choices for f in fields):
        raise ValueError(f"document {doc_id}: rows do not form its {num_choices} continuations "
                         f"(got continuation ids {[f[1] for f in fields]}); every row of a document "
                         "must come from the same task, each once")
    if not 0 <= label < num_choices:
        raise ValueError(f"document {doc_id}: gold index {label} is not one of {num_choices} continuations")
    lls = [v for _, v in rows]
    chars = [max(f[4], 1) for f in fields]
    # characters without the first (the leading space), as ai2-olmo-eval counts them
    chars_v1 = [max(f[4] - 1, 1) for f in fields]
    if domain:
        return _pmi_doc(doc_id, label, [ll / domain[doc_id, i] for i, ll in enumerate(lls)], chars, chars_v1)
    gold_ll, gold = lls[label], fields[label]
    return DocResult(
        doc_id=doc_id,
        label=label,
        loglikelihoods=tuple(lls),
        predicted=argmax(lls),
        predicted_len_norm=argmax([v / c for v, c in zip(lls, chars)]),
        bpb_v1=-gold_ll / math.log(2) / max(gold[6], 1),
        bpb_v2=-gold_ll / math.log(2) / max(gold[5], 1),
        ce_loss=-gold_ll / chars[label],
        ce_loss_v1=-gold_ll / chars_v1[label],
        chars=tuple(chars),
        chars_v1=tuple(chars_v1),
    )


def _pmi_doc(doc_id: int, label: int, ratios: list[float], chars: list[int], chars_v1: list[int]) -> DocResult:
    """Score a "pmi_dc" document by each continuation's loglikelihood over its domain-conditional one.

    That ratio is what ai2-olmo-eval ranks by, and its negative stands for the gold answer's CE loss
    and BPB there (the length normalizations cancel out).
    """
    loss = -ratios[label]
    return DocResult(doc_id=doc_id, label=label, loglikelihoods=tuple(ratios), predicted=argmax(ratios),
                     predicted_len_norm=argmax(ratios), bpb_v1=loss, bpb_v2=loss, ce_loss=loss, ce_loss_v1=loss,
                     chars=tuple(chars), chars_v1=tuple(chars_v1))
