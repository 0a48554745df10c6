"""What the HTML report shows, computed from the records of its runs.

These are pure functions over `RunRecord`, `TaskRecord` and `QueryMetadata` that write no
HTML and draw no chart: each run's provenance rows; its clustered error per task; accuracy
per subject / reasoning type / benchmark within a task family; the order of a series of runs
for score curves; the reliability bins of choice tasks; the finish reasons and answer
extraction of generation tasks; the paired comparison's rows; and the item browser's data
(`item_data`), which `page.js` reads. `proctor.report.html` lays all of it out.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from proctor.metrics.clusters import sample_correct, unit_values
from proctor.metrics.stats import Z95, ClusteredMean, clustered_mean, proportion_interval, wilson_interval
from proctor.outputs.records import (
    ChoiceRecord,
    GenerationRecord,
    HarnessRecord,
    PerplexityRecord,
    QueryMetadata,
    Record,
    RunRecord,
    SampleOutput,
    SpecScore,
    TaskRecord,
    finite,
)
from proctor.outputs.requests_file import Prompt

if TYPE_CHECKING:
    from proctor.compare import TaskComparison

JSON = Any
PAGE_SIZE = 50              # items per page in the browser (page.js reads it from the data)
CALIBRATION_BINS = 10
NOT_SAVED = "prompt not saved: run with --save-requests"


# ---- the runs' tasks -------------------------------------------------------------------------


def task_names(runs: Sequence[RunRecord]) -> list[str]:
    """Every task of every run, in first-seen order."""
    return list(dict.fromkeys(name for run in runs for name in run.tasks))


def first_task(runs: Sequence[RunRecord], name: str) -> TaskRecord:
    """Task `name` of the first run that has it."""
    return next(run.tasks[name] for run in runs if name in run.tasks)


def labels_of(run: RunRecord) -> Mapping[str, str]:
    """Return the run's labels (`--label key=value`); {} where it has none."""
    return getattr(run.run_config, "labels", {}) or {}


def _clip(text: str, most: int = 60) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    total = sum(weights)
    return [w / total for w in weights]


# ---- provenance ------------------------------------------------------------------------------


def provenance_rows(run: RunRecord, name: str) -> list[tuple[str, str]]:
    """Describe what the run was, as (what, text) rows: model, settings, versions, command, timing."""
    m, cfg, t = run.model, run.run_config, run.timing
    commit = run.git.get("commit")
    dirty = " (uncommitted changes)" if run.git.get("dirty") else ""
    labels = ", ".join(f"{k}={v}" for k, v in labels_of(run).items())
    others = ", ".join(f"{k} {v}" for k, v in run.versions.items() if k != "proctor" and v)
    throughput = run.engine.tokens_per_second
    stats = run.engine.stats
    if stats.tokens_run == 0 and stats.gen_tokens == 0 and (stats.cached or stats.gen_cached):
        shown_rate = "— (every result came from the result cache)"
    else:
        shown_rate = "—" if throughput is None else f"{throughput:,.0f} tokens/s"
    return [
        ("run directory", name),
        ("model", m.model),
        ("fingerprint", m.fingerprint),
        ("backend", m.backend),
        ("dtype", m.dtype),
        ("device", m.device),
        ("max length", str(m.max_length)),
        ("chat template", m.chat_template or "—"),
        ("specs", ", ".join(cfg.tasks)),
        ("labels", labels or "—"),
        ("limit", "—" if cfg.limit is None else str(cfg.limit)),
        ("seed", str(m.seed)),
        ("batch size", str(m.batch_size)),
        ("world size", str(cfg.world_size)),
        ("proctor", run.versions.get("proctor") or "—"),
        ("git commit", f"{commit or '—'}{dirty}"),
        ("libraries", others or "—"),
        ("command", " ".join(run.command) or "(Python API)"),
        ("started", t.started),
        ("total time", f"{t.total_seconds:.1f} s (model load {t.model_load_seconds:.1f} s, "
                       f"evaluation {t.evaluation_seconds:.1f} s)"),
        ("throughput", shown_rate),
        ("warnings", str(len(run.warnings))),
    ]


# ---- headline scores and score curves --------------------------------------------------------

#: the aggregations of a suite that are means of their tasks' values (a proportion's mean is one)
MEAN_AGGREGATIONS = ("macro", "micro", "size_weighted", "member_mean")


@dataclass(frozen=True)
class TaskError(ClusteredMean):
    """A task's primary metric with its errors, and whether every unit's value lies in [0, 1]."""

    bounded: bool = False      # every value in [0, 1] (a proportion's, or pass@1's): Wilson intervals
    binary: bool = False       # every value 0 or 1

    def interval(self, clustered: bool) -> tuple[float, float]:
        """Return the 95% interval of the mean from the clustered or the naive error.

        A mean of values in [0, 1] gets a Wilson score interval, which stays within [0, 1]: the
        ordinary one for independent 0/1 units, else at the effective sample size
        (`proportion_interval`); any other metric mean ± 1.96 standard errors.
        """
        stderr = self.stderr_clustered if clustered else self.stderr_naive
        if not self.bounded:
            return self.mean - Z95 * stderr, self.mean + Z95 * stderr
        if self.binary and (not clustered or self.clusters == self.n):
            return wilson_interval(round(self.mean * self.n), self.n)
        return proportion_interval(self.mean, stderr, self.clusters if clustered else self.n)


#: (run index, task name) -> the task's primary metric with clustered and naive errors;
#: None for a corpus metric (a score without per-document values)
ErrorTable = dict[tuple[int, str], Optional[TaskError]]


def task_error(task: TaskRecord, cluster_by: Optional[str] = None) -> Optional[TaskError]:
    """Return `proctor.metrics.clusters.task_error` with whether the metric is a proportion."""
    if task.kind == "perplexity":
        return None
    values, keys = unit_values(task, cluster_by)
    if not values:
        return None
    found = clustered_mean(values, keys)
    return TaskError(found.mean, found.stderr_naive, found.stderr_clustered, found.n, found.clusters,
                     bounded=all(0.0 <= v <= 1.0 for v in values), binary=all(v in (0.0, 1.0) for v in values))


def task_errors(runs: Sequence[RunRecord], cluster_by: Optional[str]) -> ErrorTable:
    """Compute `task_error` for every task of every run, clustered by `cluster_by` where given."""
    return {(i, name): task_error(task, cluster_by) for i, run in enumerate(runs) for name, task in run.tasks.items()}


def spec_tasks(run: RunRecord, spec: str, score: SpecScore) -> Optional[list[str]]:
    """Return the tasks of `run` whose values a spec's score is a mean of; None: not a mean (RRGS, best of)."""
    if not score.is_suite:
        return [spec] if spec in run.tasks else None
    if score.aggregation not in MEAN_AGGREGATIONS or not score.members:
        return None
    out: list[str] = []
    for name, member in score.members.items():
        found = spec_tasks(run, name, member)
        if found is None:
            return None
        out.extend(found)
    return out


def spec_interval(run_index: int, run: RunRecord, spec: str, score: SpecScore,
                  errors: ErrorTable) -> tuple[float, float]:
    """Return the 95% interval of a spec's score from its recorded standard error.

    A mean of values in [0, 1] (each of its tasks' `TaskError.bounded`) gets the Wilson
    interval at its effective sample size (`proportion_interval`); any other score ± 1.96
    standard errors; (nan, nan) without a score or an error.
    """
    value, stderr = finite(score.score), finite(score.stderr)
    if value is None or stderr is None:
        return math.nan, math.nan
    tasks = spec_tasks(run, spec, score)
    found = [errors.get((run_index, t)) for t in tasks or ()]
    if tasks and all(e is not None and e.bounded for e in found):
        return proportion_interval(value, stderr, score.num_instances)
    return value - Z95 * stderr, value + Z95 * stderr


def run_step(run: RunRecord) -> Optional[float]:
    """Return the run's `step` label as a finite number, else None."""
    try:
        value = float(labels_of(run)["step"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def curve_order(runs: Sequence[RunRecord]) -> Optional[tuple[list[int], Optional[list[float]]]]:
    """Order the runs as score curves draw them.

    Their indices come ordered by `step` where every run has one (with those steps), else in
    the order given (steps None). None: no curves (fewer than three runs, or two without steps).
    """
    steps = [run_step(run) for run in runs]
    by_step = all(s is not None for s in steps)
    if len(runs) < 3 and not (len(runs) == 2 and by_step):
        return None
    if not by_step:
        return list(range(len(runs))), None
    order = sorted(range(len(runs)), key=lambda i: steps[i] or 0.0)
    return order, [s for s in (steps[i] for i in order) if s is not None]


# ---- breakdowns ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proportion:
    """A proportion: `correct` of `n` items, with its accuracy and Wilson 95% interval."""

    correct: int
    n: int

    @property
    def accuracy(self) -> float:
        """The fraction of the items that are correct."""
        return self.correct / self.n

    def interval(self) -> tuple[float, float]:
        """Return the accuracy's Wilson 95% interval ((nan, nan) for no items)."""
        return wilson_interval(self.correct, self.n)


@dataclass(frozen=True)
class GroupAccuracy(Proportion):
    """The accuracy of one group of a sidecar column (a subject, a reasoning type, ...)."""

    group: str = ""


def task_family(task: TaskRecord) -> str:
    """Name the family of tasks whose items compare side by side with `task`'s.

    It is the benchmark's root and the spec's format, e.g. every `mmlu_<subject>:mc::olmes` is
    `mmlu:mc::olmes`, every `bbh_<task>:cot::tulu` `bbh:cot::tulu`.
    """
    root = task.config.benchmark.split("_")[0]
    return root + (task.name[task.name.index(":"):] if ":" in task.name else "")


def breakdown_column(rows: Sequence[QueryMetadata]) -> Optional[str]:
    """Pick the column to break `rows` down by.

    That is the first sidecar column with more than one value among `rows`, else `task` where
    the rows come from several tasks; None: nothing to break down.
    """
    for column in ("subject", "reasoning_type", "benchmark", "task"):
        if len({getattr(r, column) for r in rows if getattr(r, column) is not None}) > 1:
            return column
    return None


def group_accuracies(rows: Iterable[QueryMetadata], column: str) -> dict[str, GroupAccuracy]:
    """Tally the accuracy of each value of `column`, by value; rows without one, or without a verdict, are skipped."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        key = getattr(row, column)
        if row.is_correct is None or key is None:
            continue
        tally = counts.setdefault(str(key), [0, 0])
        tally[0] += int(row.is_correct)
        tally[1] += 1
    return {k: GroupAccuracy(c, n, group=k) for k, (c, n) in sorted(counts.items())}


def task_families(runs: Sequence[RunRecord]) -> dict[str, list[str]]:
    """Map each task family to its tasks (choice and generation tasks; perplexity has nothing right or wrong)."""
    out: dict[str, list[str]] = {}
    for name in task_names(runs):
        task = first_task(runs, name)
        if task.kind != "perplexity":
            out.setdefault(task_family(task), []).append(name)
    return out


@dataclass(frozen=True)
class Breakdown:
    """One task family's accuracy per group of a sidecar column, in each run."""

    family: str
    column: str
    per_run: tuple[Mapping[str, GroupAccuracy], ...]


def breakdowns(runs: Sequence[RunRecord]) -> list[Breakdown]:
    """Every task family whose items differ in a sidecar column (`breakdown_column`)."""
    out = []
    for family, names in task_families(runs).items():
        rows_per_run = [[row for n in names if n in run.tasks for row in run.tasks[n].sidecar] for run in runs]
        column = breakdown_column([row for rows in rows_per_run for row in rows])
        if column is None:
            continue
        out.append(Breakdown(family, column, tuple(group_accuracies(rows, column) for rows in rows_per_run)))
    return out


# ---- two runs: the paired comparison -----------------------------------------------------------


def paired_rows(comparison: Sequence["TaskComparison"]) -> list[dict[str, JSON]]:
    """Return the comparison's rows (`TaskComparison.to_dict`), suites first."""
    return sorted((c.to_dict() for c in comparison), key=lambda r: r["kind"] != "suite")


# ---- calibration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReliabilityBin(Proportion):
    """One confidence bin of a reliability diagram: its items' accuracy and mean confidence."""

    confidence: float = 0.0  # the bin's mean confidence


def confidences(task: TaskRecord) -> list[tuple[float, bool]]:
    """Return, per choice document, the model's confidence in its pick and whether the pick is right.

    The confidence is its probability of the most likely choice (the softmax of the choices'
    summed log-probabilities); the pick is right when that choice is the gold one (acc_raw).

    The raw pick rather than the primary metric's: a per-character pick (RC specs) may be a
    choice the model finds unlikely, and its softmax probability says nothing of its confidence.
    """
    out = []
    for record in task.records:
        if isinstance(record, ChoiceRecord) and len(record.model_output) > 1:
            probs = _softmax(record.sum_logits())
            best = max(range(len(probs)), key=probs.__getitem__)
            out.append((probs[best], best == record.label))
    return out


def reliability(points: Sequence[tuple[float, bool]], bins: int = CALIBRATION_BINS) -> tuple[list[ReliabilityBin], float]:
    """Equal-width confidence bins (the non-empty ones) and the expected calibration error."""
    sums = [0.0] * bins
    correct, counts = [0] * bins, [0] * bins
    for p, right in points:
        b = min(int(p * bins), bins - 1)
        sums[b] += p
        correct[b] += right
        counts[b] += 1
    found = [ReliabilityBin(correct[b], counts[b], confidence=sums[b] / counts[b]) for b in range(bins) if counts[b]]
    total = sum(counts)
    ece = sum(abs(r.correct / r.n - r.confidence) * r.n for r in found) / total if total else math.nan
    return found, ece


def calibration_points(runs: Sequence[RunRecord]) -> dict[str, list[list[tuple[float, bool]]]]:
    """Map each choice task to each run's `confidences`.

    Where there are several tasks, "all choice tasks" together come first; tasks without a
    point in any run are left out.
    """
    names = [n for n in task_names(runs) if first_task(runs, n).kind == "choice"]
    per_task = {n: [confidences(run.tasks[n]) if n in run.tasks else [] for run in runs] for n in names}
    per_task = {n: points for n, points in per_task.items() if any(points)}
    options: dict[str, list[list[tuple[float, bool]]]] = {}
    if len(per_task) > 1:
        options["all choice tasks"] = [[p for pts in per_task.values() for p in pts[i]] for i in range(len(runs))]
    options.update(per_task)
    return options


# ---- generation diagnostics ----------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationCounts:
    """A generation task's samples counted by finish reason, answer extraction and sandbox outcome."""

    samples: int
    finish: Mapping[str, int]           # finish reason -> samples
    extracts: bool                      # whether the task reads an answer out of its samples
    extraction_failed: int              # samples without an answer extracted
    failed_at_length: int               # ... of them cut off at max_gen_toks
    outcomes: Mapping[str, int]         # sandbox outcome -> samples (HumanEval)


def generation_counts(task: TaskRecord) -> GenerationCounts:
    """Count a generation task's samples (see `GenerationCounts`)."""
    samples = [s for r in task.records if isinstance(r, GenerationRecord) for s in r.model_output]
    extracts = any("extracted" in s.details for s in samples)
    failed = [s for s in samples if extracts and s.details.get("extracted") in (None, "")]
    return GenerationCounts(
        samples=len(samples), finish=Counter(s.finish_reason for s in samples), extracts=extracts,
        extraction_failed=len(failed), failed_at_length=sum(s.finish_reason == "length" for s in failed),
        outcomes=Counter(str(s.details["outcome"]) for s in samples if "outcome" in s.details))


def finish_reasons(counts: Iterable[GenerationCounts]) -> list[str]:
    """List the finish reasons: stop, eos, length, then any other found in `counts`."""
    return sorted({r for c in counts for r in c.finish} | {"stop", "eos", "length"},
                  key=lambda r: (["stop", "eos", "length"] + [r]).index(r))


# ---- the items -----------------------------------------------------------------------------------


def shared_prefix(contexts: Sequence[str], least: int = 80) -> str:
    """Return the lines every prompt of a task begins with (its instruction and few-shot examples).

    The browser stores them once rather than once per item; "" when shorter than `least` characters.
    """
    if len(contexts) < 2:
        return ""
    common = os.path.commonprefix(list(contexts))
    common = common[:common.rfind("\n") + 1]
    return common if len(common) >= least else ""


def _sample_json(sample: SampleOutput) -> dict[str, JSON]:
    out: dict[str, JSON] = {"text": sample.text, "f": sample.finish_reason, "n": sample.num_tokens}
    if "extracted" in sample.details:
        out["e"] = sample.details["extracted"]
    if "outcome" in sample.details:
        out["oc"] = str(sample.details["outcome"])
    right = sample_correct(sample)
    if right is not None:
        out["ok"] = bool(right)
    return out


def _run_entry(record: Optional[Record], metric: str, meta: Optional[QueryMetadata]) -> Optional[dict[str, JSON]]:
    """Return one run's view of an item.

    That is its score `s`, the answer shown in the row `a`, and what its detail needs
    (choice log-probabilities `lp` and pick `p`, or samples `o`, or totals).
    """
    if record is None:
        return None
    score = finite(record.metric_value(metric))
    if isinstance(record, ChoiceRecord):
        picked = record.prediction(metric)
        pick = None if picked is None else int(picked)
        answer = meta.predicted_answer if meta is not None and meta.predicted_answer is not None else pick
        return {"s": score, "a": "" if answer is None else str(answer), "p": pick,
                "lp": [finite(round(v, 4)) for v in record.sum_logits()]}
    if isinstance(record, GenerationRecord):
        samples = [_sample_json(s) for s in record.model_output]
        if len(samples) == 1:
            first = samples[0]
            shown = first.get("e") if "e" in first else first["text"].strip().split("\n")[0]
            answer = "" if shown is None else _clip(str(shown))
        else:
            answer = f"{len(samples)} samples"
        return {"s": score, "a": answer, "o": samples}
    if isinstance(record, HarnessRecord):
        return _harness_entry(record, score, metric, meta)
    m = record.metrics
    return {"s": finite(m.bits_per_byte), "a": f"{m.nll:.1f} nats, {m.num_tokens} tokens", "nll": finite(m.nll),
            "tok": m.num_tokens, "b": m.num_bytes}


def _harness_entry(record: HarnessRecord, score: Optional[float], metric: str,
                   meta: Optional[QueryMetadata]) -> dict[str, JSON]:
    """Return an lm-eval task's item: its choices' log-probabilities, or its samples and the filtered answer."""
    shown = meta.predicted_answer if meta is not None and meta.predicted_answer is not None else None
    if record.sum_logits():
        picked = record.prediction(metric)
        return {"s": score, "a": "" if shown is None else str(shown), "p": picked,
                "lp": [finite(round(v, 4)) for v in record.sum_logits()]}
    samples = [{"text": s["text"], "f": s["finish_reason"], "n": s["num_tokens"]}
               for out in record.model_output for s in out.get("samples", [])]
    return {"s": score, "a": _clip("" if shown is None else shown), "o": samples}


def _flipped(records: Sequence[Optional[Record]], metric: str) -> bool:
    if len(records) != 2 or records[0] is None or records[1] is None or isinstance(records[0], PerplexityRecord):
        return False
    return records[0].metric_value(metric) != records[1].metric_value(metric)


def _gold(record: Record, meta: Optional[QueryMetadata]) -> tuple[Optional[str], Optional[int]]:
    if isinstance(record, ChoiceRecord):
        shown = meta.correct_answer if meta is not None and meta.correct_answer is not None else str(record.label)
        return shown, record.label
    if isinstance(record, GenerationRecord):
        return record.label, None
    if isinstance(record, HarnessRecord):
        return (None if meta is None else meta.correct_answer), (record.target if record.sum_logits()
                                                                 and isinstance(record.target, int) else None)
    return None, None


def item_data(runs: Sequence[RunRecord], prompts: Mapping[str, Mapping[str, Prompt]]) -> dict[str, JSON]:
    """Build the browser's data.

    That is each task (kind, metric, shared prompt prefix), every item of every task with each
    run's view of it, and (two runs) the items that flipped.
    """
    tasks: list[JSON] = []
    items: list[JSON] = []
    flips: list[int] = []
    for t, name in enumerate(task_names(runs)):
        present = [run.tasks.get(name) for run in runs]
        first = first_task(runs, name)
        records = [{r.query_id: r for r in task.records} if task else {} for task in present]
        meta = [{m.query_id: m for m in task.sidecar} if task else {} for task in present]
        saved = prompts.get(name, {})
        ids = list(dict.fromkeys(q for by_id in records for q in by_id))
        prefix = shared_prefix([p.context for q in ids if (p := saved.get(q)) and p.context is not None])
        tasks.append({"name": name, "kind": first.kind, "metric": first.primary_metric, "prefix": prefix or None,
                      "saved": bool(saved)})
        for q in ids:
            found = [by_id.get(q) for by_id in records]
            gold, gold_index = next(_gold(r, m.get(q)) for r, m in zip(found, meta) if r is not None)
            prompt = saved.get(q)
            if _flipped(found, first.primary_metric):
                flips.append(len(items))
            items.append({
                "t": t, "q": q, "g": gold, "gi": gold_index,
                "x": None if prompt is None or prompt.context is None else prompt.context[len(prefix):],
                "c": list(prompt.choices) if prompt and prompt.choices else None,
                "r": [_run_entry(r, first.primary_metric, m.get(q)) for r, m in zip(found, meta)]})
    return {"tasks": tasks, "items": items, "flips": flips if len(runs) == 2 else None, "pageSize": PAGE_SIZE,
            "notSaved": NOT_SAVED}
