"""Multiple-choice tasks: rows → docs → instances, and their scoring by log-likelihood.

`RankedChoiceTask` scores any task whose instances are `Instance`s (OLMES's and lm-eval's
alike): each choice's log-likelihood and normalisations, the per-document predictions
and accuracies, and their means. `ChoiceTask` is the shape every OLMES family shares: a
family module only says where its rows are and how one row reads (`render`); the class
does the protocol: split order, seeded sampling, query ids, few-shot prefix, MC/RC
continuations and the unconditioned context.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.data import load_split
from proctor.errors import UserError
from proctor.metrics import aggregate_docs, choice_score, score_multiple_choice
from proctor.outputs.records import ChoiceMetrics, ChoiceOutput, ChoiceRecord
from proctor.requests import LoglikelihoodResult
from proctor.tasks.base import Instance, Scored, Task, about, assign_query_ids, check_limit, sidecar_row, spec_sample
from proctor.tasks.prompts import LETTERS, UNCOND_CONTEXT, choice_prompt, olmes_context
from proctor.tasks.spec import spec_format

# OLMES order for split="all": test, then validation, then train (those the task has).
ALL_SPLITS_ORDER = ("test", "validation", "train")


@dataclass(frozen=True)
class Rendered:
    """One row in protocol terms: the doc's prompt text, its answer options, the gold index.

    Partial evaluation (WinoGrande's RC) scores one continuation after each option's own
    text: `choice_texts` holds those texts and `continuation` what every option is continued
    with; `text` is then the gold option's (a few-shot example reads `text + continuation`).
    """

    text: str
    options: tuple[str, ...]     # answer texts, in order
    gold: int
    choice_texts: Optional[tuple[str, ...]] = None   # partial evaluation: each option's doc text
    continuation: Optional[str] = None               # partial evaluation: the shared continuation


def lettered_choices(benchmark: str, row: dict, question: str, key: str, is_mc: bool) -> Rendered:
    """Render a row whose answers are `choices.text` and whose gold is the letter `key` (ARC, CSQA, OpenBookQA).

    MC lists the answers after the question, RC asks the question alone (`choice_prompt`);
    a key that names none of the answers is one line naming the item.
    """
    options = tuple(row["choices"]["text"])
    if key not in LETTERS[: len(options)]:
        raise UserError(f"{benchmark} item {row.get('id')!r}: answer key {row['answerKey']!r} does not "
                        f"name one of its {len(options)} options")
    return Rendered(text=choice_prompt(question, options, is_mc), options=options, gold=LETTERS.index(key))


#: OLMES's few-shot seed (`fewshot_seed`), where it draws shots from a split
SHOT_SEED = 1234

#: the per-document metrics a choice task averages (those its documents have)
DOC_METRICS = ("acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte", "acc_uncond", "acc_norm", "mc2")


class RankedChoiceTask(Task):
    """Answer choices ranked by their log-likelihood; the instances are `Instance`s."""

    kind = "choice"

    @abstractmethod
    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[Instance]:
        """One `Instance` per document (see `Task.instances`)."""

    def extra_metrics(self, inst: Instance, choices: Sequence[ChoiceOutput]) -> dict[str, float]:
        """Per-document metrics beyond OLMES's (lm-eval specs: acc_norm, mc2)."""
        return {}

    def score_docs(self, instances: Sequence[Instance], results: Mapping[str, LoglikelihoodResult]) -> Scored:
        """Rank each instance's choices by log-likelihood and its normalisations; records, sidecar, means."""
        primary = self.config.primary_metric
        # the prediction a record shows: the primary accuracy's, the raw one under a BPB primary
        primary_kind = primary.removeprefix("acc_") if primary.startswith("acc_") else "raw"
        averaged = DOC_METRICS if primary in DOC_METRICS else (*DOC_METRICS, primary)
        records, sidecar, doc_metrics = [], [], []
        for inst in instances:
            unconds: list[Optional[LoglikelihoodResult]] = [results[r.key] for r in inst.uncond_requests]
            unconds = unconds or [None] * len(inst.continuations)
            choices = [choice_score(cont, results[req.key], unc)
                       for cont, req, unc in zip(inst.continuations, inst.requests, unconds)]
            metrics = score_multiple_choice(choices, inst.label)
            metrics.update(self.extra_metrics(inst, choices))
            doc_metrics.append(metrics)
            predicted = metrics[f"predicted_index_{primary_kind}"]
            records.append(ChoiceRecord(
                query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id,
                metrics=ChoiceMetrics(**metrics),
                model_output=tuple(choices), label=inst.label))
            sidecar.append(sidecar_row(
                self.config, inst, is_correct=metrics.get("is_correct", predicted == inst.label),
                predicted_answer=inst.choices[predicted], correct_answer=inst.choices[inst.label]))
        return Scored(records, sidecar, dict(aggregate_docs(doc_metrics, averaged)))


class ChoiceTask(RankedChoiceTask):
    """OLMES loglikelihood ranking over answer options, MC (letters) or RC (answer texts).

    In chat format (OLMES's `use_chat_format`) the prompt is `olmes_chat` of the same shots and
    the conditioned continuations lose their leading space (OLMES's `convert_chat_instance`:
    there is no assistant prefix); the unconditioned requests stay plain text.
    """

    supports_chat = True
    default_multiturn = False    # OLMES's fewshot_as_multiturn default; a ::tulu config sets it
    supports_system_instruction = True   # OLMES's context_kwargs system_instruction
    system_instruction_needs_chat = True

    #: labelled splits this family has, a subset of ALL_SPLITS_ORDER
    splits: tuple[str, ...] = ("test",)
    #: the split few-shot rows come from, when they come from one (else a few-shot list)
    fewshot_split: Optional[str] = None
    #: RC's unconditioned "Answer:" requests (acc_uncond); off for a gold continuation's BPB alone
    unconditioned = True

    @property
    def is_mc(self) -> bool:
        """Whether the spec is the MC form (letters) rather than RC (answer texts)."""
        return spec_format(self.config.name) == "mc"

    # ---- what a family provides -------------------------------------------------

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Hub-shaped rows of one split, in dataset order: by default the spec's dataset and config's.

        A spec that samples a number of rows takes an export of OLMES's own sample of that size
        where the split itself is not at hand (`load_split`'s `sample`).
        """
        limit = self.config.sample_limit
        return load_split(self.config.dataset_path, self.config.dataset_name, split, data_dir,
                          sample=limit if isinstance(limit, int) and len(self.eval_splits()) == 1 else None)

    @abstractmethod
    def render(self, row: dict) -> Rendered:
        """How a row reads under this task's format (`self.is_mc`)."""

    @abstractmethod
    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Return the few-shot rows in order; the first `num_shots` are used (fewer is an error)."""

    # ---- the protocol -----------------------------------------------------------

    def eval_splits(self) -> tuple[str, ...]:
        """Return the splits evaluated: the spec's, or for "all" those the family has, in OLMES order."""
        if self.config.split == "all":
            return tuple(s for s in ALL_SPLITS_ORDER if s in self.splits)
        return (self.config.split,)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Rows of the eval splits in order, each with `native_id` and `split`, then sampled."""
        docs = [doc for split in self.eval_splits()
                for doc in self.as_docs(self.split_rows(data_dir, split), split)]
        return spec_sample(docs, self.config.sample_limit)

    def query_ids(self, data_dir: Optional[Path]) -> tuple[list[str], int]:
        """Query ids over the full doc list and how many docs repeat an earlier native id."""
        return assign_query_ids(self.config.name, [d["native_id"] for d in self.docs(data_dir)])

    def labels(self, rendered: Rendered) -> tuple[str, ...]:
        """Return what the model chooses between: letters for MC, the answer texts for RC."""
        if self.is_mc:
            return tuple(LETTERS[: len(rendered.options)])
        return rendered.options

    def shots(self, data_dir: Optional[Path]) -> list[tuple[str, str]]:
        """Return the spec's few-shot examples as (prompt text, " " + gold label).

        Under partial evaluation: (the gold option's text, the shared continuation).
        """
        k = self.config.num_shots
        if k == 0:
            return []
        rows = self.fewshot_rows(data_dir)
        if len(rows) < k:
            source = (f"the {self.fewshot_split} split" if self.fewshot_split
                      else f"its few-shot source {self.config.fewshot_source}")
            raise UserError(f"the spec needs {k} few-shot examples but {source} has only "
                            f"{len(rows)} rows")
        return [self.shot_pair(row) for row in rows[:k]]

    def shot_pair(self, row: dict) -> tuple[str, str]:
        """Return one shot as (prompt text, " " + gold label).

        Under partial evaluation: (the gold option's text, the shared continuation).
        """
        r = self.render(row)
        return (r.text, " " + self.labels(r)[r.gold] if r.continuation is None else r.continuation)

    def doc_shots(self, doc: dict, shots: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Return one document's shots: the task's (`shots`), unless the family draws them per document."""
        return shots

    def prompt_prefix(self, data_dir: Optional[Path]) -> str:
        """Return the description plus few-shot block: the part every doc's prompt starts with."""
        return str(olmes_context(self.description(), self.shots(data_dir), ""))

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[Instance]:
        """Build one `Instance` per document: OLMES's prompt, continuations and unconditioned context."""
        check_limit(limit)  # before any data is read
        with about(self.config.name):
            return self._instances(data_dir, limit)

    def _instances(self, data_dir: Optional[Path], limit: Optional[int]) -> list[Instance]:
        numbered = self.numbered_docs(data_dir, limit)
        chat = self.config.chat
        shots = self.shots(data_dir)
        out = []
        for doc_id, doc, qid in numbered:
            r = self.render(doc)
            if r.choice_texts is not None:
                out.append(self._partial_instance(doc_id, doc, qid, r, self.doc_shots(doc, shots)))
                continue
            labels = self.labels(r)
            spaced = tuple(" " + c for c in labels)
            out.append(Instance(
                query_id=qid,
                task=self.config.name,
                doc_id=doc_id,
                native_id=doc["native_id"],
                prompt=olmes_context(self.description(), self.doc_shots(doc, shots), r.text, chat,
                                     self.config.system_instruction),
                choices=labels,
                continuations=spaced if chat is None or chat.assistant_prefix else tuple(labels),
                label=r.gold,
                uncond_context=UNCOND_CONTEXT if self.unconditioned and not self.is_mc else None,
                metadata=self.doc_metadata(doc),
                uncond_continuations=None if chat is None else spaced,
            ))
        return out

    def _partial_instance(self, doc_id: int, doc: dict, qid: str, r: Rendered,
                          shots: list[tuple[str, str]]) -> Instance:
        """Build a partial-evaluation instance: the shots, then each option's text; one shared continuation.

        No unconditioned requests (every option continues with the same text). OLMES's chat layout of
        such a task is not reproduced, so a chat config is refused.
        """
        if self.config.chat is not None:
            raise UserError("its options are scored by partial evaluation (each option in the context, "
                            "the rest of the text as the continuation), whose chat layout is not "
                            "reproduced; run it without --chat-template")
        assert r.choice_texts is not None and r.continuation is not None  # a partial Rendered
        prompts = tuple(olmes_context(self.description(), shots, text) for text in r.choice_texts)
        return Instance(query_id=qid, task=self.config.name, doc_id=doc_id, native_id=doc["native_id"],
                        prompt=prompts[0], choices=self.labels(r),
                        continuations=(r.continuation,) * len(prompts), label=r.gold,
                        metadata=self.doc_metadata(doc), choice_prompts=prompts)


class DrawnShotsTask(ChoiceTask):
    """A task whose shots OLMES draws from a split of its own with `random.Random(1234).sample`.

    OLMES's `fewshot_examples`: a task with a train split draws num_shots of its rows and uses them
    as drawn, for every document (LAB-Bench, whose one split is train, may show a document among
    its own shots); a task without one draws num_shots + 1 rows of the evaluated split, and a
    document's shots are the first num_shots of them that are not the document (the basic skills,
    HumanEval's 3-shot BPB).
    """

    _shot_ids: tuple[Any, ...] = ()   # native ids of the drawn rows, in draw order

    @property
    def leaves_doc_out(self) -> bool:
        """Whether the shots are drawn from the evaluated split, one extra, the document's own left out."""
        return "train" not in self.splits

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Return the drawn rows: num_shots of train, else num_shots + 1 of the evaluated split."""
        split = "train" if not self.leaves_doc_out else self.config.split
        rows = self.as_docs(self.split_rows(data_dir, split), split)
        k = self.config.num_shots + self.leaves_doc_out
        if len(rows) < k:
            raise UserError(f"the spec draws {k} few-shot examples but the {split} split has only {len(rows)} rows")
        picks = [rows[i] for i in random.Random(SHOT_SEED).sample(range(len(rows)), k)]
        self._shot_ids = tuple(row["native_id"] for row in picks)
        return picks

    def shots(self, data_dir: Optional[Path]) -> list[tuple[str, str]]:
        """Return all drawn rows as shots: `doc_shots` keeps num_shots of them per document."""
        return [self.shot_pair(row) for row in self.fewshot_rows(data_dir)] if self.config.num_shots else []

    def doc_shots(self, doc: dict, shots: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Return the first num_shots drawn rows, without the document itself where OLMES leaves it out."""
        if not self.leaves_doc_out:
            return shots
        return [shot for shot, sid in zip(shots, self._shot_ids) if sid != doc["native_id"]][: self.config.num_shots]
