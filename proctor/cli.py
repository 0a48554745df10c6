"""The `proctor` command: parse options, call the library, print. No evaluation logic here."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from proctor.data import resolve_data_dir
from proctor.errors import UserError

DEFAULT_MODEL = "smollm2-135m"


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
    parser = _Parser(prog="proctor", description="Evaluate language models with reproducible protocols.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="evaluate a model on task specs")
    run.add_argument("--model", default=DEFAULT_MODEL, help="HF hub id, local dir, .gguf file, or smollm2-135m")
    run.add_argument("--tasks", nargs="+", required=True, help="task or suite specs, e.g. mmlu_stem:mc::olmes")
    run.add_argument("--limit", type=_positive_int, help="only the first N documents of each task")
    run.add_argument("--batch-size", type=_batch_size, default="auto", help="rows per batch, or auto")
    run.add_argument("--max-length", type=_positive_int, default=2048, help="context window in tokens")
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
    run.add_argument("--gpu-memory-utilization", type=float, help="vllm: share of GPU memory (default 0.9)")
    run.add_argument("--save-requests", action="store_true", help="also write <task>/requests.jsonl")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    tasks = sub.add_parser("tasks", help="list task specs and suites")
    tasks.add_argument("pattern", nargs="?", help="only specs containing this text (or matching this glob)")
    tasks.add_argument("--data-dir", help="count items from this data directory")

    prompts = sub.add_parser("prompts", help="write a spec's requests without loading a model")
    prompts.add_argument("--tasks", nargs="+", required=True)
    prompts.add_argument("--limit", type=_positive_int)
    prompts.add_argument("--data-dir")
    prompts.add_argument("--output", required=True)
    prompts.add_argument("--overwrite", action="store_true", help="replace --output when it holds earlier prompts")

    verify = sub.add_parser("verify", help="check item counts, query ids and reasoning types against the seed")
    verify.add_argument("--data-dir")

    compare = sub.add_parser("compare", help="per-item agreement of two run directories (e.g. two backends)")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--json", help="also write the agreement as JSON to this file")

    from proctor.factual.cli import add_parser as add_factual

    add_factual(sub, _positive_int)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from proctor.backends.redact import redact_url
    from proctor.backends.select import BackendOptions, backend_record, check_backend_options, open_backend
    from proctor.backends.models import cache_root
    from proctor.engine import Engine, ResultCache
    from proctor.engine.distributed import DistributedContext
    from proctor.engine.gen_plan import DEFAULT_SEED
    from proctor.evaluate import evaluate, plan, primary_scores, requests_of
    from proctor.evaluate_generation import prepare_code_execution
    from proctor.outputs.atomic import staged_directory
    from proctor.outputs.owned import check_output_dir
    from proctor.outputs.provenance import code_git_state, library_versions
    from proctor.outputs.run_dir import write_run
    from proctor.report import print_results

    ranks = DistributedContext.from_env()  # torchrun's RANK/WORLD_SIZE; one rank without it
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    specs = _specs(args.tasks)
    data_dir = resolve_data_dir(args.data_dir)
    output = Path(args.output or f"runs/{Path(args.model).name}-{started:%Y%m%d-%H%M%S}")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    # Everything that can be checked is checked before any data or model work.
    if ranks.is_main:
        check_output_dir(output, overwrite=args.overwrite)
    backend_options = BackendOptions(
        backend=args.backend, model=args.model, max_length=args.max_length,
        device=ranks.device(args.device) if args.backend == "hf" else args.device,
        dtype=args.dtype, seed=seed, base_url=args.base_url, tokenizer=args.tokenizer,
        concurrency=args.concurrency, openai_scoring=args.openai_scoring, openai_extra=args.openai_extra,
        threads=args.threads, vllm_for_mc=args.vllm_for_mc,
        tensor_parallel_size=args.tensor_parallel_size, gpu_memory_utilization=args.gpu_memory_utilization)
    check_backend_options(backend_options)
    cache = ResultCache(cache_root() / "results.sqlite")
    evaluation = plan(specs, data_dir, args.limit)
    prepare_code_execution(evaluation, args.allow_unsafe_exec)  # a refusal costs no model load
    data_seconds = time.perf_counter() - t0

    ranks.start()
    backend = ranks.in_turn(lambda: open_backend(backend_options))
    load_seconds = time.perf_counter() - t0 - data_seconds
    engine = Engine(
        backend,
        batch_size=args.batch_size,
        cache=cache,
        progress=not args.no_progress and ranks.is_main,
        deterministic=args.deterministic,
        seed=seed,
        distributed=ranks,
    )
    if not ranks.is_main:  # the engine calls `evaluate` makes on rank 0, which scores and writes
        scored, generated = requests_of(evaluation)
        engine.run(scored)
        engine.generate(generated)
        engine.total_stats()
        ranks.stop()
        return 0
    t_eval = time.perf_counter()
    evaluate(evaluation, engine)
    eval_seconds = time.perf_counter() - t_eval
    stats = engine.total_stats()  # every rank's work
    ranks.stop()
    scores = primary_scores(evaluation)
    runs = list(evaluation.tasks.values())
    warnings = [w for run in runs for w in run.warnings] + cache.tampered_warning()
    metrics = {
        "primary_scores": scores,
        "tasks": {run.config.name: run.summary() for run in runs},
        "model_config": {
            **backend_record(backend, backend_options),
            "model": args.model,
            "fingerprint": backend.fingerprint,
            "dtype": str(backend.dtype).removeprefix("torch."),
            "device": str(backend.device),
            "max_length": args.max_length,
            "batch_size": args.batch_size,
            "deterministic": args.deterministic,
            "seed": seed,
        },
        "run_config": {"tasks": specs, "limit": args.limit, "data_dir": str(data_dir) if data_dir else None,
                       "world_size": ranks.world_size},
        "versions": library_versions(),
        "git": code_git_state(),
        "command": ["proctor", *map(redact_url, sys.argv[1:])],
        "warnings": warnings,
        "timing": {
            "started": started.isoformat(),
            "finished": datetime.now(timezone.utc).isoformat(),
            "total_seconds": time.perf_counter() - t0,
            "data_seconds": data_seconds,
            "model_load_seconds": load_seconds,
            "evaluation_seconds": eval_seconds,
            # from the command's start to the first scored batch stored (None: all cached)
            "time_to_first_batch_seconds": None
            if stats.first_batch_seconds is None
            else t_eval - t0 + stats.first_batch_seconds,
        },
        "engine": {
            **asdict(stats),
            "tokens_per_second": stats.tokens_run / eval_seconds if eval_seconds else None,
            "generated_tokens_per_second": stats.gen_tokens / stats.gen_seconds
            if stats.gen_seconds and stats.gen_tokens else None,
        },
    }
    with staged_directory(output, overwrite=args.overwrite) as stage:
        write_run(stage, runs, metrics, save_requests=args.save_requests)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print_results(scores, runs)
    print(f"wrote {output}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from proctor.report import print_task_table
    from proctor.tasks.registry import task_rows

    print_task_table(task_rows(args.pattern, resolve_data_dir(args.data_dir)))
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    from proctor.evaluate import plan
    from proctor.outputs.atomic import staged_directory
    from proctor.outputs.owned import check_output_dir
    from proctor.outputs.requests_file import request_rows
    from proctor.outputs.run_dir import task_dir_name, write_jsonl

    output = Path(args.output)
    check_output_dir(output, overwrite=args.overwrite)
    evaluation = plan(_specs(args.tasks), resolve_data_dir(args.data_dir), args.limit)
    with staged_directory(output, overwrite=args.overwrite) as stage:
        for run in evaluation.tasks.values():
            write_jsonl(stage / task_dir_name(run.config.name) / "requests.jsonl", request_rows(run.instances))
    count = sum(len(run.instances) for run in evaluation.tasks.values())
    print(f"wrote requests for {count} documents of {len(evaluation.tasks)} tasks to {output}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from proctor.verify import format_report, verify

    data_dir = resolve_data_dir(args.data_dir)
    report = verify(data_dir)
    print(format_report(report))
    return 1 if report.errors else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from proctor.compare import compare_runs
    from proctor.outputs.owned import check_output_file, write_owned_file
    from proctor.report import print_agreement

    if args.json:
        check_output_file(Path(args.json), option="--json")
    agreement = compare_runs(Path(args.run_a), Path(args.run_b))
    print_agreement(agreement, args.run_a, args.run_b)
    if args.json:
        text = json.dumps([a.to_dict() for a in agreement], indent=2) + "\n"
        write_owned_file(Path(args.json), text.encode(), option="--json")
    return 0


def cmd_factual(args: argparse.Namespace) -> int:
    from proctor.factual.cli import run_command

    return run_command(args)


COMMANDS = {"run": cmd_run, "tasks": cmd_tasks, "prompts": cmd_prompts, "verify": cmd_verify,
            "compare": cmd_compare, "factual": cmd_factual}


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
