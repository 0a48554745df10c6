"""What a task is: a config, a list of documents, and instances built from them."""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, NamedTuple, Optional, Protocol, Sequence

from proctor.errors import UserError, check_positive_int
from proctor.metrics import Stat
from proctor.outputs.records import (
    GenerationSettings,
    PerplexityTotals,
    QueryMetadata,
    Record,
    TaskKind,
)
from proctor.requests import Context, Loglikelihood, Policy, Request
from proctor.tasks.config import ChatFormat, TaskConfig

__all__ = ["Instance", "Scored", "Task", "TaskConfig", "Work", "about", "assign_query_ids",
           "check_limit", "number_docs", "sidecar_row", "spec_sample"]


class Work(Protocol):
    """What every family's instance is: one document, keyed by `query_id`, and its requests."""

    @property
    def query_id(self) -> str:
        """The key of its record: `<task>#<native_id>`, made unique (`assign_query_ids`)."""
    @property
    def doc_id(self) -> int:
        """Position in the task's final doc list."""
    @property
    def native_id(self) -> Any:
        """The dataset's own id (may repeat)."""
    @property
    def metadata(self) -> dict:
        """Sidecar columns and more: benchmark, subject, reasoning_type, ..."""
    @property
    def requests(self) -> tuple[Request, ...]:
        """The requests whose results score the document."""
    @property
    def uncond_requests(self) -> tuple[Request, ...]:
        """Requests scored without the question (RC's acc_uncond); empty for most families."""
    @property
    def gold(self) -> Any:
        """The gold answer as requests.jsonl records it (JSON)."""


@dataclass(frozen=True)
class Instance:
    """One document turned into work: the unit every record is keyed by (`query_id`)."""

    query_id: str
    task: str                                   # TaskConfig.name
    doc_id: int                                 # position in the task's final doc list
    native_id: Any                              # the dataset's own id (may repeat)
    prompt: Context                             # full prompt (context of each request; see choice_prompts)
    choices: tuple[str, ...]                    # answer labels as shown: "A".. for MC, texts for RC
    continuations: tuple[str, ...]              # " A".. or " " + text; one request each
    label: int                                  # gold index into choices
    uncond_context: Optional[str] = None        # RC: "Answer:" context for acc_uncond
    metadata: dict = field(default_factory=dict)  # benchmark, subject, reasoning_type, ...
    policy: Policy = "olmes"                    # whose tokenization its requests follow
    #: the unconditioned requests' continuations where they differ (OLMES chat format strips
    #: the conditioned ones' leading space, not these); None: `continuations`
    uncond_continuations: Optional[tuple[str, ...]] = None
    #: each choice's own context, where the choices differ in their contexts rather than their
    #: continuations (partial evaluation: WinoGrande's RC fills the blank with each option in the
    #: context and scores the rest of the sentence); `prompt` is then the first of them. None:
    #: every continuation follows `prompt`
    choice_prompts: Optional[tuple[Context, ...]] = None

    def __post_init__(self) -> None:
        """Refuse choice prompts that are not one per continuation."""
        if self.choice_prompts is not None and len(self.choice_prompts) != len(self.continuations):
            raise ValueError(f"{self.query_id}: {len(self.choice_prompts)} choice prompts for "
                             f"{len(self.continuations)} continuations")

    @property
    def prompts(self) -> tuple[Context, ...]:
        """Each continuation's context: `choice_prompts`, else the one `prompt` for all."""
        if self.choice_prompts is not None:
            return self.choice_prompts
        return (self.prompt,) * len(self.continuations)

    @property
    def requests(self) -> tuple[Loglikelihood, ...]:
        """One loglikelihood request per continuation, each after its context (`prompts`)."""
        return tuple(Loglikelihood(p, c, self.policy) for p, c in zip(self.prompts, self.continuations))

    @property
    def uncond_requests(self) -> tuple[Loglikelihood, ...]:
        """One request per continuation after `uncond_context` alone; none without that context."""
        if self.uncond_context is None:
            return ()
        continuations = self.continuations if self.uncond_continuations is None else self.uncond_continuations
        return tuple(Loglikelihood(self.uncond_context, c, self.policy) for c in continuations)

    @property
    def gold(self) -> int:
        """The gold choice's index (`label`)."""
        return self.label


def spec_sample(docs: list, limit: Optional[float]) -> list:
    """Return the spec's own doc list: `random.Random(1234).sample` when a limit is smaller than the docs."""
    if limit is None:
        return docs
    n = math.ceil(len(docs) * limit) if isinstance(limit, float) else int(limit)
    if n >= len(docs):
        return docs
    return random.Random(1234).sample(docs, n)


def assign_query_ids(task_name: str, native_ids: list) -> tuple[list[str], int]:
    """Stable query ids `<task>#<native_id>`; repeated native ids get `@<doc_id>` on every copy.

    Returns the ids and the number of duplicates: copies beyond the first of each repeated
    native id (the seed's "167 duplicate query_ids" for socialiqa:mc::xlarge; there each
    repeated id occurs exactly twice, once per split, so this also equals the number of
    distinct repeated ids, while 334 docs carry one).
    """
    counts = Counter(native_ids)
    ids = []
    for doc_id, nid in enumerate(native_ids):
        qid = f"{task_name}#{nid}"
        ids.append(f"{qid}@{doc_id}" if counts[nid] > 1 else qid)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    return ids, duplicates


def check_limit(limit: Optional[int]) -> None:
    """`--limit` is None or a positive int (bool is not an int here)."""
    if limit is not None:
        check_positive_int("--limit", limit)


class NumberedDoc(NamedTuple):
    """A doc with its position in the task's doc list and its query id."""

    doc_id: int
    doc: dict
    query_id: str


@contextmanager
def about(task_name: str) -> Iterator[None]:
    """Make a UserError raised while a task builds its instances name the task spec first.

    Building reads the task's rows, few-shot examples and prompts, and a suite reads many files.
    """
    try:
        yield
    except UserError as e:
        raise UserError(f"{task_name}: {e}") from None


def number_docs(task_name: str, docs: list[dict], limit: Optional[int]) -> list[NumberedDoc]:
    """Return the first `limit` docs with their doc ids and query ids (computed over all docs).

    A task without documents is refused here, before any model work.
    """
    check_limit(limit)
    if not docs:
        raise UserError("no documents to evaluate: the spec's split has no rows")
    qids, _ = assign_query_ids(task_name, [d["native_id"] for d in docs])
    return [NumberedDoc(i, doc, qid) for i, (doc, qid) in enumerate(zip(docs[:limit], qids))]


@dataclass
class Scored:
    """A task's documents scored: one record and one sidecar row each, and the aggregates."""

    records: Sequence[Record]
    sidecar: Sequence[QueryMetadata]
    metrics: dict[str, Stat]          # metric name -> its sufficient statistics
    generation: Optional[GenerationSettings] = None
    perplexity: Optional[PerplexityTotals] = None
    #: lm-eval tasks: the lm-eval version and the task's resolved config (metrics.json `harness`)
    harness: Optional[dict] = None


def sidecar_row(config: TaskConfig, inst: Work, *, is_correct: Optional[bool], predicted_answer: Optional[str],
                correct_answer: Optional[str]) -> QueryMetadata:
    """Build a document's row of the query metadata sidecar."""
    return QueryMetadata(
        query_id=inst.query_id,
        benchmark=inst.metadata.get("benchmark", config.benchmark),
        subject=inst.metadata.get("subject"),
        reasoning_type=inst.metadata.get("reasoning_type"),
        is_correct=None if is_correct is None else bool(is_correct),
        predicted_answer=predicted_answer,
        correct_answer=correct_answer,
        task=config.name,
        doc_id=inst.doc_id,
        cluster=inst.metadata.get("cluster"),
    )


class Task(ABC):
    """What a task family module subclasses.

    It knows where its data is, how a row reads, and how its documents' responses score (`score_docs`).
    """

    #: which record type its documents get (`proctor.outputs.records.RECORD_READERS`)
    kind: ClassVar[TaskKind]
    #: whether the family lays its prompts out as chats when `config.chat` is set
    supports_chat: ClassVar[bool] = False
    #: whether its protocol has a system instruction (`config.system_instruction`)
    supports_system_instruction: ClassVar[bool] = False
    #: OLMES: the system prompt exists in chat format only
    system_instruction_needs_chat: ClassVar[bool] = False
    #: few-shot examples as turns when a run asks for chats without saying (lm-eval's CLI: on)
    default_multiturn: ClassVar[bool] = True
    #: whether `registry.resolve` sets the run's --num-fewshot in its config (lm-eval's tasks apply it
    #: by lm-eval's own rule when they are built)
    applies_num_fewshot: ClassVar[bool] = True

    def chat_format(self, fewshot_as_multiturn: Optional[bool]) -> ChatFormat:
        """Return the chat layout a run's --chat-template gives this task.

        `fewshot_as_multiturn` None: the protocol's default.
        """
        return ChatFormat(self.default_multiturn if fewshot_as_multiturn is None else fewshot_as_multiturn)

    def __init__(self, config: TaskConfig):
        self.config = config

    @abstractmethod
    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Return the spec's full document list, in order (after the spec's own sampling).

        Each doc is a row with its `native_id` and `split` added (`as_docs`).
        """

    # ---- what a family may override ---------------------------------------------

    def description(self) -> str:
        """Text every prompt starts with, before any few-shot examples."""
        return ""

    #: the row field holding the dataset's own id; None: the row's index within its split
    native_id_field: Optional[str] = None

    def native_id(self, row: dict, index: int) -> Any:
        """Return the dataset's own id: the row's `native_id_field`, else its index within its split."""
        return index if self.native_id_field is None else row[self.native_id_field]

    def row_metadata(self, row: dict) -> dict:
        """Extra metadata of a doc (e.g. SocialIQA's reasoning_type), over the defaults."""
        return {}

    # ---- shared protocol ----------------------------------------------------------

    def as_docs(self, rows: list[dict], split: str) -> list[dict]:
        """Turn a split's rows into docs: each with its `native_id` and `split`."""
        return [{**row, "native_id": self.native_id(row, i), "split": split} for i, row in enumerate(rows)]

    def doc_metadata(self, doc: dict) -> dict:
        """Return an instance's metadata: the sidecar columns a task knows, then `row_metadata`."""
        return {"benchmark": self.config.benchmark, "subject": self.config.subject,
                "reasoning_type": None, "split": doc["split"], **self.row_metadata(doc)}

    def numbered_docs(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[NumberedDoc]:
        """Return the first `limit` of `docs()` with their doc ids and query ids (over all docs)."""
        check_limit(limit)  # before any data is read
        return number_docs(self.config.name, self.docs(data_dir), limit)

    @abstractmethod
    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> Sequence[Work]:
        """Instances for the first `limit` docs of `docs()`; query ids computed over all docs.

        Every data error is a UserError raised here (`proctor.evaluate.plan` builds the
        instances before any model loads), naming the spec (`about`).
        """

    @abstractmethod
    def score_docs(self, instances: Sequence[Any], results: Mapping[str, Any]) -> Scored:
        """Build each instance's record and sidecar row, and the task's aggregates.

        They come from the results of the instances' requests (by request key: each family reads its
        own result type, `proctor.requests.Result`). Pure for every family but code execution.
        """

    def item_count(self, data_dir: Optional[Path]) -> Optional[int]:
        """Count the spec's documents as `data_dir` holds them (`proctor tasks`).

        None when it cannot tell, e.g. hellaswag train is not stored locally (the official size is shown then).
        """
        if data_dir is None:
            return None
        try:
            return len(self.docs(data_dir))
        except UserError:
            return None

    def preflight(self, allow_unsafe_exec: bool) -> None:  # noqa: B027  (most tasks refuse nothing)
        """Refuse now, before any model loads, what scoring would refuse after the model work.

        HumanEval: a sandbox that cannot cut off the network, without `allow_unsafe_exec`.
        """
