"""The `proctor` command: parse options, call the library, print. No evaluation logic here."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from proctor.defaults import DEFAULT_MAX_LENGTH, DEFAULT_MODEL
from proctor.data import resolve_data_dir
from proctor.errors import UserError
from proctor.export import TARGETS


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value}")
    return value


def _think_tags(text: str) -> tuple[str, str]:
    opening, comma, closing = text.partition(",")
    if not comma or not closing:
        raise argparse.ArgumentTypeError(f"expected OPEN,CLOSE tags such as <think>,</think>, got {text!r}")
    return opening, closing


def _num_fewshot(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**63 - 1, got {value}")
    return value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. step=1000), got {text!r}")
    return key.strip(), value


def _labels(pairs: Optional[Sequence[tuple[str, str]]]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in pairs or ():
        if key in labels and labels[key] != value:
            raise UserError(f"--label {key} is given twice ({labels[key]!r} and {value!r}); give it once")
        labels[key] = value
    return labels


def _batch_size(text: str):
    return "auto" if text == "auto" else _positive_int(text)


def _specs(values: Sequence[str]) -> list[str]:
    """`--tasks a,b c` -> ["a", "b", "c"], order kept, duplicates dropped."""
    specs: list[str] = []
    for value in values:
        for spec in value.split(","):
            spec = spec.strip()
            if spec and spec not in specs:
                specs.append(spec)
    if not specs:
        raise UserError("--tasks is empty; name at least one task spec (`proctor tasks` lists them)")
    return specs


def build_parser() -> argparse.ArgumentParser:
    from proctor.metrics.clusters import CLUSTER_COLUMNS
    from proctor.version import VERSION

    parser = _Parser(prog="proctor", description="Evaluate language models with reproducible protocols.")
    parser.add_argument("--version", action="version", version=f"proctor {VERSION}")
    include_help = "a task file (.yaml/.toml) or module (.py) of your own, or a directory of them (repeatable)"
    num_fewshot_help = ("few-shot examples in every task's prompts, as lm-eval's --num_fewshot (default: each "
                        "spec's own; an lm-eval task name's: lm-eval's default)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="evaluate a model on task specs")
    run.add_argument("--model", default=DEFAULT_MODEL, help="HF hub id, local dir, .gguf file, or smollm2-135m")
    run.add_argument("--tasks", nargs="+", required=True, help="task or suite specs, e.g. mmlu_stem:mc::olmes")
    run.add_argument("--include", action="append", metavar="PATH", help=include_help)
    run.add_argument("--limit", type=_positive_int, help="only the first N documents of each task")
    run.add_argument("--num-fewshot", type=_num_fewshot, metavar="N", help=num_fewshot_help)
    run.add_argument("--batch-size", type=_batch_size, default="auto", help="rows per batch, or auto")
    run.add_argument("--max-length", type=_positive_int,
                     help=f"context window in tokens (default: OLMES specs {DEFAULT_MAX_LENGTH}, lm-eval-format "
                          "specs the model's context length)")
    _add_chat_options(run)
    run.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: cuda if available, else cpu")
    run.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    run.add_argument("--data-dir", help="local data directory (default: $PROCTOR_DATA_DIR, else the hub)")
    run.add_argument("--output", help="run directory (default: runs/<model>-<time>)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace --output when it holds an earlier proctor run (never other files)")
    run.add_argument(
        "--deterministic",
        action="store_true",
        help="batch-invariant scores: bitwise identical for any batch size and request order (slower)",
    )
    run.add_argument("--seed", type=_seed, default=None,
                     help="run seed every sample's seed derives from (default 1234)")
    run.add_argument(
        "--allow-unsafe-exec",
        action="store_true",
        help="run generated code (HumanEval) even where the sandbox cannot cut off the network",
    )
    run.add_argument("--backend", default="hf", choices=["hf", "llamacpp", "openai", "vllm"],
                     help="transformers (default), llama.cpp (GGUF on CPU), an OpenAI-compatible server, or vLLM")
    run.add_argument("--base-url", help="openai: the server's API root, e.g. http://127.0.0.1:8000/v1")
    run.add_argument("--tokenizer", help="openai: the served model's tokenizer (dir, .gguf, hub id or alias)")
    run.add_argument("--concurrency", type=_positive_int, help="openai: requests in flight (default 8)")
    run.add_argument("--openai-scoring", default="auto", choices=["auto", "echo", "forced"],
                     help="openai: prompt log-probs by echo, or by forcing each token (llama.cpp's server); "
                          "auto probes the server")
    run.add_argument("--openai-extra", type=_json_object,
                     help='openai: extra request fields as JSON, e.g. \'{"repeat_penalty": 1.0, "top_k": 0}\'')
    run.add_argument("--threads", type=_positive_int, help="llamacpp: CPU threads (default: all cores)")
    run.add_argument("--vllm-for-mc", action="store_true",
                     help="vllm: read answer letters from one generated position (OLMES fast path; -999 "
                          "outside the top 20); recorded in metrics.json")
    run.add_argument("--tensor-parallel-size", type=_positive_int, default=1, help="vllm: GPUs per model")
    run.add_argument("--gpu-memory-utilization", type=float,
                     help="vllm: share of GPU memory (default 0.9); with vLLM's CPU build, the share of this "
                          "machine's memory it reserves (default: proctor sizes its key/value cache)")
    run.add_argument("--save-requests", action="store_true", help="also write <task>/requests.jsonl")
    run.add_argument("--label", action="append", type=_label, metavar="KEY=VALUE",
                     help="record a label in metrics.json for reports, e.g. step=1000 (repeatable)")
    run.add_argument("--no-cache", action="store_true",
                     help="neither read nor store results in the result cache ($PROCTOR_CACHE_DIR/results.sqlite)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    tasks = sub.add_parser("tasks", help="list task specs and suites")
    tasks.add_argument("pattern", nargs="?", help="only specs containing this text (or matching this glob)")
    tasks.add_argument("--data-dir", help="count items from this data directory")
    tasks.add_argument("--include", action="append", metavar="PATH", help=include_help)

    prompts = sub.add_parser("prompts", help="write a spec's requests without loading a model")
    prompts.add_argument("--tasks", nargs="+", required=True, help="task or suite specs, e.g. mmlu_stem:mc::olmes")
    prompts.add_argument("--limit", type=_positive_int, help="only the first N documents of each task")
    prompts.add_argument("--num-fewshot", type=_num_fewshot, metavar="N", help=num_fewshot_help)
    prompts.add_argument("--data-dir", help="local data directory (default: $PROCTOR_DATA_DIR, else the hub)")
    prompts.add_argument("--output", required=True, help="directory for <task>/requests.jsonl")
    prompts.add_argument("--include", action="append", metavar="PATH", help=include_help)
    prompts.add_argument("--overwrite", action="store_true", help="replace --output when it holds earlier prompts")
    _add_chat_options(prompts)
    prompts.add_argument("--model", default=DEFAULT_MODEL,
                         help="whose tokenizer renders chat prompts (dir, .gguf, hub id or alias)")

    verify = sub.add_parser("verify", help="check item counts, query ids and reasoning types against the seed")
    verify.add_argument("--data-dir", help="local data directory (default: $PROCTOR_DATA_DIR)")

    compare = sub.add_parser("compare", help="two run directories item by item: agreement and a paired comparison")
    compare.add_argument("run_a", help="a run directory")
    compare.add_argument("run_b", help="another run directory of the same specs")
    compare.add_argument("--json", help="also write the comparison as JSON to this file")
    compare.add_argument("--cluster-by", choices=CLUSTER_COLUMNS,
                         help="count documents that share this sidecar column as one cluster (e.g. MMLU subject)")

    report = sub.add_parser("report", help="a self-contained HTML report of one or more run directories")
    report.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directories: two get a paired comparison, several a curve (by --label step)")
    report.add_argument("--output", required=True, help="the HTML file to write, e.g. report.html")
    report.add_argument("--cluster-by", choices=CLUSTER_COLUMNS,
                        help="count documents that share this sidecar column as one cluster (e.g. MMLU subject)")
    report.add_argument("--overwrite", action="store_true", help="replace --output when it is an earlier report")

    export = sub.add_parser("export", help="a run's queries for another tool").add_subparsers(
        dest="export_format", required=True, metavar="FORMAT")
    bergson = export.add_parser("bergson", help="a pre-tokenized dataset for Bergson's data attribution "
                                "(`bergson build INDEX --dataset DIR`)")
    bergson.add_argument("run", metavar="RUN", help="a run directory written with --save-requests")
    bergson.add_argument("--output", required=True, help="the export directory to write")
    bergson.add_argument("--target", default="gold", choices=TARGETS,
                         help="what each query's row scores: the gold answer (default), the model's prediction, "
                              "or every generated sample (generation tasks)")
    bergson.add_argument("--tokenizer", help="the tokenizer (default: the run's model's)")
    bergson.add_argument("--overwrite", action="store_true", help="replace --output when it is an earlier export")

    attribution = sub.add_parser("attribution", help="data-attribution scores joined back onto query_id").add_subparsers(
        dest="attribution_step", required=True, metavar="STEP")
    join = attribution.add_parser("join", help="Bergson's scores of an export as a Parquet table keyed by query_id")
    join.add_argument("export", metavar="EXPORT", help="the directory `proctor export bergson` wrote")
    join.add_argument("scores", metavar="SCORES", help="the directory `bergson score` wrote")
    join.add_argument("--output", help="the Parquet file (default: attribution.parquet in the run directory, "
                      "beside query_metadata.parquet)")
    join.add_argument("--top", type=_positive_int, help="keep each query's K strongest training rows (default: all)")

    from proctor.factual.cli import add_parser as add_factual

    add_factual(sub, _positive_int, _batch_size, _json_object)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from proctor.api import evaluate
    from proctor.backends.redact import redact_url
    from proctor.engine.distributed import DistributedContext
    from proctor.engine.gen_plan import DEFAULT_SEED
    from proctor.outputs.owned import check_output_dir
    from proctor.report import print_results

    output = Path(args.output or f"runs/{Path(args.model).name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    is_main = DistributedContext.from_env().is_main
    if is_main:  # checked here too so that a refusal names the CLI's options
        check_output_dir(output, overwrite=args.overwrite)
    result = evaluate(
        args.model, tasks=_specs(args.tasks), limit=args.limit, num_fewshot=args.num_fewshot,
        batch_size=args.batch_size,
        max_length=args.max_length, device=args.device, dtype=args.dtype, data_dir=args.data_dir, output=output,
        overwrite=args.overwrite, seed=DEFAULT_SEED if args.seed is None else args.seed,
        deterministic=args.deterministic, backend=args.backend, include=args.include or (),
        allow_unsafe_exec=args.allow_unsafe_exec, save_requests=args.save_requests, progress=not args.no_progress,
        cache=not args.no_cache,
        tokenizer=args.tokenizer, base_url=args.base_url, concurrency=args.concurrency,
        openai_scoring=args.openai_scoring, openai_extra=args.openai_extra, threads=args.threads,
        vllm_for_mc=args.vllm_for_mc, tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        chat_template=args.chat_template, fewshot_as_multiturn=args.fewshot_as_multiturn,
        system_instruction=args.system_instruction, think_tags=args.think_tags or False,
        labels=_labels(args.label), command=["proctor", *map(redact_url, sys.argv[1:])])
    if is_main:
        _print_alias_notes(args)
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print_results(result.primary_scores, list(result.tasks.values()))
        print(f"wrote {output}")
    return 0


def _add_chat_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chat-template", nargs="?", const=True, default=False, metavar="FILE",
                        help="lay prompts out as chat messages rendered with the tokenizer's chat template "
                             "(or this Jinja file's), as lm-eval's --apply_chat_template")
    parser.add_argument("--fewshot-as-multiturn", action=argparse.BooleanOptionalAction, default=None,
                        help="few-shot examples as user/assistant turns (default: on with --chat-template)")
    parser.add_argument("--system-instruction", metavar="TEXT",
                        help="lm-eval-format specs: a system message before the description")
    parser.add_argument("--think-tags", nargs="?", const="<think>,</think>", type=_think_tags,
                        metavar="OPEN,CLOSE",
                        help="generation tasks: read answers without reasoning spans (default tags "
                             "<think>,</think>); the records keep the whole text")


def _print_alias_notes(args: argparse.Namespace) -> None:
    """Say what each lm-eval task name given stands for."""
    from proctor.tasks.aliases import alias_note

    for spec in _specs(args.tasks):
        note = alias_note(spec, args.num_fewshot)
        if note:
            print(f"proctor: {note}", file=sys.stderr)


def _include(args: argparse.Namespace) -> None:
    if args.include:
        from proctor.tasks.plugins import include

        include(args.include)


def cmd_tasks(args: argparse.Namespace) -> int:
    from proctor.report import print_task_table
    from proctor.tasks.registry import task_rows

    _include(args)
    print_task_table(task_rows(args.pattern, resolve_data_dir(args.data_dir)))
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    from proctor.outputs.atomic import staged_directory
    from proctor.outputs.owned import check_output_dir
    from proctor.outputs.requests_file import request_rows
    from proctor.outputs.run_dir import task_dir_name, write_jsonl
    from proctor.api import chat_template_file, prompt_options
    from proctor.pipeline import plan

    output = Path(args.output)
    check_output_dir(output, overwrite=args.overwrite)
    _include(args)
    template_file = chat_template_file(args.chat_template)
    options = prompt_options(chat_template=args.chat_template, fewshot_as_multiturn=args.fewshot_as_multiturn,
                             system_instruction=args.system_instruction, num_fewshot=args.num_fewshot,
                             think_tags=args.think_tags or False)
    evaluation = plan(_specs(args.tasks), resolve_data_dir(args.data_dir), args.limit, options)
    render = _chat_renderer(args.model, template_file) if evaluation.has_chats() else None
    with staged_directory(output, overwrite=args.overwrite) as stage:
        for run in evaluation.tasks.values():
            write_jsonl(stage / task_dir_name(run.config.name) / "requests.jsonl",
                        request_rows(run.instances, render))
    count = sum(len(run.instances) for run in evaluation.tasks.values())
    print(f"wrote requests for {count} documents of {len(evaluation.tasks)} tasks to {output}")
    return 0


def _chat_renderer(model: str, template_file: Optional[str]) -> Callable[[Any], str]:
    """A chat request's prompt as `model`'s tokenizer renders it (its template, or the file's)."""
    from proctor.backends.openai_api import load_tokenizer
    from proctor.backends.sources import ALIASES
    from proctor.engine.chat import ChatTemplate
    from proctor.engine.tokens import TokenizationPolicy

    tokenizer, _ = load_tokenizer(None if model in ALIASES else model, model)
    policy = TokenizationPolicy(tokenizer, max_length=DEFAULT_MAX_LENGTH,
                                chat_template=ChatTemplate.resolve(template_file, tokenizer))
    return lambda request: policy.text(request.context, request.policy)


def cmd_verify(args: argparse.Namespace) -> int:
    from proctor.verify import format_report, verify

    data_dir = resolve_data_dir(args.data_dir)
    report = verify(data_dir)
    print(format_report(report))
    return 1 if report.errors else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from proctor.compare import compare_runs, comparison_json
    from proctor.outputs.owned import check_output_file, write_owned_file
    from proctor.outputs.run_dir import json_ready
    from proctor.report import print_agreement

    if args.json:
        check_output_file(Path(args.json), option="--json")
    comparison = compare_runs(Path(args.run_a), Path(args.run_b), args.cluster_by)
    print_agreement(comparison, args.run_a, args.run_b)
    if args.json:
        doc = comparison_json(comparison, args.run_a, args.run_b, args.cluster_by)
        text = json.dumps(json_ready(doc), indent=2) + "\n"   # NaN (an undefined error) as null
        write_owned_file(Path(args.json), text.encode(), option="--json")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from proctor.report.html import write_report

    write_report([Path(r) for r in args.runs], Path(args.output), cluster_by=args.cluster_by,
                 overwrite=args.overwrite)
    print(f"wrote {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import datasets

    from proctor.export.bergson import export_bergson

    datasets.disable_progress_bars()
    manifest = export_bergson(Path(args.run), Path(args.output), target=args.target, tokenizer=args.tokenizer,
                              overwrite=args.overwrite)
    print(f"wrote {args.output}: {manifest.rows} rows ({args.target}) of {len(manifest.tasks)} tasks")
    for name, why in manifest.left_out.items():
        print(f"  left out {name}: {why}")
    model = manifest.bergson_model or "MODEL"
    print(f"next: bergson build INDEX --model {model} --dataset {args.output} --projection_dim 16\n"
          f"      bergson score SCORES --model {model} --dataset TRAIN --query_path INDEX --score individual "
          f"--projection_dim 16\n"
          f"      proctor attribution join {args.output} SCORES")
    return 0


def cmd_attribution(args: argparse.Namespace) -> int:
    from proctor.export.attribution import join_scores

    out, rows = join_scores(Path(args.export), Path(args.scores), None if args.output is None else Path(args.output),
                            top=args.top)
    print(f"wrote {out}: {rows} (query, training row) scores")
    return 0


def cmd_factual(args: argparse.Namespace) -> int:
    from proctor.factual.cli import run_command

    return run_command(args)


COMMANDS = {"run": cmd_run, "tasks": cmd_tasks, "prompts": cmd_prompts, "verify": cmd_verify,
            "compare": cmd_compare, "report": cmd_report, "export": cmd_export, "attribution": cmd_attribution,
            "factual": cmd_factual}


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as err:
        print(f"proctor: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proctor: interrupted; finished requests are cached, rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
