"""From specs to scored tasks: plan every instance, run their requests once, score each task.

`plan` reads all data and builds every request before any model loads; `score` sends the
plan's requests through the engine in one go (batched across tasks) and lets each task's
family score its documents (`Task.score_docs`); `primary_scores` gives each requested
spec its headline entry. `proctor.api.evaluate` strings these together around a backend.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.engine import Engine
from proctor.engine.gen_plan import samples_needed
from proctor.engine.workload import counted
from proctor.errors import UserError
from proctor.harness.specs import bare_lm_eval_name, is_harness_spec, load as load_harness
from proctor.metrics import Stat
from proctor.metrics.clusters import per_sample, task_error
from proctor.options import RunOptions
from proctor.outputs.records import MetricSummary, SpecScore, TaskRecord, finite
from proctor.requests import Generate, Request, is_chat, policy_of
from proctor.scores import TaskResult, spec_entry
from proctor.tasks.base import Task, TaskConfig, Work
from proctor.tasks.registry import is_known, resolve


@dataclass
class TaskRun:
    """A task and the instances it built for this run."""

    task: Task
    instances: Sequence[Work]
    warnings: list[str] = field(default_factory=list)

    @property
    def config(self) -> TaskConfig:
        """The task's config."""
        return self.task.config

    def requests(self) -> list[Request]:
        """Return every request of the task's instances, the unconditioned ones included."""
        return [r for inst in self.instances for r in (*inst.requests, *inst.uncond_requests)]


@dataclass
class SpecPlan:
    """A spec as the user wrote it and the leaf tasks it expands to."""

    spec: str
    task_names: list[str]
    is_suite: bool


@dataclass
class Plan:
    """A run's plan: the specs as requested and every leaf task with the instances it built."""

    specs: list[SpecPlan]
    tasks: dict[str, TaskRun]   # leaf task name -> run, in first-seen order
    limit: Optional[int] = None

    def requests(self) -> list[Request]:
        """Every request of every task, in task order (duplicates kept: the engine dedupes)."""
        return [r for run in self.tasks.values() for r in run.requests()]

    def uses_policy(self, policy: str) -> bool:
        """Whether any request follows this tokenization policy (`proctor.requests.Policy`)."""
        return any(policy_of(r) == policy for r in self.requests())

    def has_chats(self) -> bool:
        """Whether any request's context is a chat (the run then needs a chat template)."""
        return any(is_chat(r) for r in self.requests())

    def summary(self) -> str:
        """One line: the tasks, their documents and the requests of each kind (samples × the limit of generations)."""
        unique = {r.key: r for r in self.requests()}.values()
        kinds = Counter(type(r).__name__ for r in unique)
        parts = [counted(kinds[name], what) for name, what in (
            ("Loglikelihood", "loglikelihood request"), ("RollingLoglikelihood", "rolling loglikelihood request"),
            ("HiddenStates", "hidden-state request")) if kinds[name]]
        generations = [r for r in unique if isinstance(r, Generate)]
        if generations:
            samples = sum(samples_needed(r) for r in generations)
            longest = max(r.max_gen_toks for r in generations)
            drawn = "" if samples == len(generations) else f" ({counted(samples, 'sample')})"
            parts.append(f"{counted(len(generations), 'generation')}{drawn} of up to {longest:,} new tokens")
        documents = sum(len(run.instances) for run in self.tasks.values())
        return (f"{counted(len(self.tasks), 'task')}, {counted(documents, 'document')}: "
                f"{', '.join(parts) or 'no requests'}")

    def preflight(self, allow_unsafe_exec: bool) -> None:
        """Let every task refuse now what it would refuse after the model work."""
        for run in self.tasks.values():
            run.task.preflight(allow_unsafe_exec)


@dataclass(frozen=True)
class PromptOptions:
    """How the run asks every task to lay out its prompts (`proctor run` options)."""

    chat: bool = False                              # --chat-template: prompts as chats
    fewshot_as_multiturn: Optional[bool] = None     # None: each protocol's default
    system_instruction: Optional[str] = None        # --system-instruction
    num_fewshot: Optional[int] = None               # --num-fewshot: every task's shots
    think_tags: Optional[tuple[str, str]] = None    # --think-tags: generation tasks only
    gen_kwargs: Optional[Mapping[str, Any]] = None  # --gen-kwargs: lm_eval: specs' generation tasks

    def apply(self, task: Task) -> Task:
        """Return the task with these options in its config (a task of a chat variant keeps its own)."""
        config = task.config
        changes: dict = {}
        if self.chat and config.chat is None and task.kind != "perplexity":  # a document has no prompt
            if not task.supports_chat:
                raise UserError(f"{config.name} does not lay out its prompts as chats; run it without "
                                "--chat-template (or in a run of its own)")
            changes["chat"] = task.chat_format(self.fewshot_as_multiturn)
        if self.system_instruction is not None:
            changes["system_instruction"] = self.system_instruction
        if self.think_tags is not None and task.kind == "generation":
            changes["think_tags"] = self.think_tags
        if not changes:
            return task
        if "system_instruction" in changes:
            if not task.supports_system_instruction:
                raise UserError(f"{config.name} has no system instruction in its protocol; run it without "
                                "--system-instruction")
            if task.system_instruction_needs_chat and changes.get("chat", config.chat) is None:
                raise UserError(f"{config.name}: OLMES has a system prompt in chat format only; add "
                                "--chat-template or drop --system-instruction")
        return type(task)(replace(config, **changes))


def prompt_layout(options: RunOptions) -> PromptOptions:
    """Return the prompt layout a run's options ask for.

    lm-eval's rules: few-shot as multiturn by default with a chat template, refused without one.
    """
    chat = options.chat_template is not False
    if options.fewshot_as_multiturn and not chat:
        raise UserError("fewshot_as_multiturn needs a chat template (--chat-template), as in lm-eval")
    think_tags = options.think_tags
    assert think_tags is None or isinstance(think_tags, tuple)  # RunOptions' check made it a pair
    return PromptOptions(chat=chat, fewshot_as_multiturn=options.fewshot_as_multiturn,
                         system_instruction=options.system_instruction, num_fewshot=options.num_fewshot,
                         think_tags=think_tags, gen_kwargs=options.gen_kwargs)


def plan(specs: Sequence[str], data_dir: Optional[Path], limit: Optional[int],
         prompts: PromptOptions = PromptOptions()) -> Plan:
    """Resolve specs and build every instance; all data errors surface here, before any model loads."""
    spec_plans: list[SpecPlan] = []
    runs: dict[str, TaskRun] = {}
    if prompts.gen_kwargs is not None and not any(map(is_harness_spec, specs)):
        raise UserError("--gen-kwargs sets lm-eval's generation_kwargs of lm_eval: specs, and the run names "
                        "none; proctor's own specs keep their protocol's generation settings")
    for given in specs:
        spec = given if is_harness_spec(given) or is_known(given) else bare_lm_eval_name(given)
        if is_harness_spec(spec):  # lm-eval builds its tasks (and reads their data) here
            load_harness(spec, data_dir, prompts.num_fewshot, prompts.gen_kwargs)
        tasks: list[Task] = [prompts.apply(t) for t in resolve(spec, num_shots=prompts.num_fewshot)]
        names = [t.config.name for t in tasks]
        spec_plans.append(SpecPlan(spec, names, is_suite=names != [spec]))
        for task in tasks:
            if task.config.name not in runs:
                runs[task.config.name] = TaskRun(task, task.instances(data_dir, limit))
            elif runs[task.config.name].config != task.config:
                earlier = next(sp.spec for sp in spec_plans if task.config.name in sp.task_names)
                raise conflicting_settings(spec, task.config, earlier, runs[task.config.name].config)
    for run in runs.values():
        run.warnings.extend(duplicate_native_id_warnings(run))
    return Plan(spec_plans, runs, limit)


def duplicate_native_id_warnings(run: TaskRun) -> list[str]:
    """Return a warning when documents of the task share a native_id (their query_ids then differ by doc_id)."""
    counts = Counter(inst.native_id for inst in run.instances)
    repeated = sum(c - 1 for c in counts.values() if c > 1)
    if not repeated:
        return []
    return [
        f"{run.config.name}: {repeated} duplicate native_ids (the same native_id on more than one "
        "doc_id); their query_ids are disambiguated by doc_id"
    ]


def truncation_warnings(run: TaskRun, truncated: Mapping[str, int], max_length: int) -> list[str]:
    """Return a warning when left truncation to `max_length` cut any document's prompt.

    Such a document's score is then not the protocol's.
    """
    cut = [max((truncated.get(r.key, 0) for r in (*i.requests, *i.uncond_requests)), default=0)
           for i in run.instances]
    hit = sum(1 for c in cut if c)
    if not hit:
        return []
    return [f"{run.config.name}: {hit} of {len(cut)} documents did not fit in --max-length {max_length} "
            f"and lost up to {max(cut)} context tokens to left truncation; their scores do not follow "
            f"the protocol (raise --max-length)"]


@dataclass(frozen=True)
class ScoredPlan:
    """What `score` gives: each leaf task's record and its primary metric's statistics."""

    tasks: dict[str, TaskRecord]       # leaf task name -> its record
    primary: dict[str, Stat]           # leaf task name -> its primary metric's statistics


def score(evaluation: Plan, engine: Engine) -> ScoredPlan:
    """Run every request of the plan through the engine once, then score each task."""
    results = engine.results(evaluation.requests())
    records: dict[str, TaskRecord] = {}
    primary: dict[str, Stat] = {}
    for name, run in evaluation.tasks.items():
        t0 = time.perf_counter()
        policies = {policy_of(r) for r in run.requests()}
        window = max((engine.policy.max_length_of(p) for p in policies), default=engine.policy.max_length)
        run.warnings.extend(truncation_warnings(run, engine.truncated, window))
        scored = run.task.score_docs(run.instances, results)
        # requests are batched across tasks: model time is shared out by request
        model_seconds = sum(engine.seconds_per_request(r) for r in run.requests())
        config = replace(run.config, limit=evaluation.limit)
        records[name] = with_sample_error(TaskRecord(
            name=name, kind=run.task.kind, config=config, num_instances=len(run.instances),
            primary_metric=config.primary_metric,
            metrics={k: MetricSummary(finite(s.mean), finite(s.stderr)) for k, s in scored.metrics.items()},
            processing_time=model_seconds + time.perf_counter() - t0, warnings=tuple(run.warnings),
            generation=scored.generation, perplexity=scored.perplexity,
            records=tuple(scored.records), sidecar=tuple(scored.sidecar), harness=scored.harness))
        primary[name] = scored.metrics[config.primary_metric]
    return ScoredPlan(records, primary)


def with_sample_error(task: TaskRecord) -> TaskRecord:
    """Return the record with a naive standard error beside the clustered one of a per-sample pass@1.

    For pass@1 over n samples per question, the error over questions (a question's samples are
    one cluster) stays, and the naive one, as if every sample were independent, goes beside it.
    Other tasks come back unchanged.
    """
    error = task_error(task) if per_sample(task) else None
    if error is None:
        return task
    primary = replace(task.metrics[task.primary_metric], stderr_naive=finite(error.stderr_naive))
    return replace(task, metrics={**task.metrics, task.primary_metric: primary})


def primary_scores(evaluation: Plan, scored: ScoredPlan) -> dict[str, SpecScore]:
    """Return the headline entry of each spec the user asked for.

    A task's is its primary metric; a suite's is its declared primary aggregation as `score`,
    its other aggregations and members beside it.
    """
    results = {name: TaskResult.of(run.config, scored.primary[name]) for name, run in evaluation.tasks.items()}
    return {sp.spec: SpecScore.from_dict(spec_entry(sp.spec, results)) for sp in evaluation.specs}


def conflicting_settings(spec: str, config: TaskConfig, earlier_spec: str, earlier: TaskConfig) -> UserError:
    """Build the error for two specs of one run that run a task with different settings.

    For example lm-eval's 0-shot `hellaswag` beside the 10-shot `hellaswag::leaderboard`:
    their results would share a name.
    """
    how = (f"{config.num_shots}-shot, {earlier_spec!r} {earlier.num_shots}-shot"
           if config.num_shots != earlier.num_shots else f"with other settings than {earlier_spec!r} does")
    return UserError(f"{spec!r} runs {config.name} {how}: their results would share one name; "
                     "run them separately")
