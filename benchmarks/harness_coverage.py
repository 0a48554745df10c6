"""Which of lm-eval's own tasks and groups the bridge builds offline from a local data directory, and their token ids.

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1 \
        python benchmarks/harness_coverage.py --data-dir /work/shared/data --json /tmp/coverage.json

No model is loaded; the run takes a few minutes on one CPU thread.

Tasks. lm-eval's task index (`proctor.harness.specs.task_manager()`, its shipped YAML files with
includes merged) is walked; every leaf task whose `dataset_path` proctor serves from
`--data-dir` (`proctor.harness.offline.local_loader_of`: `proctor.data.local.LOADERS` and
`SAME_ROWS`) is built through the bridge offline, `proctor.pipeline.plan(["lm_eval:<task>"],
data_dir, 20)`, and recorded: its family (`dataset_path`) and variant (its YAML directory), the
number of evaluation documents, the effective num_fewshot, output_type and the request count of
the first 20 documents, or the one-line error. A task that fails is classed "no local data" when
proctor's own reader cannot read its evaluation split from the directory (BIG-bench tasks the
directory lacks, TruthfulQA's generation config) and "error" otherwise: a task whose data is there
but which the bridge cannot build.

Groups and tags. Every lm-eval group or tag with at least one served leaf is listed with its
leaves and resolved through the bridge (`plan`, limit 1): its member and task counts, or the one
line that refuses it (a member without local data).

Token ids (`--no-tokens` skips them). For the first 20 documents' requests of every task built,
the model inputs proctor's engine computes under the lm_eval policy
(`proctor.engine.tokens.TokenizationPolicy.request_windows` / `request_generation_contexts`, as
`proctor.engine.engine` builds it: max_length 2048) are compared with lm-eval's HFLM over a tiny
random Llama with SmolLM2-135M's tokenizer: for loglikelihood requests the (context, continuation)
ids `HFLM.loglikelihood` hands to `_loglikelihood_tokens` (its `_encode_pair`, or the prefix token
for an empty context) and the input that left-truncates them to max_length; for generate_until
the context ids of `HFLM.tok_batch_encode` with its left truncation (max_length - max_gen_toks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

LIMIT = 20
MAX_LENGTH = 2048


@dataclass
class TaskRow:
    """One lm-eval leaf task whose dataset proctor serves locally."""

    name: str
    family: str                          # dataset_path
    config: Optional[str]                # dataset_name
    variant: str                         # the task's YAML directory under lm_eval/tasks
    status: str = "ok"                   # ok | no local data | error
    error: Optional[str] = None
    documents: Optional[int] = None
    num_fewshot: Optional[int] = None
    output_type: Optional[str] = None
    requests: Optional[int] = None       # of the first LIMIT documents
    compared: int = 0                    # requests whose token ids were compared
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class GroupRow:
    """One lm-eval group or tag with at least one locally served leaf."""

    name: str
    kind: str                            # group | tag
    leaves: int                          # leaf tasks under it (recursively)
    served: int                          # of them, with a dataset proctor serves
    built: int                           # of them, built OK in the task pass
    status: str = "not tried"            # ok | error (one line: why) | not tried (no leaf built)
    error: Optional[str] = None
    members: Optional[int] = None        # direct members of the resolved suite
    tasks: Optional[int] = None          # leaf tasks the resolved spec runs
    seconds: float = 0.0


# ---- lm-eval's index -------------------------------------------------------------------


def variant_of(entry: Any) -> str:
    """Return the directory of a task's YAML file under lm-eval's tasks/ (e.g. `mmlu/default`)."""
    path = str(entry.yaml_path or "")
    return path.split("/tasks/", 1)[-1].rsplit("/", 1)[0] if "/tasks/" in path else "?"


def served_leaves(index: dict[str, Any]) -> dict[str, Any]:
    """Return the leaf tasks of lm-eval's index whose dataset proctor serves from a data directory."""
    from proctor.harness.offline import local_loader_of

    return {name: entry for name, entry in index.items()
            if entry.kind.name in ("TASK", "PY_TASK") and local_loader_of((entry.cfg or {}).get("dataset_path"))}


def leaves_of(name: str, index: dict[str, Any], seen: Optional[set] = None) -> set[str]:
    """Return the leaf task names under an index name (a group's `task:` list, a tag's tagged tasks)."""
    seen = set() if seen is None else seen
    if name in seen or name not in index:
        return set()
    seen.add(name)
    entry = index[name]
    kind = entry.kind.name
    if kind in ("TASK", "PY_TASK"):
        return {name}
    if kind == "TAG":
        members: Iterable = entry.tags
    else:
        members = (entry.cfg or {}).get("task") or []
        members = members if isinstance(members, list) else [members]
    out: set[str] = set()
    for member in members:
        if isinstance(member, dict):  # an inline subgroup or an overridden task
            inner = member.get("task") or []
            for m in inner if isinstance(inner, list) else [inner]:
                out |= leaves_of(m, index, seen) if isinstance(m, str) else set()
        elif isinstance(member, str):
            out |= leaves_of(member, index, seen)
    return out


# ---- token ids -------------------------------------------------------------------------


class TokenCheck:
    """proctor's lm_eval tokenization policy against HFLM's, with SmolLM2-135M's tokenizer and no real model."""

    def __init__(self, tokenizer: Any, max_length: int = MAX_LENGTH):
        import torch
        import transformers
        from lm_eval.models.huggingface import HFLM

        from proctor.engine.tokens import TokenizationPolicy

        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                          max_position_embeddings=max_length)
        tiny = transformers.LlamaForCausalLM(config)
        self.lm = HFLM(pretrained=tiny, tokenizer=tokenizer, batch_size=1, max_length=max_length)
        self.policy = TokenizationPolicy(tokenizer, max_length=max_length, lm_eval_max_length=max_length)

    def lm_eval_pairs(self, lm_instances: list) -> list[tuple[list[int], list[int]]]:
        """Return the (context, continuation) ids HFLM's loglikelihood gives `_loglikelihood_tokens`."""
        captured: list = []

        def capture(requests: list, **_: Any) -> list:
            captured.extend(requests)
            return [(0.0, False)] * len(requests)

        self.lm._loglikelihood_tokens = capture  # the model is never called
        try:
            self.lm.loglikelihood(lm_instances, disable_tqdm=True)
        finally:
            del self.lm._loglikelihood_tokens
        return [(list(ctx), list(cont)) for _, ctx, cont in captured]

    def lm_eval_generation_context(self, context: str, gen_kwargs: dict) -> list[int]:
        """Return the context ids HFLM's generate_until feeds the model (one request a batch)."""
        from lm_eval.models.utils import normalize_gen_kwargs

        max_gen_toks = normalize_gen_kwargs(dict(gen_kwargs), self.lm.max_gen_toks)["max_gen_toks"]
        ids, _ = self.lm.tok_batch_encode([context], left_truncate_len=self.lm.max_length - max_gen_toks,
                                          truncation=self.lm.truncation)
        return ids[0].tolist()

    def compare(self, instances: list) -> tuple[int, list[str]]:
        """Compare every request of the bridge's instances; return the count and a line per mismatch."""
        from proctor.requests import Generate, Loglikelihood

        loglik, generate = [], []
        for inst in instances:
            for request, lm_inst in zip(inst.requests, inst.lm_instances):
                if isinstance(request, Loglikelihood):
                    loglik.append((inst.query_id, request, lm_inst))
                elif isinstance(request, Generate):
                    generate.append((inst.query_id, request, lm_inst))
        bad: list[str] = []
        if loglik:
            ours = self.policy.request_windows([r for _, r, _ in loglik])
            theirs = self.lm_eval_pairs([i for _, _, i in loglik])
            n = self.lm.max_length
            for (qid, request, _), window, (ctx, cont) in zip(loglik, ours, theirs):
                inputs = (ctx + cont)[-(n + 1):][:-1]  # HFLM._loglikelihood_tokens' input
                if list(window.inputs) != inputs or list(window.targets) != cont:
                    bad.append(f"{qid} loglikelihood continuation {request.continuation!r}: proctor "
                               f"{list(window.inputs)[-6:]}|{list(window.targets)} lm-eval {inputs[-6:]}|{cont}")
        if generate:
            contexts = self.policy.request_generation_contexts([r for _, r, _ in generate])
            for (qid, _, lm_inst), mine in zip(generate, contexts):
                ref = self.lm_eval_generation_context(lm_inst.args[0], lm_inst.args[1])
                if list(mine.tokens) != ref:
                    bad.append(f"{qid} generate_until: proctor {len(mine.tokens)} ids {list(mine.tokens)[:6]}... "
                               f"lm-eval {len(ref)} ids {ref[:6]}...")
        return len(loglik) + len(generate), bad


# ---- building through the bridge -------------------------------------------------------


def local_data_error(entry: Any, data_dir: Path) -> Optional[str]:
    """Return proctor's reader's error for the task's evaluation split, or None when the directory has it."""
    from proctor.data.local import LOADERS
    from proctor.errors import UserError
    from proctor.harness.offline import local_loader_of

    cfg = entry.cfg or {}
    split = cfg.get("test_split") or cfg.get("validation_split")  # the split lm-eval evaluates
    try:
        LOADERS[local_loader_of(cfg["dataset_path"])](data_dir, cfg.get("dataset_name"), split)
    except UserError as e:
        return str(e).splitlines()[0]
    return None


def build_task(name: str, entry: Any, data_dir: Path, check: Optional[TokenCheck]) -> TaskRow:
    """Build one leaf through the bridge (first LIMIT documents) and record it."""
    from proctor.harness.library import PREFIX, built_task, quiet
    from proctor.harness.offline import first_line
    from proctor.pipeline import PromptOptions, plan

    cfg = entry.cfg or {}
    row = TaskRow(name, str(cfg.get("dataset_path")), cfg.get("dataset_name"), variant_of(entry))
    started = time.perf_counter()
    spec = PREFIX + name
    try:
        run = plan([spec], data_dir, LIMIT, PromptOptions()).tasks[spec]
        task = built_task(spec)
        with quiet():  # a task's process_docs (datasets.map) runs on each eval_docs
            row.documents = len(task.eval_docs)
        row.num_fewshot = task.get_config("num_fewshot")
        row.output_type = task.get_config("output_type")
        row.requests = sum(len(inst.requests) for inst in run.instances)
        if check is not None:
            row.compared, row.mismatches = check.compare(run.instances)
    except Exception as e:  # UserError from the bridge, or anything else: recorded, never fatal
        missing = local_data_error(entry, data_dir)
        row.status = "no local data" if missing else "error"
        row.error = missing or f"{type(e).__name__}: {first_line(e)}"
    row.seconds = round(time.perf_counter() - started, 2)
    return row


def resolve_group(name: str, index: dict[str, Any], rows: dict[str, TaskRow], data_dir: Path) -> GroupRow:
    """List a group's or tag's leaves; resolve it through the bridge (limit 1) when at least one of them built."""
    from proctor.harness.library import PREFIX
    from proctor.harness.offline import first_line
    from proctor.pipeline import PromptOptions, plan
    from proctor.tasks.registry import suite

    leaves = leaves_of(name, index)
    served = [t for t in leaves if t in rows]
    built = [t for t in served if rows[t].status == "ok"]
    group = GroupRow(name, index[name].kind.name.lower(), len(leaves), len(served), len(built))
    if not built:
        return group
    started = time.perf_counter()
    try:
        evaluation = plan([PREFIX + name], data_dir, 1, PromptOptions())
        group.status, group.tasks = "ok", len(evaluation.tasks)
        group.members = len(suite(PREFIX + name).members)
    except Exception as e:
        group.status, group.error = "error", f"{type(e).__name__}: {first_line(e)}"
    group.seconds = round(time.perf_counter() - started, 2)
    return group


# ---- the report ------------------------------------------------------------------------


def family_table(rows: list[TaskRow]) -> list[str]:
    """Markdown: per family and variant, tasks OK/total, their documents, token comparisons and notes."""
    lines = ["| family (dataset_path) | variant | tasks OK/total | documents | output_type | requests compared "
             "| token mismatches | notes |", "|---|---|---|---|---|---|---|---|"]
    by: dict[tuple[str, str], list[TaskRow]] = defaultdict(list)
    for row in rows:
        by[(row.family, row.variant)].append(row)
    for (family, variant), group in sorted(by.items()):
        ok = [r for r in group if r.status == "ok"]
        absent = [r for r in group if r.status == "no local data"]
        errors = [r for r in group if r.status == "error"]
        notes = []
        if absent:
            notes.append(f"{len(absent)} without local data")
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            notes.append(f"{errors[0].name}{more}: {errors[0].error[:300]}")
        kinds = "/".join(sorted({r.output_type for r in ok if r.output_type}))
        lines.append(f"| {family} | {variant} | {len(ok)}/{len(group)} | {sum(r.documents or 0 for r in ok)} "
                     f"| {kinds} | {sum(r.compared for r in ok)} | {sum(len(r.mismatches) for r in ok)} "
                     f"| {'; '.join(notes)} |")
    return lines


def group_table(groups: list[GroupRow]) -> list[str]:
    """Markdown: the groups and tags, resolved or why not."""
    lines = ["| group/tag | kind | leaves | served | built | resolves offline | members | tasks | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        note = g.error or ""
        lines.append(f"| {g.name} | {g.kind} | {g.leaves} | {g.served} | {g.built} | {g.status} "
                     f"| {g.members if g.members is not None else ''} | {g.tasks if g.tasks is not None else ''} "
                     f"| {note[:300]} |")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--json", type=Path, help="write every task and group row here")
    parser.add_argument("--tasks", help="only these leaf tasks (comma-separated), e.g. to re-check a few")
    parser.add_argument("--no-tokens", action="store_true", help="skip the token-id comparison with HFLM")
    args = parser.parse_args(argv)

    from proctor.harness.specs import task_manager
    from proctor.runtime import open_tokenizer

    started = time.perf_counter()
    index = task_manager().task_index
    leaves = served_leaves(index)
    if args.tasks:
        leaves = {n: leaves[n] for n in args.tasks.split(",")}
    check = None if args.no_tokens else TokenCheck(open_tokenizer("smollm2-135m").tokenizer)
    rows: dict[str, TaskRow] = {}
    for i, (name, entry) in enumerate(sorted(leaves.items())):
        rows[name] = build_task(name, entry, args.data_dir, check)
        r = rows[name]
        print(f"[{i + 1}/{len(leaves)}] {name}: {r.status} {r.error or ''} {r.documents or ''} "
              f"compared={r.compared} mismatches={len(r.mismatches)} {r.seconds}s", file=sys.stderr, flush=True)
    groups: list[GroupRow] = []
    if not args.tasks:
        for name in sorted(n for n, e in index.items() if e.kind.name in ("GROUP", "TAG")):
            if leaves_of(name, index) & rows.keys():
                groups.append(resolve_group(name, index, rows, args.data_dir))
                print(f"group {name}: {groups[-1].status}", file=sys.stderr, flush=True)
    seconds = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_text(json.dumps({"data_dir": str(args.data_dir), "limit": LIMIT, "seconds": seconds,
                                         "tasks": [asdict(r) for r in rows.values()],
                                         "groups": [asdict(g) for g in groups]}, indent=1) + "\n")
    ok = sum(r.status == "ok" for r in rows.values())
    print(f"## lm-eval tasks served from {args.data_dir}: {ok}/{len(rows)} build offline ({seconds} s)\n")
    print("\n".join(family_table(list(rows.values()))))
    if groups:
        print("\n" + "\n".join(group_table(groups)))
    mismatched = [m for r in rows.values() for m in r.mismatches]
    if mismatched:
        print("\nToken-id mismatches (first 20):\n" + "\n".join(mismatched[:20]))
    errors = [r for r in rows.values() if r.status == "error"]
    return 1 if mismatched or errors else 0


if __name__ == "__main__":
    sys.exit(main())
