"""One lm-eval task object as a proctor task: lm-eval builds the requests and scores, proctor's engine computes.

Requests come from the task's own `build_all_requests` (its prompts, few-shot sampler,
`--limit`), each lm-eval `Instance` becomes the proctor request of the same meaning,
with lm-eval's tokenization policy:

- `loglikelihood` (context, continuation) → `Loglikelihood(..., policy="lm_eval")`;
- `loglikelihood_rolling` (text,) → `RollingLoglikelihood(text)`;
- `generate_until` (context, gen_kwargs) → `Generate` with HFLM's reading of the kwargs:
  `until` the stop strings, `max_gen_toks` (default 256), greedy unless `do_sample` (or a
  temperature above 0) asks for sampling, `Instance.repeats` samples.

With `--chat-template`, lm-eval lays the prompt out as messages (`apply_chat_template`,
`fewshot_as_multiturn`, `system_instruction`) and proctor keeps them as a `Chat` the engine
renders with the run's template (`chat_marker`, `context_of`).

Scoring is lm-eval's: the responses go back into the instances (`resps`), the task's
filters run (`apply_filters`), `process_results` scores each document under each filter,
and lm-eval's own aggregation and standard errors give the task's metrics.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from proctor.errors import UserError
from proctor.harness import code_eval
from proctor.harness.library import (
    built_task,
    config_digest,
    eval_split,
    lm_eval_version,
    metric_key,
    quiet,
    resolved_config,
)
from proctor.metrics.aggregate import CorpusStat, MeanStat, Stat
from proctor.outputs.records import JSON, HarnessRecord, QueryMetadata
from proctor.requests import (
    Chat,
    Context,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
    Message,
    Request,
    RollingLoglikelihood,
)
from proctor.tasks.base import Scored, Task, about, check_limit, sidecar_row

#: HFLM's default max_gen_toks (lm_eval/models/huggingface.py)
MAX_GEN_TOKS = 256
#: what a chat prompt's text starts with while lm-eval builds it (`chat_marker`)
CHAT_MARK = "\x00proctor-chat\x00"
#: the generation kwargs a proctor Generate request expresses
GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p")


@dataclass(frozen=True, eq=False)
class HarnessInstance:
    """One document of an lm-eval task: its lm-eval instances and the proctor requests made from them."""

    query_id: str
    task: str
    doc_id: int
    native_id: int
    doc: Mapping[str, Any]
    requests: tuple[Request, ...]
    lm_instances: tuple[Any, ...]            # lm_eval.api.instance.Instance, in request (idx) order
    gold: JSON = None
    metadata: dict = field(default_factory=dict)

    @property
    def uncond_requests(self) -> tuple:
        """Empty: lm-eval's requests are all in `requests`."""
        return ()


def generate_request(context: Context, gen_kwargs: Mapping[str, Any], repeats: int, where: str) -> Generate:
    """Return the Generate request HFLM's `generate_until` runs for these generation kwargs."""
    unknown = sorted(set(gen_kwargs) - set(GEN_KWARGS))
    if unknown:
        raise UserError(f"{where}: generation_kwargs {', '.join(unknown)} have no proctor equivalent "
                        f"(proctor's generation takes {', '.join(GEN_KWARGS)})")
    until = gen_kwargs.get("until") or ()
    stop = (until,) if isinstance(until, str) else tuple(until)
    temperature = float(gen_kwargs.get("temperature", 0.0) or 0.0)
    do_sample = gen_kwargs.get("do_sample")
    if do_sample is None:
        do_sample = temperature > 0.0
    if not do_sample:
        temperature = 0.0
    return Generate(context, max_gen_toks=int(gen_kwargs.get("max_gen_toks", MAX_GEN_TOKS)), stop=stop,
                    do_sample=bool(do_sample), temperature=temperature,
                    top_p=float(gen_kwargs.get("top_p", 1.0)), repeats=repeats, policy="lm_eval")


def chat_marker(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """Stand in for a model's `apply_chat_template` while lm-eval builds chat prompts.

    lm-eval renders a chat prompt to text with the model's template before the model is
    involved; proctor keeps it as a `Chat` that the engine renders with the run's template,
    so the messages travel through lm-eval as this text and `context_of` reads them back.
    """
    return CHAT_MARK + json.dumps({"messages": list(messages), "continue_final": not add_generation_prompt})


def context_of(text: str, where: str) -> Context:
    """Return a prompt lm-eval built: its text, or the `Chat` that `chat_marker` stood in for."""
    if CHAT_MARK not in text:
        return text
    if not text.startswith(CHAT_MARK):
        raise UserError(f"{where}: the task adds text before its chat-templated prompt, which proctor "
                        "cannot lay out as chat messages; run it without --chat-template")
    try:
        layout = json.loads(text[len(CHAT_MARK):])
        return Chat(tuple(Message(m["role"], m["content"]) for m in layout["messages"]),
                    continue_final=bool(layout["continue_final"]))
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{where}: the task adds text after its chat-templated prompt, which proctor "
                        "cannot lay out as chat messages; run it without --chat-template") from None


def as_request(instance: Any, where: str) -> Request:
    """Return the proctor request of one lm-eval Instance."""
    kind, args = instance.request_type, instance.arguments
    if kind == "loglikelihood":
        return Loglikelihood(context_of(args[0], where), args[1], policy="lm_eval")
    if kind == "loglikelihood_rolling":
        return RollingLoglikelihood(args[0])
    if kind == "generate_until":
        return generate_request(context_of(args[0], where), args[1], instance.repeats, where)
    raise UserError(f"{where}: lm-eval request type {kind!r} is not one proctor computes "
                    "(loglikelihood, loglikelihood_rolling, generate_until)")


def lm_eval_response(request: Request, result: Any) -> list:
    """Return what lm-eval's model would have put into the instance's `resps`, one entry per repeat."""
    if isinstance(request, Generate):
        assert isinstance(result, GenerateResult)
        return [s.text for s in result.samples]
    assert isinstance(result, LoglikelihoodResult)
    if isinstance(request, RollingLoglikelihood):
        return [result.sum_logits]
    return [(result.sum_logits, result.is_greedy)]


def model_output(request: Request, result: Any) -> dict[str, JSON]:
    """Return a request's response as the record keeps it."""
    if isinstance(result, GenerateResult):
        return {"samples": [{"text": s.text, "num_tokens": s.num_tokens, "finish_reason": s.finish_reason}
                            for s in result.samples]}
    return {"sum_logits": result.sum_logits, "num_tokens": result.num_tokens, "is_greedy": result.is_greedy}


def as_json(value: Any) -> JSON:
    """Return a metric value or filtered response as JSON (tuples as lists, numpy scalars as numbers)."""
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class HarnessTask(Task):
    """A leaf lm-eval task, built and registered by `proctor.harness.specs.load`."""

    kind = "harness"
    supports_chat = True                 # lm-eval's apply_chat_template, fewshot_as_multiturn
    supports_system_instruction = True   # lm-eval's system_instruction
    applies_num_fewshot = False  # lm-eval's own rule applied it when the task was built

    def preflight(self, allow_unsafe_exec: bool) -> None:
        """Refuse a task that runs the model's code where proctor's own humaneval would refuse.

        A task scoring with code_eval runs the code in proctor's sandbox (`code_eval.arm`:
        --allow-unsafe-exec only where it cannot cut the network off). Any other task that runs
        the model's code (lm-eval's `unsafe_code`) runs it in this process, outside the sandbox:
        only with --allow-unsafe-exec (lm-eval's --confirm_run_unsafe_code).
        """
        task = built_task(self.config.name)
        if code_eval.arm(task, allow_unsafe_exec) or not task.config.unsafe_code or allow_unsafe_exec:
            return
        raise UserError(f"{self.config.name}: lm-eval's task runs the model's generated code in this process, "
                        "outside proctor's sandbox (only code_eval's programs run in the sandbox); pass "
                        "--allow-unsafe-exec (lm-eval's --confirm_run_unsafe_code) to run it, or run proctor's "
                        "sandboxed humaneval::greedy")

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Return lm-eval's evaluation documents, in order (native_id: the position)."""
        task = built_task(self.config.name)
        with quiet():  # a task's process_docs (datasets.map) runs here
            return self.as_docs(list(task.eval_docs), str(eval_split(task)))

    def instances(self, data_dir: Optional[Path], limit: Optional[int] = None) -> list[HarnessInstance]:
        """Build the requests of the first `limit` documents with the task's own `build_all_requests`."""
        check_limit(limit)
        with about(self.config.name):
            return self._instances(limit)

    def _instances(self, limit: Optional[int]) -> list[HarnessInstance]:
        name, chat = self.config.name, self.config.chat
        task = built_task(name)
        with quiet():
            task.build_all_requests(limit=limit, rank=0, world_size=1,
                                    system_instruction=self.config.system_instruction,
                                    apply_chat_template=chat is not None,
                                    fewshot_as_multiturn=chat is not None and chat.fewshot_as_multiturn,
                                    chat_template=chat_marker if chat is not None else None)
        by_doc: dict[int, list] = defaultdict(list)
        for inst in task.instances:
            by_doc[inst.doc_id].append(inst)
        split = str(eval_split(task))
        out = []
        for doc_id in sorted(by_doc):
            insts = tuple(sorted(by_doc[doc_id], key=lambda i: i.idx))
            doc = insts[0].doc
            where = f"document {doc_id}"
            out.append(HarnessInstance(
                query_id=f"{name}#{doc_id}", task=name, doc_id=doc_id, native_id=doc_id, doc=doc,
                requests=tuple(as_request(i, where) for i in insts), lm_instances=insts,
                gold=as_json(task.doc_to_target(doc)), metadata=self.doc_metadata({**doc, "split": split})))
        if not out:
            raise UserError("no documents to evaluate: the task's split has no rows")
        return out

    def score_docs(self, instances: Sequence[HarnessInstance], results: Mapping[str, Any]) -> Scored:
        """Score with the task's own filters, `process_results`, aggregations and standard errors."""
        from lm_eval.evaluator_utils import _compute_task_aggregations

        task = built_task(self.config.name)
        for inst in instances:
            for lm_inst, request in zip(inst.lm_instances, inst.requests):
                lm_inst.resps = lm_eval_response(request, results[request.key])
                lm_inst.filtered_resps = {}
        task.apply_filters()
        code_eval.register_prompts(task, [inst.doc for inst in instances])   # the tests' trusted prelude
        raw: dict[tuple[str, str], list] = defaultdict(list)
        doc_metrics: list[dict[str, JSON]] = [{} for _ in instances]
        filtered: list[dict[str, JSON]] = [{} for _ in instances]
        for filter_key in instances[0].lm_instances[0].filtered_resps:
            for i, inst in enumerate(instances):
                responses = [r.filtered_resps[filter_key] for r in inst.lm_instances]
                for metric, value in task.process_results(inst.doc, responses).items():
                    raw[(metric, filter_key)].append(value)
                    doc_metrics[i][metric_key(metric, filter_key)] = as_json(value)
                filtered[i][filter_key] = as_json(responses)
        aggregates, _ = _compute_task_aggregations(task, raw, bootstrap_iters=100000)
        metrics = {metric_key(m, f): _stat(task, m, f, values, aggregates) for (m, f), values in raw.items()}
        records, sidecar = [], []
        for inst, values, by_filter in zip(instances, doc_metrics, filtered):
            record = HarnessRecord(query_id=inst.query_id, doc_id=inst.doc_id, native_id=inst.native_id,
                                   metrics=values,
                                   model_output=tuple(model_output(r, results[r.key]) for r in inst.requests),
                                   filtered=by_filter, target=inst.gold)
            records.append(record)
            sidecar.append(self._sidecar(task, inst, record))
        config = resolved_config(task)
        harness = {"lm_eval_version": lm_eval_version(), "task": task.config.task,
                   "config_sha256": config_digest(config), "config": config, **code_eval.settings(task)}
        return Scored(records, sidecar, metrics, harness=harness)

    def _sidecar(self, task: Any, inst: HarnessInstance, record: HarnessRecord) -> QueryMetadata:
        primary = record.metrics.get(self.config.primary_metric)
        is_correct = bool(primary) if isinstance(primary, (bool, int, float)) and primary in (0, 1) else None
        predicted = record.prediction(self.config.primary_metric)
        gold = inst.gold
        if record.sum_logits() and isinstance(gold, int) and task.config.doc_to_choice is not None:
            choices = task.doc_to_choice(inst.doc)
            gold = choices[gold] if 0 <= gold < len(choices) else gold
            predicted = choices[predicted] if isinstance(predicted, int) and predicted < len(choices) else predicted
        return sidecar_row(self.config, inst, is_correct=is_correct,
                           predicted_answer=None if predicted is None else str(as_json(predicted)),
                           correct_answer=None if gold is None else str(gold))


def _stat(task: Any, metric: str, filter_key: str, values: list, aggregates: Mapping[str, Any]) -> Stat:
    """Return a mean as its sufficient statistics (suites pool them), any other aggregation as lm-eval's value."""
    from lm_eval.api.metrics import mean

    if task.aggregation().get(metric, mean) is mean and all(isinstance(v, (bool, int, float)) for v in values):
        return MeanStat.of(values)
    stderr = aggregates.get(f"{metric}_stderr,{filter_key}")
    return CorpusStat(len(values), float(aggregates[f"{metric},{filter_key}"]),
                      float(stderr) if isinstance(stderr, (int, float)) else float("nan"))
