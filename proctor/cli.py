"""The `proctor` command: parse options, call the library, print. No evaluation logic here."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, Sequence

from proctor.data import resolve_data_dir
from proctor.defaults import DEFAULT_MAX_LENGTH
from proctor.errors import UserError, on_command_line
from proctor.export import TARGETS
from proctor.option import parse_positive_int
from proctor.options import add_flags, keywords_of

#: the `proctor run` options `proctor prompts` takes (it loads no model, at most a tokenizer)
PROMPT_FLAGS = ("tasks", "limit", "num_fewshot", "data_dir", "output", "include", "overwrite", "chat_template",
                "fewshot_as_multiturn", "system_instruction", "gen_kwargs", "think_tags", "model")


#: `proctor run`'s flags that say how the results print, not how the run goes (so not run options)
DISPLAY_FLAGS = {"--per-task": "also print every task's metrics (a suite's members), not only the primary scores"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """Build the parser of `proctor` and all its subcommands."""
    from proctor.metrics.clusters import CLUSTER_COLUMNS
    from proctor.outputs.checked import add_read_flags
    from proctor.version import VERSION

    parser = _Parser(prog="proctor", description="Evaluate language models with reproducible protocols.")
    parser.add_argument("--version", action="version", version=f"proctor {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="evaluate a model on task specs")
    add_flags(run)
    for flag, help_text in DISPLAY_FLAGS.items():  # how the results print: no evaluate() keyword
        run.add_argument(flag, action="store_true", help=help_text)

    sub.add_parser("lm-eval", add_help=False,  # main() hands its arguments to lm-eval's command line
                   help="lm-eval's own command line, with proctor as --model proctor ([--data-dir DIR] first)")

    tasks = sub.add_parser("tasks", help="list task specs and suites")
    tasks.add_argument("pattern", nargs="?", help="only specs containing this text (or matching this glob)")
    tasks.add_argument("--data-dir", help="count items from this data directory")
    add_flags(tasks, ("include",))

    prompts = sub.add_parser("prompts", help="write a spec's requests without loading a model")
    add_flags(prompts, PROMPT_FLAGS, required=("output",), help={
        "output": "directory for <task>/requests.jsonl",
        "overwrite": "replace --output when it holds earlier prompts",
        "model": "whose tokenizer renders chat prompts (dir, .gguf, hub id or alias)"})

    verify = sub.add_parser("verify", help="check item counts, query ids and reasoning types against the seed")
    verify.add_argument("--data-dir", help="local data directory (default: $PROCTOR_DATA_DIR)")

    compare = sub.add_parser("compare", help="two run directories item by item: agreement and a paired comparison")
    compare.add_argument("run_a", help="a run directory")
    compare.add_argument("run_b", help="another run directory of the same specs")
    compare.add_argument("--json", help="also write the comparison as JSON to this file")
    compare.add_argument("--cluster-by", choices=CLUSTER_COLUMNS,
                         help="count documents that share this sidecar column as one cluster (e.g. MMLU subject)")
    add_read_flags(compare)

    report = sub.add_parser("report", help="a self-contained HTML report of one or more run directories")
    report.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directories: two get a paired comparison, several a curve (by --label step)")
    report.add_argument("--output", required=True, help="the HTML file to write, e.g. report.html")
    report.add_argument("--cluster-by", choices=CLUSTER_COLUMNS,
                        help="count documents that share this sidecar column as one cluster (e.g. MMLU subject)")
    report.add_argument("--overwrite", action="store_true", help="replace --output when it is an earlier report")
    add_read_flags(report)

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
    add_read_flags(bergson)

    attribution = sub.add_parser("attribution", help="data-attribution scores joined back onto query_id").add_subparsers(
        dest="attribution_step", required=True, metavar="STEP")
    join = attribution.add_parser("join", help="Bergson's scores of an export as a Parquet table keyed by query_id")
    join.add_argument("export", metavar="EXPORT", help="the directory `proctor export bergson` wrote")
    join.add_argument("scores", metavar="SCORES", help="the directory `bergson score` wrote")
    join.add_argument("--output", help="the Parquet file (default: attribution.parquet in the run directory, "
                      "beside query_metadata.parquet)")
    join.add_argument("--top", type=parse_positive_int, help="keep each query's K strongest training rows (default: all)")
    add_read_flags(join)

    from proctor.factual.cli import add_parser as add_factual

    add_factual(sub)
    return parser


def process_age() -> float:
    """Seconds since this process started, to the kernel's clock tick (its imports included)."""
    from proctor.liveness import start_time

    ticks = start_time(os.getpid())
    try:  # Linux: both counted from boot (psutil's create_time adds the boot time, known to the second)
        if ticks is not None:
            return float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return time.time() - psutil.Process().create_time()


def cmd_run(args: argparse.Namespace) -> int:
    """Evaluate a model on the task specs and write the run directory; the main process prints the scores."""
    from proctor.api import COMMAND_STARTED, evaluate
    from proctor.backends.redact import redact_url
    from proctor.engine.distributed import DistributedContext
    from proctor.outputs.owned import check_output_dir
    from proctor.report import print_results

    keywords = keywords_of(args)
    for name in ("data_dir", "chat_template"):  # before any task module is imported, as output below
        if isinstance(keywords[name], str):
            keywords[name] = os.path.abspath(os.path.expanduser(keywords[name]))
    given = args.output or f"runs/{Path(args.model).name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    output = Path(given).absolute()  # before any task module is imported: none can move it
    is_main = DistributedContext.from_env().is_main
    if is_main:  # checked here too so that a refusal names the CLI's options
        check_output_dir(output, overwrite=args.overwrite)
        _include(args)  # to say which format each path was read as (evaluate includes them again: no-op)
    started = COMMAND_STARTED.set(time.time() - process_age())
    try:
        result = evaluate(**{**keywords, "output": output, "command": ["proctor", *map(redact_url, sys.argv[1:])]})
    finally:
        COMMAND_STARTED.reset(started)
    if is_main:
        _print_lm_eval_names(keywords["tasks"], list(result.primary_scores))
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print_results(result.primary_scores, list(result.tasks.values()), per_task=args.per_task)
        print(f"wrote {given}")
    return 0


def _print_lm_eval_names(specs: Sequence[str], reported: Sequence[str]) -> None:
    """Say which bare names ran as lm-eval's own tasks, and the name their results are under."""
    from proctor.harness.library import PREFIX

    for spec in specs:
        if spec not in reported and PREFIX + spec in reported:
            print(f"proctor: {spec} is lm-eval's task: its results are under {PREFIX}{spec} "
                  "(lm-eval's prompts and shots)", file=sys.stderr)


def _include(args: argparse.Namespace) -> None:
    """Add the --include'd tasks, and say which format each path was read as.

    Every path is made absolute before the first is read: a task module runs code.
    """
    from proctor.harness.library import PREFIX
    from proctor.tasks.plugins import include

    given = list(args.include or ())
    for path, absolute in zip(given, [os.path.abspath(os.path.expanduser(p)) for p in given]):
        names = include([absolute])
        harness = [n for n in names if n.startswith(PREFIX)]
        read = [f"{len(harness)} lm-eval YAML task(s) ({', '.join(harness)})"] if harness else []
        if len(names) > len(harness):
            read.append(f"{len(names) - len(harness)} proctor task spec(s)")
        print(f"proctor: --include {path}: read {' and '.join(read)}", file=sys.stderr)


def cmd_tasks(args: argparse.Namespace) -> int:
    """Print the table of task specs and suites (item counts from a data directory when one is given)."""
    from proctor.report import print_task_table
    from proctor.tasks.registry import task_rows

    data_dir = resolve_data_dir(args.data_dir)  # resolved before any task module is imported
    _include(args)
    print_task_table(task_rows(args.pattern, data_dir))
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    """Write each task's requests.jsonl under --output without loading a model (at most a tokenizer)."""
    from proctor.options import RunOptions
    from proctor.outputs.owned import check_output_dir, staged_directory
    from proctor.outputs.requests_file import request_rows
    from proctor.outputs.run_dir import task_dir_name, write_jsonl
    from proctor.pipeline import plan, prompt_layout

    output = Path(args.output).absolute()  # the paths first: a task module runs code
    check_output_dir(output, overwrite=args.overwrite)
    options = RunOptions.from_keywords(keywords_of(args, PROMPT_FLAGS)).absolute()
    data_dir = resolve_data_dir(options.data_dir)
    _include(args)
    evaluation = plan(list(options.tasks), data_dir, options.limit, prompt_layout(options))
    render = _chat_renderer(args.model, options.template_file) if evaluation.has_chats() else None
    with staged_directory(output, overwrite=args.overwrite) as stage:
        for run in evaluation.tasks.values():
            write_jsonl(stage / task_dir_name(run.config.name) / "requests.jsonl",
                        request_rows(run.instances, render))
    count = sum(len(run.instances) for run in evaluation.tasks.values())
    print(f"wrote requests for {count} documents of {len(evaluation.tasks)} tasks to {args.output}")
    return 0


def _chat_renderer(model: str, template_file: Optional[str]) -> Callable[[Any], str]:
    """Return a function rendering a chat request's prompt with `model`'s tokenizer (its template, or the file's)."""
    from proctor.engine.chat import ChatTemplate
    from proctor.engine.tokens import TokenizationPolicy
    from proctor.runtime import open_tokenizer

    tokenizer = open_tokenizer(model).tokenizer
    policy = TokenizationPolicy(tokenizer, max_length=DEFAULT_MAX_LENGTH,
                                chat_template=ChatTemplate.resolve(template_file, tokenizer))
    return lambda request: policy.text(request.context, request.policy)


def cmd_verify(args: argparse.Namespace) -> int:
    """Check a data directory against the seed and print the report; exit code 1 when it finds errors."""
    from proctor.verify import format_report, verify

    data_dir = resolve_data_dir(args.data_dir)
    report = verify(data_dir)
    print(format_report(report))
    return 1 if report.errors else 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the item-by-item comparison of two run directories, and write it as JSON with --json."""
    from proctor.compare import compare_runs, comparison_json
    from proctor.outputs.owned import check_output_file, write_owned_file
    from proctor.outputs.run_dir import json_ready
    from proctor.report import print_agreement

    if args.json:
        check_output_file(Path(args.json), option="--json")
    comparison = compare_runs(Path(args.run_a), Path(args.run_b), args.cluster_by, allow_edited=args.allow_edited)
    print_agreement(comparison, args.run_a, args.run_b)
    if args.json:
        doc = comparison_json(comparison, args.run_a, args.run_b, args.cluster_by)
        text = json.dumps(json_ready(doc), indent=2) + "\n"   # NaN (an undefined error) as null
        write_owned_file(Path(args.json), text.encode(), option="--json")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the HTML report of the given run directories."""
    from proctor.report.html import write_report

    size = write_report([Path(r) for r in args.runs], Path(args.output), cluster_by=args.cluster_by,
                        overwrite=args.overwrite, allow_edited=args.allow_edited)
    print(f"wrote {args.output} ({size})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a run's queries for Bergson and print the commands that come next."""
    import datasets

    from proctor.export.bergson import export_bergson

    datasets.disable_progress_bars()
    manifest = export_bergson(Path(args.run), Path(args.output), target=args.target, tokenizer=args.tokenizer,
                              overwrite=args.overwrite, allow_edited=args.allow_edited)
    print(f"wrote {args.output}: {manifest.rows} rows ({args.target}) of {len(manifest.tasks)} tasks")
    for name, why in manifest.left_out.items():
        print(f"  left out {name}: {why}")
    # The commands of docs/tutorials/attribution.md, with this export's paths: shell lines to paste once
    # TRAIN (and MODEL, when the run's model cannot be named) is set. Bergson 2.5.1 computes in fp32 by default.
    export = Path(args.output)
    out, index, scores = (shlex.quote(str(export) + suffix) for suffix in ("", "-index", "-scores"))
    needs = "TRAIN to the training documents (a `datasets` directory, .jsonl file or hub id with a `text` column)"
    if manifest.bergson_model is None:
        needs += " and MODEL to the run's model as transformers loads it (a hub id or directory)"
    print(f"next: set {needs}, then:")
    if manifest.bergson_model is not None:
        print(f"      MODEL={shlex.quote(manifest.bergson_model)}")
    print(f'      bergson build {index} --model "$MODEL" --dataset {out} --projection_dim 16\n'
          f'      bergson score {scores} --model "$MODEL" --dataset "$TRAIN" --query_path {index} --score individual '
          f"--unit_normalize --projection_dim 16 --truncation\n"
          f"      proctor attribution join {out} {scores}")
    return 0


def cmd_attribution(args: argparse.Namespace) -> int:
    """Join Bergson's scores of an export onto query_id as a Parquet table."""
    from proctor.export.attribution import join_scores

    out, rows = join_scores(Path(args.export), Path(args.scores), None if args.output is None else Path(args.output),
                            top=args.top, allow_edited=args.allow_edited)
    print(f"wrote {out}: {rows} (query, training row) scores")
    return 0


def cmd_factual(args: argparse.Namespace) -> int:
    """Run a `proctor factual` subcommand."""
    from proctor.factual.cli import run_command

    return run_command(args)


COMMANDS = {"run": cmd_run, "tasks": cmd_tasks, "prompts": cmd_prompts, "verify": cmd_verify,
            "compare": cmd_compare, "report": cmd_report, "export": cmd_export, "attribution": cmd_attribution,
            "factual": cmd_factual}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command `argv` names and return its exit code (2 for a UserError, 130 when interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["lm-eval"]:  # every other argument is lm-eval's own
            from proctor.harness.cli import run_lm_eval

            return run_lm_eval(argv[1:])
        args = build_parser().parse_args(argv)
        with on_command_line():  # messages name the fix as a flag (--overwrite), not a keyword
            return COMMANDS[args.command](args)
    except UserError as err:
        print(f"proctor: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proctor: interrupted; finished requests are cached, rerun the same command to resume", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """Run `proctor` on the process's own arguments and end the process with `main`'s exit code.

    The end is proctor's, not the interpreter's: the exit hooks run here, where a hook's
    `os._exit` (a task module's, say) cannot change the code, then the streams are flushed and
    the process ends, however many threads (a task module's) are still running.
    """
    code = main()
    leave, hook = os._exit, sys.unraisablehook
    exits: list[Any] = [m for m in (os, sys.modules.get("posix")) if m is not None]

    def refused(status: int = 0) -> NoReturn:
        raise SystemExit(status)  # ends that hook alone; atexit goes on to the next

    def unraisable(raised: Any) -> None:
        if not isinstance(raised.exc_value, SystemExit):  # a hook's exit: refused(), not an error
            hook(raised)

    for module in exits:
        module._exit = refused
    sys.unraisablehook = unraisable
    try:
        atexit._run_exitfuncs()
    finally:
        for module in exits:
            module._exit = leave
        sys.unraisablehook = hook
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`proctor tasks | head`) or stream
            pass
    leave(code)


if __name__ == "__main__":
    run()
