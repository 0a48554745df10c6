"""`proctor.evaluate`: the one entry point every evaluation goes through (the CLI included).

    import proctor
    result = proctor.evaluate("smollm2-135m", tasks=["mmlu_astronomy:mc::olmes"], limit=20)
    result.scores["mmlu_astronomy:mc::olmes"]      # the headline score
    result.tasks["mmlu_astronomy:mc::olmes"].records  # typed per-document records
    proctor.write_run(result, "runs/x"); proctor.read_run("runs/x") == result

Every mistake a caller can fix raises `proctor.UserError` with a one-line message, before
any model loads where it can be known then (a wrong type or value of any argument of these
functions included: `proctor.option.checked_arguments`); nothing calls `sys.exit`.
"""

from __future__ import annotations

import os
import sys
import time
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from proctor.data import resolve_data_dir
from proctor.defaults import DEFAULT_MAX_LENGTH, DEFAULT_MODEL
from proctor.engine.distributed import DistributedContext
from proctor.engine.stats import EngineStats
from proctor.option import boolean, checked_arguments, instance_of, one_path
from proctor.options import RunOptions, evaluate_signature
from proctor.outputs import run_dir
from proctor.outputs.owned import check_output_dir
from proctor.outputs.provenance import code_git_state, library_versions
from proctor.outputs.records import EngineRecord, ModelRecord, RunConfig, RunRecord, Timing
from proctor.outputs.run_dir import write_run_directory
from proctor.pipeline import Plan, ScoredPlan, plan, primary_scores, prompt_layout, score
from proctor.runtime import ModelArg, Runtime, check_runtime, open_runtime

#: When the command that calls `evaluate` started, in epoch seconds (`proctor run` sets its
#: process's start): then `Timing.start_to_first_model_call_seconds` counts the command's
#: whole start-up, its imports included. A library call leaves it unset and the field None.
COMMAND_STARTED: ContextVar[Optional[float]] = ContextVar("proctor_command_started", default=None)


def evaluate(model: Any = DEFAULT_MODEL, **keywords: Any) -> RunRecord:
    """Evaluate `model` on `tasks` (task or suite specs) and return the whole run's record.

    `model`: a hub id, a local directory, a .gguf file, an alias (`smollm2-135m`), a loaded
    transformers `PreTrainedModel` (with `tokenizer=`, an object or where to load one, unless
    one is saved beside its weights; it runs where it is, in its own dtype), or a proctor
    `Backend`. Every other keyword is the `proctor run` option of the same name, declared once
    in `proctor.options` (`limit`: first N documents of each task; `data_dir`: default
    $PROCTOR_DATA_DIR, else the hub; `output`: also write the run directory there;
    `include`: task files and modules of your own; `cache=False`: neither read nor store
    results in the result cache; `command`: recorded in metrics.json). Under torchrun every
    rank calls this and gets the record; rank 0 writes `output`.
    """
    bound = _SIGNATURE.bind(model, **keywords)  # an unknown keyword: Python's own TypeError
    bound.apply_defaults()
    given = dict(bound.arguments)
    tokenizer = None
    if not isinstance(model, (str, os.PathLike)):  # a loaded model's tokenizer, not a backend option
        tokenizer, given["tokenizer"] = given["tokenizer"], None
    options = RunOptions.from_keywords(given)
    source = ModelArg.of(options.model, options.backend)
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    launched = COMMAND_STARTED.get()
    before_t0 = None if launched is None else max(time.time() - launched, 0.0)
    is_main = DistributedContext.from_env().is_main
    where = options.absolute()  # a task module is code: paths are fixed before one is imported
    out = None if where.output is None else Path(where.output)
    # Everything that can be checked is checked before any data or model work.
    if out is not None and is_main:
        check_output_dir(out, overwrite=options.overwrite, option="output")
    checked = check_runtime(source, options)  # the model's path resolved
    data = resolve_data_dir(where.data_dir)
    options = replace(options, chat_template=where.chat_template)  # include is recorded as given
    if options.include:
        from proctor.tasks.plugins import include as include_tasks

        include_tasks(list(where.include))
    evaluation = plan(list(options.tasks), data, options.limit, prompt_layout(options))
    evaluation.preflight(options.allow_unsafe_exec)  # a refusal costs no model load
    if options.progress and is_main:  # what the run will do, before the model loads
        print(f"proctor: {evaluation.summary()}", file=sys.stderr, flush=True)
    if options.max_length is None and not evaluation.uses_policy("lm_eval"):
        options = replace(options, max_length=DEFAULT_MAX_LENGTH)  # OLMES's window; no need to learn the model's
    data_seconds = time.perf_counter() - t0
    with open_runtime(checked, options, tokenizer=tokenizer, chats=evaluation.has_chats(),
                      olmes_window=True) as runtime:
        t_eval = time.perf_counter()
        scored = score(evaluation, runtime.engine)
        eval_seconds = time.perf_counter() - t_eval
        stats = runtime.engine.total_stats()  # every rank's work
    timing = Timing(
        started=started.isoformat(), finished=datetime.now(timezone.utc).isoformat(),
        total_seconds=time.perf_counter() - t0, data_seconds=data_seconds,
        model_load_seconds=runtime.load_seconds, evaluation_seconds=eval_seconds,
        time_to_first_batch_seconds=None if stats.first_batch_seconds is None
        else t_eval - t0 + stats.first_batch_seconds,
        start_to_first_model_call_seconds=None if before_t0 is None or runtime.engine.first_model_call is None
        else before_t0 + runtime.engine.first_model_call - t0)
    record = _run_record(runtime, evaluation, scored, data, timing, _engine_record(stats, eval_seconds))
    if out is not None and runtime.ranks.is_main:
        write_run_directory(out, record, overwrite=options.overwrite, option="output",
                            requests={name: run.instances for name, run in evaluation.tasks.items()}
                            if options.save_requests else None,
                            render=lambda r: runtime.engine.policy.text(r.context, r.policy))
    return record


_SIGNATURE = evaluate_signature()
evaluate.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # help() and IDEs show every keyword

#: `proctor.read_run` and `proctor.write_run`: the run directory's reader and writer, their arguments checked
read_run = checked_arguments(directory=one_path)(run_dir.read_run)
write_run = checked_arguments(record=instance_of(RunRecord, "a RunRecord (what proctor.evaluate and proctor.read_run "
                                                 "return)"),
                              directory=one_path, overwrite=boolean)(run_dir.write_run)


def _run_record(runtime: Runtime, evaluation: Plan, scored: ScoredPlan, data: Optional[Path], timing: Timing,
                engine: EngineRecord) -> RunRecord:
    options, backend, template = runtime.options, runtime.backend, runtime.template
    policy = runtime.engine.policy
    warnings = list(runtime.warnings)
    for run in evaluation.tasks.values():
        warnings.extend(run.warnings)
    warnings.extend(runtime.cache_warnings())
    return RunRecord(
        primary_scores=primary_scores(evaluation, scored),
        tasks=scored.tasks,
        model=ModelRecord(
            backend=runtime.backend_name, model=runtime.model.name, fingerprint=backend.fingerprint,
            dtype=str(backend.dtype).removeprefix("torch."), device=str(backend.device),
            max_length=backend.max_length, batch_size=options.batch_size, deterministic=options.deterministic,
            seed=options.seed,
            olmes_max_length=None if policy.max_length == backend.max_length else policy.max_length,
            chat_template=None if template is None else template.origin,
            chat_template_sha256=None if template is None else template.digest,
            backend_config=runtime.backend_config()),
        run_config=RunConfig(tasks=options.tasks, limit=options.limit, data_dir=None if data is None else str(data),
                             world_size=runtime.ranks.world_size, include=options.include,
                             labels=dict(options.labels or {})),
        versions=library_versions(),
        git=code_git_state(),
        command=options.command,
        warnings=tuple(warnings),
        timing=timing,
        engine=engine,
    )


def _engine_record(stats: EngineStats, eval_seconds: float) -> EngineRecord:
    return EngineRecord(
        stats=stats,
        tokens_per_second=stats.tokens_run / eval_seconds if eval_seconds else None,
        generated_tokens_per_second=stats.gen_tokens / stats.gen_seconds
        if stats.gen_seconds and stats.gen_tokens else None)
