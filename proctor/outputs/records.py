"""The run record: every field of a run directory, typed and documented in one place.

A run directory (`proctor.write_run`, read back by `proctor.read_run`) holds

- `metrics.json`: `RunRecord.metrics_json()` — `format_version`, the headline score of
  every requested spec, each task's summary (`TaskRecord`), the model, the run's
  options, versions, timings and engine counters;
- `<task>/predictions.jsonl`: one line per document (`ChoiceRecord`, `GenerationRecord`
  or `PerplexityRecord`, by the task's `kind`), OLMES's fields plus `query_id`;
- `query_metadata.parquet` and `.jsonl`: the sidecar (`QueryMetadata`, columns
  `SIDECAR_COLUMNS`), one row per document of every task, the one join target for analysis.

`FORMAT_VERSION` changes whenever any of these shapes does; readers refuse other versions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, Optional, Union

from proctor.engine.stats import EngineStats
from proctor.tasks.config import TaskConfig

#: 2: the first versioned format (metrics.json gained `format_version`, tasks their `kind`,
#: perplexity tasks their sidecar rows)
#: 3: chat format — task_config gained `chat` and `system_instruction`, model_config
#: `olmes_max_length`, `chat_template` and `chat_template_sha256`; requests may hold chats
#: 4: run_config gained `labels`; a metric's summary `stderr_naive`; the sidecar `cluster`
FORMAT_VERSION = 4

JSON = Any                       # a JSON value: None, bool, int, float, str, list, dict
NativeId = Union[int, str]       # the dataset's own id of a document
TaskKind = str                   # "choice", "generation", "perplexity" or "harness" (lm-eval's own tasks)


def finite(value: Optional[float]) -> Optional[float]:
    """JSON has no NaN: a metric that is undefined (one document's stderr) is None."""
    return None if value is None or not math.isfinite(value) else value


# ---- per-document records (predictions.jsonl) -------------------------------------------


@dataclass(frozen=True)
class ChoiceOutput:
    """One answer choice's response and its normalisations (an OLMES `model_output` entry)."""

    sum_logits: float
    num_tokens: int
    num_chars: int                  # characters of the continuation, its leading space included
    num_bytes: int
    is_greedy: bool
    logits_per_token: float
    logits_per_char: float
    bits_per_byte: float
    sum_logits_uncond: Optional[float] = None   # RC: the choice after the "Answer:" context

    def to_dict(self) -> dict[str, JSON]:
        """Return the predictions.jsonl entry, without `sum_logits_uncond` when the spec has none."""
        out = asdict(self)
        if self.sum_logits_uncond is None:
            del out["sum_logits_uncond"]
        return out


@dataclass(frozen=True)
class ChoiceMetrics:
    """A multiple-choice document's predictions and accuracies (its predictions.jsonl `metrics`).

    Each normalisation <n> of a choice's log-likelihood — raw (the sum), per_token, per_char,
    per_byte (divided by the choice's tokens, characters, UTF-8 bytes), uncond (RC: minus its
    log-likelihood after "Answer:") — gives predicted_index_<n> (the argmax, ties to the
    first) and acc_<n> (1.0 when that is the gold choice).
    """

    predicted_index_raw: int
    predicted_index_per_token: int
    predicted_index_per_char: int
    predicted_index_per_byte: int
    correct_choice: int                          # the gold index
    acc_raw: float
    acc_per_token: float
    acc_per_char: float
    acc_per_byte: float
    sum_logits_corr: float                       # the gold choice's log-likelihood, and normalised
    logits_per_token_corr: float
    logits_per_char_corr: float
    bits_per_byte_corr: float
    predicted_index_uncond: Optional[int] = None  # RC specs
    acc_uncond: Optional[float] = None
    predicted_index_norm: Optional[int] = None    # lm-eval specs: lm-eval's acc_norm (per character
    acc_norm: Optional[float] = None              # of the choice text without its leading space)
    mc2: Optional[float] = None                   # TruthfulQA MC2: the true answers' probability mass
    predicted_index_mc2: Optional[int] = None     # MC2: the raw argmax ...
    is_correct: Optional[bool] = None             # ... and whether it is one of the true answers

    #: the order of the keys in predictions.jsonl (absent ones are left out)
    ORDER: ClassVar[tuple[str, ...]] = (
        "predicted_index_raw", "predicted_index_per_token", "predicted_index_per_char", "predicted_index_per_byte",
        "predicted_index_uncond", "correct_choice", "acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte",
        "acc_uncond", "sum_logits_corr", "logits_per_token_corr", "logits_per_char_corr", "bits_per_byte_corr",
        "predicted_index_norm", "acc_norm", "mc2", "predicted_index_mc2", "is_correct")

    def to_dict(self) -> dict[str, JSON]:
        """Return the metrics in `ORDER`, leaving out those this document has not got."""
        return {k: getattr(self, k) for k in self.ORDER if getattr(self, k) is not None}

    def get(self, name: str) -> Optional[float]:
        """Return a metric by name as a float (None when this document has none of that name)."""
        value = getattr(self, name) if name in self.ORDER else None
        return None if value is None else float(value)


assert set(ChoiceMetrics.ORDER) == {f.name for f in fields(ChoiceMetrics)}


@dataclass(frozen=True)
class ChoiceRecord:
    """A multiple-choice document: the model's log-likelihood of every choice."""

    query_id: str
    doc_id: int
    native_id: NativeId
    metrics: ChoiceMetrics
    model_output: tuple[ChoiceOutput, ...]
    label: int                      # the gold choice's index

    def to_dict(self) -> dict[str, JSON]:
        """Return the document's predictions.jsonl line."""
        return {"query_id": self.query_id, "doc_id": self.doc_id, "native_id": self.native_id,
                "metrics": self.metrics.to_dict(), "model_output": [c.to_dict() for c in self.model_output],
                "label": self.label}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "ChoiceRecord":
        """Read a document back from its predictions.jsonl line."""
        return cls(row["query_id"], row["doc_id"], row["native_id"], ChoiceMetrics(**row["metrics"]),
                   tuple(ChoiceOutput(**c) for c in row["model_output"]), row["label"])

    def metric_value(self, metric: str) -> Optional[float]:
        """Return the document's value of `metric` (None when it has none)."""
        return self.metrics.get(metric)

    def prediction(self, metric: str) -> JSON:
        """Return the choice `metric` picked (acc_raw: predicted_index_raw, mc2: predicted_index_mc2, ...)."""
        name = metric.replace("acc_", "predicted_index_", 1) if metric.startswith("acc_") else f"predicted_index_{metric}"
        return self.metrics.get(name)

    def sum_logits(self) -> tuple[float, ...]:
        """Return each choice's log-likelihood, in choice order."""
        return tuple(c.sum_logits for c in self.model_output)


@dataclass(frozen=True)
class SampleOutput:
    """One generated sample and what the task read from it."""

    text: str
    num_tokens: int
    finish_reason: str              # "stop", "eos" or "length"
    #: the task's own reading, written after the three fields above: GSM8K and BBH
    #: `extracted` (and GSM8K `correct`); HumanEval `passed`, `outcome`, `detail`,
    #: `exec_time_s`, `sandbox`
    details: Mapping[str, JSON] = field(default_factory=dict)

    def to_dict(self) -> dict[str, JSON]:
        """Return the sample's `model_output` entry: the three fields, then the task's `details`."""
        return {"text": self.text, "num_tokens": self.num_tokens, "finish_reason": self.finish_reason,
                **self.details}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "SampleOutput":
        """Read a sample back; every key but the three fields goes to `details`."""
        details = {k: v for k, v in row.items() if k not in ("text", "num_tokens", "finish_reason")}
        return cls(row["text"], row["num_tokens"], row["finish_reason"], details)


@dataclass(frozen=True)
class GenerationRecord:
    """A generation document: its samples and their per-document metrics."""

    query_id: str
    doc_id: int
    native_id: NativeId
    metrics: Mapping[str, float]    # the task's metric names (exact_match, pass@k, maj@k, ...)
    model_output: tuple[SampleOutput, ...]
    label: str                      # the gold answer as shown

    def to_dict(self) -> dict[str, JSON]:
        """Return the document's predictions.jsonl line."""
        return {"query_id": self.query_id, "doc_id": self.doc_id, "native_id": self.native_id,
                "metrics": dict(self.metrics), "model_output": [s.to_dict() for s in self.model_output],
                "label": self.label}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "GenerationRecord":
        """Read a document back from its predictions.jsonl line."""
        return cls(row["query_id"], row["doc_id"], row["native_id"], dict(row["metrics"]),
                   tuple(SampleOutput.from_dict(s) for s in row["model_output"]), row["label"])

    def metric_value(self, metric: str) -> Optional[float]:
        """Return the document's value of `metric` (None when it has none)."""
        return self.metrics.get(metric)

    def prediction(self, metric: str) -> JSON:
        """Return the generated texts, whatever the metric."""
        return tuple(s.text for s in self.model_output)

    def sum_logits(self) -> tuple[float, ...]:
        """Return no log-likelihoods: a generation document has none."""
        return ()


@dataclass(frozen=True)
class DocumentMetrics:
    """A perplexity document's totals."""

    nll: float                      # nats, = -sum_logits
    sum_logits: float
    num_tokens: int                 # targets scored
    num_bytes: int                  # UTF-8 bytes of the text
    bits_per_byte: Optional[float]  # None when the text yields no tokens


@dataclass(frozen=True)
class RollingOutput:
    """The rolling log-likelihood of a whole document."""

    sum_logits: float
    num_tokens: int
    is_greedy: bool                 # every target token was the argmax


@dataclass(frozen=True)
class PerplexityRecord:
    """A corpus document scored as a whole; it has no gold answer (`label` null)."""

    query_id: str
    doc_id: int
    native_id: NativeId
    metrics: DocumentMetrics
    model_output: tuple[RollingOutput, ...]

    def to_dict(self) -> dict[str, JSON]:
        """Return the document's predictions.jsonl line (its `label` null)."""
        return {"query_id": self.query_id, "doc_id": self.doc_id, "native_id": self.native_id,
                "metrics": asdict(self.metrics), "model_output": [asdict(o) for o in self.model_output],
                "label": None}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "PerplexityRecord":
        """Read a document back from its predictions.jsonl line."""
        return cls(row["query_id"], row["doc_id"], row["native_id"], DocumentMetrics(**row["metrics"]),
                   tuple(RollingOutput(**o) for o in row["model_output"]))

    def metric_value(self, metric: str) -> Optional[float]:
        """Return the document's own value of a corpus metric (bpb: its bits per byte); None for others."""
        m = self.metrics
        per_doc = {"bpb": m.bits_per_byte, "ce_loss": m.nll / m.num_tokens if m.num_tokens else None}
        return per_doc.get(metric)

    def prediction(self, metric: str) -> JSON:
        """Return the document's total log-likelihood and its number of scored tokens, whatever the metric."""
        return (self.metrics.sum_logits, self.metrics.num_tokens)

    def sum_logits(self) -> tuple[float, ...]:
        """Return the log-likelihood of each rolling output."""
        return tuple(o.sum_logits for o in self.model_output)


@dataclass(frozen=True)
class HarnessRecord:
    """A document of an lm-evaluation-harness task run through the bridge (`lm_eval:<task>` specs).

    `metrics` are what the task's own `process_results` returned for it, one entry per
    (metric, filter): keyed by the metric's name under the filter "none", else by lm-eval's
    own `"<metric>,<filter>"`. `model_output` has one entry per lm-eval request of the
    document, in request order: `{"sum_logits", "num_tokens", "is_greedy"}` for a
    log-likelihood, `{"samples": [{"text", "num_tokens", "finish_reason"}, ...]}` for a
    generation. `filtered` holds, per filter, each request's response after the task's
    filters (what `process_results` read); `target` is the task's `doc_to_target`.
    """

    query_id: str
    doc_id: int
    native_id: NativeId
    metrics: Mapping[str, JSON]
    model_output: tuple[Mapping[str, JSON], ...]
    filtered: Mapping[str, JSON]
    target: JSON

    def to_dict(self) -> dict[str, JSON]:
        """Return the document's predictions.jsonl line."""
        return {"query_id": self.query_id, "doc_id": self.doc_id, "native_id": self.native_id,
                "metrics": dict(self.metrics), "model_output": [dict(o) for o in self.model_output],
                "filtered": dict(self.filtered), "target": self.target}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "HarnessRecord":
        """Read a document back from its predictions.jsonl line."""
        return cls(row["query_id"], row["doc_id"], row["native_id"], dict(row["metrics"]),
                   tuple(dict(o) for o in row["model_output"]), dict(row["filtered"]), row["target"])

    def metric_value(self, metric: str) -> Optional[float]:
        """Return the document's value of `metric` when it is a number (None otherwise)."""
        value = self.metrics.get(metric)
        return float(value) if isinstance(value, (int, float)) else None

    def prediction(self, metric: str) -> JSON:
        """Return what the model answered under the metric's filter: the choice picked, or the filtered text."""
        logits = self.sum_logits()
        if logits:
            return logits.index(max(logits))
        _, _, filter_name = metric.partition(",")
        answer = self.filtered.get(filter_name or "none")
        return answer[0] if isinstance(answer, list) and answer else answer

    def sum_logits(self) -> tuple[float, ...]:
        """Return each log-likelihood request's sum, in request order (empty for generation)."""
        return tuple(float(o["sum_logits"]) for o in self.model_output if "sum_logits" in o)


Record = Union[ChoiceRecord, GenerationRecord, PerplexityRecord, HarnessRecord]
#: how a predictions.jsonl line of each kind of task reads back
RECORD_READERS: dict[TaskKind, Callable[[Mapping[str, JSON]], Record]] = {
    "choice": ChoiceRecord.from_dict, "generation": GenerationRecord.from_dict,
    "perplexity": PerplexityRecord.from_dict, "harness": HarnessRecord.from_dict}


# ---- the sidecar (query_metadata.*) ------------------------------------------------------


@dataclass(frozen=True)
class QueryMetadata:
    """One row of the query metadata sidecar: the single join target for analysis."""

    query_id: str
    benchmark: str                  # socialiqa, mmlu_stem, mmlu_social_science, arc_easy, c4_en, ...
    subject: Optional[str]          # MMLU subject; None elsewhere
    reasoning_type: Optional[str]   # SocialIQA ATOMIC relation; None elsewhere
    is_correct: Optional[bool]      # by the task's primary metric; None for perplexity documents
    predicted_answer: Optional[str]  # the predicted choice as shown ("B", or the answer text for RC)
    correct_answer: Optional[str]   # None for perplexity documents
    task: str                       # the task spec that produced the query
    doc_id: int
    #: the group the task declares its documents dependent in (a shared passage: SocialIQA's
    #: context, a task file's `cluster` field); None: the document stands alone
    cluster: Optional[str] = None

    def to_dict(self) -> dict[str, JSON]:
        """Return the row as a dict of the sidecar's columns."""
        return asdict(self)


#: the sidecar's columns and their Arrow types, in order
SIDECAR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("query_id", "string"), ("benchmark", "string"), ("subject", "string"), ("reasoning_type", "string"),
    ("is_correct", "bool"), ("predicted_answer", "string"), ("correct_answer", "string"),
    ("task", "string"), ("doc_id", "int64"), ("cluster", "string"),
)
assert tuple(name for name, _ in SIDECAR_COLUMNS) == tuple(f.name for f in fields(QueryMetadata))


# ---- per-task summary (metrics.json `tasks`) ---------------------------------------------


@dataclass(frozen=True)
class MetricSummary:
    """One metric of a task over its documents: the mean and its standard error."""

    mean: Optional[float]
    stderr: Optional[float]         # over documents; None under two documents
    #: pass@1 of n samples per question: the error if every sample were independent (too small:
    #: `stderr` counts each question's samples as one cluster); None elsewhere
    stderr_naive: Optional[float] = None


@dataclass(frozen=True)
class GenerationSettings:
    """What a generation task asks the model for, and how its code ran if it runs any."""

    max_gen_toks: int
    stop: tuple[str, ...]
    do_sample: bool
    temperature: float
    top_p: float
    repeats: int
    sandbox: Optional[str] = None                     # HumanEval: how the sandbox isolates, e.g. "namespaces+uid-drop+rlimits"
    allow_unsafe_exec: Optional[bool] = None          # HumanEval: --allow-unsafe-exec

    def to_dict(self) -> dict[str, JSON]:
        """Return the settings for metrics.json, leaving out the sandbox fields where they are None."""
        out = {**asdict(self), "stop": list(self.stop)}
        return {k: v for k, v in out.items() if k not in ("sandbox", "allow_unsafe_exec") or v is not None}

    @classmethod
    def from_dict(cls, row: Mapping[str, JSON]) -> "GenerationSettings":
        """Read the settings back from metrics.json."""
        return cls(**{**row, "stop": tuple(row["stop"])})


@dataclass(frozen=True)
class PerplexityTotals:
    """The corpus totals behind a perplexity task's ratios, for exact comparisons."""

    nll: float
    num_tokens: int
    num_bytes: int
    num_docs_scored: int


@dataclass(frozen=True)
class TaskRecord:
    """One scored task: its protocol, aggregates and per-document records."""

    name: str                       # the task spec
    kind: TaskKind
    config: TaskConfig
    num_instances: int
    primary_metric: str
    metrics: Mapping[str, MetricSummary]
    processing_time: float          # seconds: the task's share of model time plus its scoring
    warnings: tuple[str, ...] = ()
    generation: Optional[GenerationSettings] = None
    perplexity: Optional[PerplexityTotals] = None
    records: tuple[Record, ...] = ()
    sidecar: tuple[QueryMetadata, ...] = ()
    #: lm-eval tasks (kind "harness"): `lm_eval_version`, `task`, `config` (the task's YAML as
    #: lm-eval expands it) and `config_sha256`; for code_eval tasks `sandbox` and `allow_unsafe_exec`
    harness: Optional[Mapping[str, JSON]] = None

    @property
    def primary_score(self) -> Optional[float]:
        """The mean of the task's primary metric."""
        return self.metrics[self.primary_metric].mean

    def summary(self) -> dict[str, JSON]:
        """Return the task's entry in metrics.json."""
        out: dict[str, JSON] = {
            "kind": self.kind,
            "task_config": asdict(self.config),
            "num_instances": self.num_instances,
            "primary_metric": self.primary_metric,
            "primary_score": self.primary_score,
            "metrics": {k: asdict(m) for k, m in self.metrics.items()},
            "processing_time": self.processing_time,
            "warnings": list(self.warnings),
        }
        if self.generation is not None:
            out["generation"] = self.generation.to_dict()
        if self.perplexity is not None:
            out["perplexity"] = asdict(self.perplexity)
        if self.harness is not None:
            out["harness"] = dict(self.harness)
        return out

    @classmethod
    def from_summary(cls, name: str, entry: Mapping[str, JSON], records: tuple[Record, ...],
                     sidecar: tuple[QueryMetadata, ...]) -> "TaskRecord":
        """Rebuild a task from its metrics.json entry and its records and sidecar rows, read separately."""
        generation, perplexity = entry.get("generation"), entry.get("perplexity")
        return cls(
            name=name, kind=entry["kind"], config=TaskConfig.from_dict(entry["task_config"]),
            num_instances=entry["num_instances"], primary_metric=entry["primary_metric"],
            metrics={k: MetricSummary(**m) for k, m in entry["metrics"].items()},
            processing_time=entry["processing_time"], warnings=tuple(entry["warnings"]),
            generation=None if generation is None else GenerationSettings.from_dict(generation),
            perplexity=None if perplexity is None else PerplexityTotals(**perplexity),
            records=records, sidecar=sidecar, harness=entry.get("harness"))


# ---- headline scores (metrics.json `primary_scores`) -------------------------------------

SUITE_AGGREGATIONS = ("macro", "micro", "member_mean", "rrgs", "size_weighted")


@dataclass(frozen=True)
class SpecScore:
    """The headline entry of a requested spec.

    For a task, its primary metric; for a suite, its declared aggregation (`score`) with its
    other aggregations and its members' scores.
    """

    metric: str                     # the primary metric ("mixed" for a suite of several)
    score: Optional[float]          # None: a suite without an overall score
    stderr: Optional[float]
    num_instances: int
    aggregation: Optional[str] = None    # suites (and members that are suites): which aggregation `score` is
    #: suites: each declared aggregation and its `<name>_stderr` (rrgs: `rrgs_subjects`)
    aggregations: Mapping[str, Optional[float]] = field(default_factory=dict)
    num_tasks: Optional[int] = None      # suites: leaf tasks
    members: Mapping[str, "SpecScore"] = field(default_factory=dict)   # suites: each direct member
    is_suite: bool = False

    def to_dict(self) -> dict[str, JSON]:
        """Return the spec's `primary_scores` entry; a suite's lists its aggregations and members."""
        if not self.is_suite:
            return {"metric": self.metric, "score": self.score, "stderr": self.stderr,
                    "num_instances": self.num_instances}
        return {"metric": self.metric, "aggregation": self.aggregation, **self.aggregations,
                "score": self.score, "stderr": self.stderr, "num_instances": self.num_instances,
                "num_tasks": self.num_tasks,
                "members": {name: m.member_dict() for name, m in self.members.items()}}

    def member_dict(self) -> dict[str, JSON]:
        """Return the short entry a suite gives this spec among its `members`."""
        return {"metric": self.metric, "aggregation": self.aggregation, "score": self.score,
                "stderr": self.stderr, "num_instances": self.num_instances}

    @classmethod
    def from_dict(cls, entry: Mapping[str, JSON]) -> "SpecScore":
        """Read an entry back; one with `members` is a suite, and non-finite scores become None."""
        if "members" not in entry:
            return cls(entry["metric"], finite(entry["score"]), finite(entry["stderr"]), entry["num_instances"],
                       aggregation=entry.get("aggregation"))
        known = {"metric", "aggregation", "score", "stderr", "num_instances", "num_tasks", "members"}
        return cls(entry["metric"], finite(entry["score"]), finite(entry["stderr"]), entry["num_instances"],
                   aggregation=entry["aggregation"],
                   aggregations={k: finite(v) for k, v in entry.items() if k not in known},
                   num_tasks=entry["num_tasks"],
                   members={k: cls.from_dict(m) for k, m in entry["members"].items()}, is_suite=True)


# ---- the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRecord:
    """The model and how it ran (metrics.json `model_config`)."""

    backend: str                    # hf, llamacpp, openai, vllm
    model: str                      # as given: hub id, path, alias, or "<loaded ClassName>"
    fingerprint: str                # the cache's identity of weights, dtype, device, max_length
    dtype: str
    device: str
    max_length: int                 # the backend's context window (lm-eval-format specs use it)
    batch_size: Union[int, str]
    deterministic: bool
    seed: int
    olmes_max_length: Optional[int] = None   # OLMES specs' window, where shorter than max_length
    chat_template: Optional[str] = None      # chats rendered with: "tokenizer" or a file's path
    chat_template_sha256: Optional[str] = None   # its digest (first 16 hex digits)
    backend_config: Mapping[str, JSON] = field(default_factory=dict)   # the backend's own settings

    def to_dict(self) -> dict[str, JSON]:
        """Return `model_config`: the backend, its own settings, then the fields (which win a name clash)."""
        out = asdict(self)
        del out["backend_config"]
        return {"backend": self.backend, **self.backend_config, **out}

    @classmethod
    def from_dict(cls, entry: Mapping[str, JSON]) -> "ModelRecord":
        """Read `model_config` back; keys that are not fields go to `backend_config`."""
        names = {f.name for f in fields(cls)} - {"backend_config"}
        return cls(**{k: entry[k] for k in names},
                   backend_config={k: v for k, v in entry.items() if k not in names})


@dataclass(frozen=True)
class RunConfig:
    """What the run was asked (metrics.json `run_config`)."""

    tasks: tuple[str, ...]          # the specs as requested
    limit: Optional[int]            # --limit
    data_dir: Optional[str]
    world_size: int = 1
    include: tuple[str, ...] = ()   # task files and modules loaded with --include
    labels: Mapping[str, str] = field(default_factory=dict)   # --label KEY=VALUE, e.g. {"step": "1000"}


@dataclass(frozen=True)
class Timing:
    """Where the run's time went (metrics.json `timing`)."""

    started: str                    # ISO 8601, UTC
    finished: str
    total_seconds: float
    data_seconds: float             # reading data and building every request
    model_load_seconds: float
    evaluation_seconds: float
    #: from the start to the first scored batch stored (None: everything came from the cache)
    time_to_first_batch_seconds: Optional[float]
    #: `proctor run` only: from the process's start to the first batch handed to the model:
    #: imports, data, model load and planning (None: a library call, or nothing ran on the model)
    start_to_first_model_call_seconds: Optional[float] = None


@dataclass(frozen=True)
class EngineRecord:
    """The engine's counters over all ranks, and the throughput they give."""

    stats: EngineStats
    tokens_per_second: Optional[float]
    generated_tokens_per_second: Optional[float]

    def to_dict(self) -> dict[str, JSON]:
        """Return metrics.json `engine`: the counters and the two throughputs, in one flat dict."""
        return {**asdict(self.stats), "tokens_per_second": self.tokens_per_second,
                "generated_tokens_per_second": self.generated_tokens_per_second}

    @classmethod
    def from_dict(cls, entry: Mapping[str, JSON]) -> "EngineRecord":
        """Read metrics.json `engine` back."""
        names = {f.name for f in fields(EngineStats)}
        return cls(EngineStats(**{k: entry[k] for k in names}), entry["tokens_per_second"],
                   entry["generated_tokens_per_second"])


@dataclass(frozen=True)
class RunRecord:
    """A whole run: what `proctor.evaluate` returns, `write` stores and `proctor.read_run` reads."""

    primary_scores: Mapping[str, SpecScore]    # each requested spec, in request order
    tasks: Mapping[str, TaskRecord]            # each leaf task, in first-requested order
    model: ModelRecord
    run_config: RunConfig
    versions: Mapping[str, Optional[str]]      # python, proctor, torch, transformers, ...
    git: Mapping[str, JSON]                    # the commit of proctor's code and whether it was dirty
    command: tuple[str, ...]                   # the command line (credentials redacted); () from Python
    warnings: tuple[str, ...]
    timing: Timing
    engine: EngineRecord
    format_version: int = FORMAT_VERSION

    @property
    def scores(self) -> dict[str, Optional[float]]:
        """The headline score of each requested spec."""
        return {spec: s.score for spec, s in self.primary_scores.items()}

    def metrics_json(self) -> dict[str, JSON]:
        """Return the contents of metrics.json."""
        return {
            "format_version": self.format_version,
            "primary_scores": {k: s.to_dict() for k, s in self.primary_scores.items()},
            "tasks": {name: t.summary() for name, t in self.tasks.items()},
            "model_config": self.model.to_dict(),
            "run_config": {**asdict(self.run_config), "tasks": list(self.run_config.tasks),
                           "include": list(self.run_config.include), "labels": dict(self.run_config.labels)},
            "versions": dict(self.versions),
            "git": dict(self.git),
            "command": list(self.command),
            "warnings": list(self.warnings),
            "timing": asdict(self.timing),
            "engine": self.engine.to_dict(),
        }
