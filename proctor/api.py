"""`proctor.evaluate`: the one entry point every evaluation goes through (the CLI included).

    import proctor
    result = proctor.evaluate("smollm2-135m", tasks=["mmlu_astronomy:mc::olmes"], limit=20)
    result.scores["mmlu_astronomy:mc::olmes"]      # the headline score
    result.tasks["mmlu_astronomy:mc::olmes"].records  # typed per-document records
    result.write("runs/x"); proctor.read_run("runs/x") == result

Every mistake a caller can fix raises `proctor.UserError` with a one-line message, before
any model loads where it can be known then; nothing calls `sys.exit`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from proctor.backends.select import BackendOptions, backend_record, check_backend_options, open_backend
from proctor.cache_dir import results_path
from proctor.data import resolve_data_dir
from proctor.defaults import DEFAULT_MAX_LENGTH, DEFAULT_MODEL
from proctor.engine import Engine, ResultCache
from proctor.engine.backend import Backend
from proctor.engine.distributed import DistributedContext
from proctor.engine.gen_plan import DEFAULT_SEED
from proctor.engine.stats import EngineStats
from proctor.errors import UserError
from proctor.outputs.owned import check_output_dir
from proctor.outputs.provenance import code_git_state, library_versions
from proctor.outputs.records import EngineRecord, ModelRecord, RunConfig, RunRecord, Timing
from proctor.outputs.run_dir import write_run_directory
from proctor.engine.chat import ChatTemplate
from proctor.pipeline import PromptOptions, plan, primary_scores, score

PathLike = Union[str, "os.PathLike[str]"]
DEFAULT_THINK_TAGS = ("<think>", "</think>")


@dataclass(frozen=True)
class _Model:
    """What `evaluate` was given as the model, sorted out before any work."""

    name: str                               # as metrics.json records it
    options: BackendOptions
    loaded: Any = None                      # a transformers model object
    backend: Optional[Backend] = None       # a ready proctor backend


def _model(model: Any, options: BackendOptions) -> _Model:
    from proctor.backends.loaded import is_transformers_model

    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        return _Model(name, replace(options, model=name))
    if options.backend != "hf":
        raise UserError(f"backend={options.backend!r} loads its model itself; pass the model's path or id, "
                        "not an object")
    if is_transformers_model(model):
        return _Model(f"<loaded {type(model).__name__}: {getattr(model, 'name_or_path', '') or 'no path'}>",
                      options, loaded=model)
    if isinstance(model, Backend):
        return _Model(f"<backend {type(model).__name__}>", options, backend=model)
    raise UserError(f"cannot evaluate a {type(model).__name__}: pass a hub id, a local directory, a .gguf "
                    "file, an alias such as smollm2-135m, a transformers PreTrainedModel or a proctor Backend")


def _check_tasks(tasks: Any) -> list[str]:
    if isinstance(tasks, str):
        tasks = [tasks]
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, str) for t in tasks):
        raise UserError(f"tasks must be a list of task specs, got {tasks!r}")
    specs = list(dict.fromkeys(t.strip() for t in tasks if t.strip()))
    if not specs:
        raise UserError("no task specs given; name at least one (`proctor tasks` lists them)")
    return specs


def _num_fewshot(value: Any) -> Optional[int]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise UserError(f"num_fewshot (--num-fewshot) must be a whole number >= 0, got {value!r}")


def _labels(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k.strip() and "=" not in k
                                                 and isinstance(v, str) for k, v in value.items()):
        raise UserError(f"labels must map names (no '=') to strings, e.g. {{'step': '1000'}}; got {value!r}")
    return dict(value)


def _batch_size(value: Any) -> Union[int, str]:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise UserError(f"batch_size must be 'auto' or a positive whole number, got {value!r}")


def evaluate(
    model: Any = DEFAULT_MODEL,
    *,
    tasks: Sequence[str],
    tokenizer: Any = None,
    limit: Optional[int] = None,
    num_fewshot: Optional[int] = None,
    batch_size: Union[int, str] = "auto",
    max_length: Optional[int] = None,
    device: Optional[str] = None,
    dtype: str = "auto",
    data_dir: Optional[PathLike] = None,
    output: Optional[PathLike] = None,
    overwrite: bool = False,
    seed: int = DEFAULT_SEED,
    deterministic: bool = False,
    backend: str = "hf",
    include: Sequence[PathLike] = (),
    allow_unsafe_exec: bool = False,
    save_requests: bool = False,
    cache: bool = True,
    progress: bool = True,
    base_url: Optional[str] = None,
    concurrency: Optional[int] = None,
    openai_scoring: str = "auto",
    openai_extra: Optional[dict] = None,
    threads: Optional[int] = None,
    vllm_for_mc: bool = False,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: Optional[float] = None,
    chat_template: Union[bool, PathLike] = False,
    fewshot_as_multiturn: Optional[bool] = None,
    system_instruction: Optional[str] = None,
    think_tags: Union[bool, tuple[str, str]] = False,
    labels: Optional[Mapping[str, str]] = None,
    command: Sequence[str] = (),
) -> RunRecord:
    """Evaluate `model` on `tasks` (task or suite specs) and return the whole run's record.

    `model`: a hub id, a local directory, a .gguf file, an alias (`smollm2-135m`), a loaded
    transformers `PreTrainedModel` (with `tokenizer=`, an object or where to load one, unless
    one is saved beside its weights; it runs where it is, in its own dtype), or a proctor
    `Backend`. Every other option is the `proctor run` option of the same name: `limit`
    (first N documents of each task), `data_dir` (default: $PROCTOR_DATA_DIR, else the hub),
    `output` (also write the run directory there; `overwrite` replaces an earlier proctor
    run), `include` (task files and modules of your own), `cache=False` (neither read nor
    store results in the result cache), `command` (recorded in metrics.json). Under
    torchrun every rank calls this and gets the record; rank 0 writes `output`.
    `num_fewshot` (lm-eval's --num_fewshot) replaces every task's few-shot count, the
    default shots of an lm-eval task name (`hellaswag`: 0) included.

    `max_length` None: each spec's protocol default — OLMES specs 2048 tokens, lm-eval-format
    specs the model's context length (lm-eval's rule). `chat_template=True` lays prompts out
    as chats rendered with the tokenizer's template (a path: that Jinja file's), as lm-eval's
    --apply_chat_template; `fewshot_as_multiturn` (default: on with a chat template) and
    `system_instruction` are lm-eval's options of those names. `think_tags` (True: <think>
    and </think>, or a pair) reads generation tasks' answers without the reasoning spans
    (the records keep the whole text). `labels` (`--label KEY=VALUE`) are recorded in
    run_config for reports (`step` orders a series of checkpoints); they change no result.
    """
    ranks = DistributedContext.from_env()  # torchrun's RANK/WORLD_SIZE; one rank without it
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    if include:
        from proctor.tasks.plugins import include as include_tasks

        include_tasks([os.fspath(p) for p in include])
    specs = _check_tasks(tasks)
    num_fewshot = _num_fewshot(num_fewshot)
    run_labels = _labels(labels)
    data = resolve_data_dir(None if data_dir is None else os.fspath(data_dir))
    batch = _batch_size(batch_size)
    out = None if output is None else Path(output)
    # Everything that can be checked is checked before any data or model work.
    if out is not None and ranks.is_main:
        check_output_dir(out, overwrite=overwrite, option="output")
    options = BackendOptions(
        backend=backend, model=DEFAULT_MODEL, max_length=max_length,
        device=ranks.device(device) if backend == "hf" else device, dtype=dtype, seed=seed, base_url=base_url,
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
        concurrency=concurrency, openai_scoring=openai_scoring, openai_extra=openai_extra, threads=threads,
        vllm_for_mc=vllm_for_mc, tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization)
    given = _model(model, options)
    if given.loaded is not None:  # its tokenizer is its own business, and it needs no finding
        check_backend_options(replace(given.options, tokenizer=None), locate_model=False)
    elif given.backend is None:
        check_backend_options(given.options)
    result_cache = ResultCache(results_path()) if cache else None
    template_option = chat_template_file(chat_template)
    prompts = prompt_options(chat_template=chat_template, fewshot_as_multiturn=fewshot_as_multiturn,
                             system_instruction=system_instruction, num_fewshot=num_fewshot,
                             think_tags=think_tags)
    evaluation = plan(specs, data, limit, prompts)
    evaluation.preflight(allow_unsafe_exec)  # a refusal costs no model load
    if max_length is None and not evaluation.uses_policy("lm_eval"):
        max_length = DEFAULT_MAX_LENGTH  # OLMES's window; no need to learn the model's
    given = replace(given, options=replace(given.options, max_length=max_length))
    data_seconds = time.perf_counter() - t0

    ranks.start()
    warnings: list[str] = []
    if given.backend is not None:
        model_backend = given.backend
    elif given.loaded is not None:
        from proctor.backends.loaded import loaded_backend

        model_backend, warnings = loaded_backend(given.loaded, tokenizer, max_length=max_length,
                                                 device=device, dtype=dtype, cache=cache)
        if not model_backend.identity:
            result_cache = None
    else:
        model_backend = ranks.in_turn(lambda: open_backend(given.options))
    load_seconds = time.perf_counter() - t0 - data_seconds
    # OLMES specs keep OLMES's window unless --max-length says otherwise (a Backend object has its own)
    olmes_max_length = min(max_length or DEFAULT_MAX_LENGTH, model_backend.max_length)
    template = (ChatTemplate.resolve(template_option, model_backend.tokenizer)
                if evaluation.has_chats() else None)
    engine = Engine(model_backend, batch_size=batch, cache=result_cache, progress=progress and ranks.is_main,
                    deterministic=deterministic, seed=seed, distributed=ranks,
                    olmes_max_length=olmes_max_length, chat_template=template)
    t_eval = time.perf_counter()
    scored = score(evaluation, engine)
    eval_seconds = time.perf_counter() - t_eval
    stats = engine.total_stats()  # every rank's work
    ranks.stop()

    for run in evaluation.tasks.values():
        warnings.extend(run.warnings)
    if result_cache is not None:
        warnings.extend(result_cache.tampered_warning())
    record = RunRecord(
        primary_scores=primary_scores(evaluation, scored),
        tasks=scored.tasks,
        model=ModelRecord(
            backend=given.options.backend if given.backend is None else type(given.backend).__name__,
            model=given.name, fingerprint=model_backend.fingerprint,
            dtype=str(model_backend.dtype).removeprefix("torch."), device=str(model_backend.device),
            max_length=model_backend.max_length, batch_size=batch, deterministic=deterministic, seed=seed,
            olmes_max_length=None if olmes_max_length == model_backend.max_length else olmes_max_length,
            chat_template=None if template is None else template.origin,
            chat_template_sha256=None if template is None else template.digest,
            backend_config={k: v for k, v in backend_record(model_backend, given.options).items() if k != "backend"}),
        run_config=RunConfig(tasks=tuple(specs), limit=limit, data_dir=None if data is None else str(data),
                             world_size=ranks.world_size, include=tuple(os.fspath(p) for p in include),
                             labels=run_labels),
        versions=library_versions(),
        git=code_git_state(),
        command=tuple(command),
        warnings=tuple(warnings),
        timing=Timing(
            started=started.isoformat(), finished=datetime.now(timezone.utc).isoformat(),
            total_seconds=time.perf_counter() - t0, data_seconds=data_seconds, model_load_seconds=load_seconds,
            evaluation_seconds=eval_seconds,
            time_to_first_batch_seconds=None if stats.first_batch_seconds is None
            else t_eval - t0 + stats.first_batch_seconds),
        engine=_engine_record(stats, eval_seconds),
    )
    if out is not None and ranks.is_main:
        write_run_directory(out, record, overwrite=overwrite, option="output",
                            requests={name: run.instances for name, run in evaluation.tasks.items()}
                            if save_requests else None,
                            render=lambda r: engine.policy.text(r.context, r.policy))
    return record


def chat_template_file(value: Any) -> Optional[str]:
    """`chat_template`'s file: None for False/True, else the Jinja file's path (which must exist)."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise UserError(f"chat_template must be True, False or a Jinja file's path, got {value!r}")
    path = os.fspath(value)
    if not Path(path).is_file():
        raise UserError(f"chat template file {path} does not exist; pass a Jinja chat template file, "
                        "or --chat-template alone for the tokenizer's")
    return path


def prompt_options(*, chat_template: Any = False, fewshot_as_multiturn: Optional[bool] = None,
                   system_instruction: Optional[str] = None, num_fewshot: Optional[int] = None,
                   think_tags: Union[bool, tuple[str, str]] = False) -> PromptOptions:
    """The prompt layout `evaluate`'s options ask for, checked. lm-eval's rules: few-shot as
    multiturn by default with a chat template, refused without one."""
    chat = chat_template is not False
    if fewshot_as_multiturn and not chat:
        raise UserError("fewshot_as_multiturn needs a chat template (--chat-template), as in lm-eval")
    if system_instruction is not None and (not isinstance(system_instruction, str) or not system_instruction):
        raise UserError(f"system_instruction must be a non-empty string, got {system_instruction!r}")
    return PromptOptions(chat=chat, fewshot_as_multiturn=fewshot_as_multiturn,
                         system_instruction=system_instruction, num_fewshot=_num_fewshot(num_fewshot),
                         think_tags=_think_tags(think_tags))


def _think_tags(value: Any) -> Optional[tuple[str, str]]:
    """`think_tags`: False (off), True (<think>...</think>) or an (opening, closing) pair."""
    if value is False or value is None:
        return None
    if value is True:
        return DEFAULT_THINK_TAGS
    if (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, str) for t in value)
            and value[1]):
        return (value[0], value[1])
    raise UserError(f"think_tags must be True or an (opening, closing) pair of tags with a closing tag, got {value!r}")


def _engine_record(stats: EngineStats, eval_seconds: float) -> EngineRecord:
    return EngineRecord(
        stats=stats,
        tokens_per_second=stats.tokens_run / eval_seconds if eval_seconds else None,
        generated_tokens_per_second=stats.gen_tokens / stats.gen_seconds
        if stats.gen_seconds and stats.gen_tokens else None)
