"""A run's queries as a pre-tokenized dataset for Bergson (EleutherAI's data attribution).

`proctor export bergson RUN --output DIR --target gold|predicted|samples` writes DIR as a
`datasets.save_to_disk` directory (`bergson build ... --dataset DIR`) plus `export.json`,
the manifest `proctor attribution join` maps Bergson's positional scores back through.

Each row is one (query, target) pair as a `Loglikelihood` request and exactly the tokens
proctor's tokenization policy (`proctor.engine.tokens`) gives it: `input_ids` = the scored
window's inputs + its last target (left-truncated as the run truncated it), `labels` =
-100 on the context and the target tokens on the target (unshifted, as transformers and
Bergson read them), so the summed label log-probability is what the run scored.

Targets: multiple-choice queries give their gold choice (`gold`) or the choice the task's
primary metric picked (`predicted`, and `samples`: a choice task's one sample is its
prediction): the very request the run scored, checked against its `request_key`, with the
run's `sum_logits` beside it. Generation queries give the gold
answer as the record shows it (GSM8K: the final number), after one space as the tasks'
few-shot answers follow their prompts, or a generated sample (`predicted`: the first,
`samples`: each), as a continuation of the prompt the model generated from; the model's
sampled token ids are not stored, so a sample is its text tokenized by the policy.
Perplexity tasks have no query to attribute and are left out (the manifest says so).

Row order: tasks in the run's order, queries in predictions.jsonl order, samples in order.
The run must have been written with `--save-requests` (its prompts are read from there;
with the result cache, rerunning the same command with it costs no model time).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

from proctor.backends.sources import ModelSource, classify_source
from proctor.digests import file_sha256
from proctor.errors import UserError
from proctor.export import TARGETS
from proctor.outputs.checked import CheckedDirectory
from proctor.outputs.records import (
    SIDECAR_COLUMNS,
    ChoiceRecord,
    GenerationRecord,
    HarnessRecord,
    QueryMetadata,
    RunRecord,
    TaskRecord,
)
from proctor.outputs.requests_file import REQUESTS_FILE
from proctor.outputs.run_dir import open_run, read_run_files, task_dir_name
from proctor.outputs.typecheck import check_fields
from proctor.requests import POLICIES, Chat, Loglikelihood, Message

FORMAT = "proctor-bergson-export/1"
MANIFEST = "export.json"

#: the dataset's columns and their Arrow types: what Bergson reads, what joins back, then the
#: sidecar's other columns ("list": of int64)
COLUMNS: dict[str, str] = {
    "input_ids": "list", "labels": "list", "query_id": "string", "target": "string", "choice": "int64",
    "sample": "int64", "context_tokens": "int64", "target_text": "string", "sum_logits": "float64",
    **{name: kind for name, kind in SIDECAR_COLUMNS if name != "query_id"},
}


@dataclass(frozen=True)
class Target:
    """One (query, target) pair before tokenization."""

    query_id: str
    kind: str                        # "gold", "predicted" or "sample"
    context: str                     # the prompt as text (a chat as the run rendered it)
    continuation: str
    policy: str
    choice: Optional[int] = None     # multiple choice: the choice's index
    sample: Optional[int] = None     # generation: the sample's index (None: the gold answer)
    sum_logits: Optional[float] = None   # multiple choice: what the run scored for it


@dataclass(frozen=True)
class ExportManifest:
    """`export.json`: what was exported, from which run, and the rows' identity."""

    run: str                         # the run directory, absolute
    run_metrics_sha256: str          # its metrics.json: a rerun into the same path is another run
    model: str
    model_fingerprint: str
    tokenizer: str                   # the tokenizer's identity (as the result cache records it)
    target: str
    rows: int
    rows_sha256: str                 # over every row's query_id, target, choice, sample and tokens
    tasks: dict[str, int]            # task -> rows exported
    left_out: dict[str, str]         # task -> why it has no rows
    max_length: int
    olmes_max_length: Optional[int]
    bergson_model: Optional[str]     # the run's model as Bergson loads it (a GGUF: proctor's converted copy)
    format: str = FORMAT

    def to_json(self) -> str:
        """Return the manifest as the indented JSON text `export.json` holds."""
        return json.dumps(asdict(self), indent=1) + "\n"


def read_manifest(export_dir: Path) -> ExportManifest:
    """Read and check an export's `export.json`; UserError when the directory is not a proctor Bergson export."""
    path = Path(export_dir) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError
        manifest = ExportManifest(**data)
        check_fields(manifest, "export")
        return manifest
    except (OSError, UnicodeDecodeError, ValueError, TypeError, RecursionError):
        raise UserError(f"{export_dir} is not a proctor Bergson export (no readable {MANIFEST}); "
                        f"make one with `proctor export bergson RUN --output DIR`") from None


# ---- what to export ---------------------------------------------------------------------------


def _requests(files: CheckedDirectory, task: str) -> dict[str, dict[int, dict]]:
    """query_id -> idx -> requests.jsonl row (the conditional requests only), read from the opened run directory."""
    name = f"{task_dir_name(task)}/{REQUESTS_FILE}"
    path = files.path / name
    text = files.read_text(name, missing=(
        f"{files.path} has no requests.jsonl for task {task}: the export reads the prompts the run scored from it; "
        f"rerun the same `proctor run` command with --save-requests (the result cache answers it without the model) "
        f"into a new --output"))
    out: dict[str, dict[int, dict]] = {}
    try:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("request"), dict):
                raise ValueError(f"line {n} is not a request row")
            if not row.get("uncond"):
                out.setdefault(str(row["query_id"]), {})[int(row["idx"])] = row
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise UserError(f"{path} is not a requests file as proctor writes it ({e}); rerun with --save-requests "
                        f"into a new --output") from None
    return out


def _context(row: dict, path: str) -> str:
    """Return a request row's prompt as the model saw it: the text, or a chat as the run rendered it."""
    request = row["request"]
    context = request.get("context")
    if isinstance(context, str):
        return context
    rendered = request.get("rendered_context")
    if not isinstance(rendered, str):
        raise UserError(f"{path}: query {row.get('query_id')} is a chat without its rendered prompt; rerun with "
                        f"--save-requests into a new --output")
    return rendered


def _request_context(context: Any) -> Any:
    """Rebuild the Context a requests.jsonl `context` field was written from."""
    if isinstance(context, str):
        return context
    return Chat(tuple(Message(m["role"], m["content"]) for m in context["messages"]),
                bool(context.get("continue_final", False)), context.get("suffix", ""))


def _scored_request(row: dict, path: str) -> Loglikelihood:
    """Rebuild the Loglikelihood request a row describes, checked against the key the run stored."""
    request = row["request"]
    try:
        scored = Loglikelihood(_request_context(request["context"]), request["continuation"],
                               request.get("policy", "olmes"))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UserError(f"{path}: query {row.get('query_id')} choice {row.get('idx')} is not a loglikelihood "
                        f"request") from None
    if scored.key != row.get("request_key"):
        raise UserError(f"{path}: query {row.get('query_id')} choice {row.get('idx')} does not match its "
                        f"request_key (the file was edited); rerun with --save-requests into a new --output")
    return scored


def _choice_targets(task: TaskRecord, requests: dict[str, dict[int, dict]], target: str,
                    path: str) -> Iterator[Target]:
    for record in task.records:
        assert isinstance(record, (ChoiceRecord, HarnessRecord))
        if target == "gold":
            choice = record.label if isinstance(record, ChoiceRecord) else int(record.target)
        else:
            predicted = record.prediction(task.primary_metric)
            if predicted is None:
                raise UserError(f"{task.name}: query {record.query_id} has no prediction by its primary metric "
                                f"{task.primary_metric}")
            choice = int(predicted)
        row = requests.get(record.query_id, {}).get(choice)
        if row is None:
            raise UserError(f"{path} has no request for query {record.query_id} choice {choice}; the run and its "
                            f"requests.jsonl disagree")
        scored = _scored_request(row, path)
        yield Target(record.query_id, "gold" if target == "gold" else "predicted", _context(row, path),
                     scored.continuation, scored.policy,
                     choice=choice, sum_logits=record.sum_logits()[choice])


def _generation_targets(task: TaskRecord, requests: dict[str, dict[int, dict]], target: str,
                        path: str) -> Iterator[Target]:
    for record in task.records:
        assert isinstance(record, (GenerationRecord, HarnessRecord))
        row = requests.get(record.query_id, {}).get(0)
        if row is None:
            raise UserError(f"{path} has no request for query {record.query_id}; the run and its requests.jsonl "
                            f"disagree")
        context = _context(row, path)
        policy = row["request"].get("policy", "olmes")
        if policy not in POLICIES:
            raise UserError(f"{path}: query {record.query_id} has an unknown tokenization policy {policy!r}")
        if target == "gold":
            gold = str(record.label if isinstance(record, GenerationRecord) else record.target)
            spaced = gold if gold[:1].isspace() or context[-1:].isspace() else " " + gold
            yield Target(record.query_id, "gold", context, spaced, policy)
            continue
        texts = _sample_texts(record)
        for i, text in enumerate(texts[:1] if target == "predicted" else texts):
            yield Target(record.query_id, "predicted" if target == "predicted" else "sample", context,
                         text, policy, sample=i)


def _sample_texts(record: Union[GenerationRecord, HarnessRecord]) -> list[str]:
    if isinstance(record, GenerationRecord):
        return [s.text for s in record.model_output]
    return [s["text"] for s in record.model_output[0]["samples"]]


def _is_choice(task: TaskRecord) -> bool:
    """Whether a task's documents are scored by choices' log-likelihoods (lm-eval's multiple choice too)."""
    if task.kind == "harness":
        return all(isinstance(r, HarnessRecord) and r.sum_logits() and isinstance(r.target, int)
                   for r in task.records)
    return task.kind == "choice"


def export_targets(files: CheckedDirectory, run: RunRecord, target: str) -> tuple[list[tuple[TaskRecord, list[Target]]],
                                                                                 dict[str, str]]:
    """Each task's targets in the documented order, and the tasks left out (and why); `files`: the opened run."""
    if target not in TARGETS:
        raise UserError(f"unknown --target {target!r}; choose one of {', '.join(TARGETS)}")
    out, left_out = [], {}
    for task in run.tasks.values():
        if task.kind == "perplexity":
            left_out[task.name] = "a perplexity task: its documents are text, not queries with a target"
            continue
        path = str(files.path / task_dir_name(task.name) / REQUESTS_FILE)
        requests = _requests(files, task.name)
        make = _choice_targets if _is_choice(task) else _generation_targets
        out.append((task, list(make(task, requests, target, path))))
    if not any(targets for _, targets in out):
        raise UserError(f"{files.path} has no query to export (its tasks: {', '.join(run.tasks)})")
    return out, left_out


# ---- tokens -----------------------------------------------------------------------------------


def _encoded(policy: Any, targets: Sequence[Target]) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of each target: its scored window and the last target token."""
    requests = [Loglikelihood(t.context, t.continuation, t.policy) for t in targets]  # type: ignore[arg-type]
    out = []
    for window in policy.request_windows(requests):
        ids = [*window.inputs, window.targets[-1]]
        context = window.start + 1  # tokens before the first target
        out.append((ids, [-100] * context + ids[context:]))
    return out


def _rows_digest(rows: dict[str, list]) -> str:
    digest = hashlib.sha256()
    for values in zip(rows["query_id"], rows["target"], rows["choice"], rows["sample"], rows["input_ids"]):
        digest.update(json.dumps(values).encode())
    return digest.hexdigest()


def export_bergson(run_dir: Path, output: Path, *, target: str = "gold", tokenizer: Optional[str] = None,
                   overwrite: bool = False, allow_edited: bool = False) -> ExportManifest:
    """Write the export (see the module docstring) and return its manifest.

    The run is read as `proctor.read_run` reads it (`allow_edited` as there), its requests.jsonl too.
    """
    from datasets import Dataset, Features, Sequence as ListOf, Value

    from proctor.engine.tokens import TokenizationPolicy
    from proctor.outputs.atomic import atomic_write_text
    from proctor.outputs.owned import check_output_dir, staged_directory
    from proctor.runtime import open_tokenizer

    check_output_dir(Path(output), overwrite=overwrite)
    files = open_run(run_dir, allow_edited=allow_edited)   # a symbolic link loop: refused here, not by resolve()
    run_dir = files.path = files.path.resolve()
    run = read_run_files(files)
    tasks, left_out = export_targets(files, run, target)
    model = run.model
    if tokenizer is None and model.model.startswith("<"):
        raise UserError(f"{run_dir} was run on a model object ({model.model}); pass its tokenizer with --tokenizer")
    model_source = _run_model(model.model)
    encoder = open_tokenizer(tokenizer if tokenizer is not None else model_source or model.model)
    identity = encoder.source.tokenizer_identity
    policy = TokenizationPolicy(encoder.tokenizer, max_length=model.olmes_max_length or model.max_length,
                                lm_eval_max_length=model.max_length)
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    counts, empty = {}, 0
    for task, targets in tasks:
        sidecar: dict[str, QueryMetadata] = {m.query_id: m for m in task.sidecar}
        kept = [t for t in targets if t.continuation]  # a sample that generated nothing has no target
        empty += len(targets) - len(kept)
        counts[task.name] = len(kept)
        for t, (ids, labels) in zip(kept, _encoded(policy, kept)):
            values = {"input_ids": ids, "labels": labels, "query_id": t.query_id, "target": t.kind,
                      "choice": t.choice, "sample": t.sample, "context_tokens": labels.count(-100),
                      "target_text": t.continuation, "sum_logits": t.sum_logits}
            meta = sidecar.get(t.query_id)
            if meta is None:
                raise UserError(f"{run_dir}: query {t.query_id} of {task.name} is not in the query metadata sidecar")
            values.update({k: v for k, v in meta.to_dict().items() if k != "query_id"})
            for name, value in values.items():
                rows[name].append(value)
    if empty:
        left_out["empty samples"] = f"{empty} samples that generated no text (nothing to attribute)"
    features = Features({name: ListOf(Value("int64")) if kind == "list" else Value(kind)
                         for name, kind in COLUMNS.items()})
    manifest = ExportManifest(
        run=str(run_dir), run_metrics_sha256=file_sha256(run_dir / "metrics.json"), model=model.model,
        model_fingerprint=model.fingerprint, tokenizer=identity, target=target, rows=len(rows["query_id"]),
        rows_sha256=_rows_digest(rows), tasks=counts, left_out=left_out, max_length=model.max_length,
        olmes_max_length=model.olmes_max_length, bergson_model=_transformers_model(model_source))
    with staged_directory(Path(output), overwrite=overwrite) as stage:
        Dataset.from_dict(rows, features=features).save_to_disk(str(stage))
        atomic_write_text(stage / MANIFEST, manifest.to_json())
    return manifest


def _run_model(model: str) -> Optional[ModelSource]:
    """Return where the run's model is, named without reading it; None for a model object or one since removed."""
    try:
        return classify_source(model)  # a hub id is named, not downloaded
    except UserError:
        return None


def _transformers_model(source: Optional[ModelSource]) -> Optional[str]:
    """Return where Bergson can load the run's model from: a hub id or a transformers directory.

    For a GGUF that is its converted copy (`converted_gguf_dir`, which converts it on first
    use); None when there is none.
    """
    from proctor.backends.models import converted_gguf_dir

    if source is None:
        return None
    if source.kind == "gguf":
        directory = converted_gguf_dir(Path(source.location), source.digest)  # hashed once: the tokenizer used it
        return str(directory) if (directory / "config.json").exists() else None
    return source.location
