"""`proctor factual ...`: build the bank, generate, validate, score, extract hidden states, ISS/KTS.

Files under `--output-dir` (default runs/factual), one set per model name:
  generations/<model>.jsonl        the seed's generations schema (+ <model>.provenance.json)
  scored/<model>.scored.jsonl      the seed's scored schema; scored/<model>.summary.json
  hidden/<model>/                  L{l:03d}.npy + index.json (the seed's layout)
  metrics/<model>.json             ISS and KTS per condition

`--chat-template [FILE]` (generate, hidden, run) leaves the seed's no-template protocol:
each prompt becomes one user turn rendered with the tokenizer's chat template (or FILE's),
and every file records the template.

The model steps run on proctor's engine: `generate` on any backend (`--backend`), `hidden`
and `run` on transformers (the only backend that returns hidden states), all with the
result cache (a killed run resumes) and torchrun data parallelism (rank 0 writes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from proctor.backends.options import backend_fields
from proctor.backends.redact import redact_url
from proctor.errors import UserError
from proctor.option import parse_positive_int
from proctor.options import RUN_FLAGS, RunOptions, add_flags, keywords_of
from proctor.outputs.provenance import code_git_state, library_versions
from proctor.runtime import ModelArg, check_runtime, open_runtime

if TYPE_CHECKING:
    from proctor.engine import Engine
    from proctor.engine.chat import ChatTemplate
    from proctor.factual.bank import Bank

DEFAULT_OUTPUT = "runs/factual"


#: `proctor run` options the model steps take, as declared there (`proctor.options`)
MODEL_FLAGS = ("model", "batch_size", "chat_template", "cache")
#: the backends' options `factual generate` takes (vLLM's and the OpenAI server's scoring options
#: are about log-probs, which generation reads none of)
GENERATE_BACKEND_FLAGS = tuple(name for name in backend_fields() if name not in ("vllm_for_mc", "openai_scoring"))
_HELP = {
    "batch_size": "rows per batch (generation: samples decoded at once), or auto",
    "dtype": "auto: bfloat16 (the seed's) where the device runs it fast, else float32",
    "chat_template": "not the seed's protocol: give each query as one user turn rendered with the tokenizer's chat "
                     "template (or this Jinja file's) and its generation prompt; the files record the template, "
                     "and numbers are not comparable with the seed's",
    "cache": "neither read nor store results in the result cache (then a killed run starts over)",
    "openai_extra": 'openai: extra request fields as JSON, e.g. \'{"repeat_penalty": 1.0}\' (llama.cpp\'s server '
                    "penalises repeats even when greedy)",
}


def add_parser(sub: Any) -> None:
    """Register `proctor factual` and its subcommands on the main parser's subparsers."""
    factual = sub.add_parser("factual", help="factual recall under perturbation (bank, generate, score, ISS/KTS)")
    steps = factual.add_subparsers(dest="step", required=True, parser_class=type(factual))

    bank = steps.add_parser("bank", help="build a query bank from the factual sources in the data directory")
    bank.add_argument("--output", required=True, help="bank file to write (JSONL)")
    bank.add_argument("--data-dir", help="data directory holding factual/ (default: $PROCTOR_DATA_DIR)")
    bank.add_argument("--facts-per-relation", type=parse_positive_int, help="at most N facts per source and relation")
    bank.add_argument("--languages", help="crosslingual languages of BMLAMA-17, comma-separated (default: fr,ru,zh,ja,ar)")
    bank.add_argument("--sources", help="sources to use, comma-separated (default: all)")

    def model_options(p: argparse.ArgumentParser, *, any_backend: bool) -> None:
        p.add_argument("--name", help="model name in file names and rows (default: from --model)")
        # hidden states (hidden, run) need the model's layers in this process: transformers
        backend = ("backend", *GENERATE_BACKEND_FLAGS) if any_backend else ("device", "dtype")
        add_flags(p, (*MODEL_FLAGS, *backend), help=_HELP)

    def common(p: argparse.ArgumentParser, *, bank_required: bool = True) -> None:
        p.add_argument("--bank", required=bank_required, help="the query bank (JSONL)")
        p.add_argument("--output-dir", default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
        add_flags(p, ("progress",))

    generate = steps.add_parser("generate", help="greedy generations for every query (resumable)")
    common(generate)
    model_options(generate, any_backend=True)

    validate = steps.add_parser("validate", help="check a generations file against the bank (exit 1 on problems)")
    validate.add_argument("--bank", required=True)
    validate.add_argument("--generations", required=True, help="generations JSONL from any inference stack")

    score = steps.add_parser("score", help="label generations; write scored rows and summaries")
    common(score)
    score.add_argument("--generations", required=True)
    score.add_argument("--name", help="model name for output files (default: the rows' model field)")

    hidden = steps.add_parser("hidden", help="last-token hidden states of the main-forward queries (resumable)")
    common(hidden)
    model_options(hidden, any_backend=False)

    metrics = steps.add_parser("metrics", help="ISS and KTS per condition from scored rows and hidden states")
    common(metrics)
    metrics.add_argument("--name", required=True, help="model name used by the earlier steps")
    metrics.add_argument("--bootstrap", type=parse_positive_int, default=1000, help="bootstrap resamples for ISS CIs")
    metrics.add_argument("--kts-layer", default="mean", choices=["mean", "best"],
                         help="KTS features: the mean of the stored layers, or the layer with the best "
                              "anchor validation AUROC (chosen on anchor training facts only)")

    run = steps.add_parser("run", help="generate, score, extract hidden states and compute ISS/KTS")
    common(run)
    model_options(run, any_backend=False)
    run.add_argument("--bootstrap", type=parse_positive_int, default=1000)
    run.add_argument("--kts-layer", default="mean", choices=["mean", "best"])


def model_name(model: str, name: Optional[str]) -> str:
    """Return a file-name-safe model name: --name, else the model's last path component."""
    raw = name or Path(model.rstrip("/")).name.removesuffix(".gguf")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.")
    if not safe:
        raise UserError(f"cannot make a file name from model name {raw!r}; pass --name")
    return safe


def run_command(args: argparse.Namespace) -> int:
    """Run the `proctor factual` step `args` names; a model step opens the model's runtime first.

    Returns the exit status.
    """
    if getattr(args, "output_dir", None) is not None:
        _check_output_dir(Path(args.output_dir))  # before any bank, data or model work
    if args.step not in MODEL_STEPS:
        return STEPS[args.step](args)
    options = _run_options(args)  # checked before the bank is read
    model = ModelArg.of(options.model, options.backend)
    bank = _bank(args)
    checked = check_runtime(model, options)
    with open_runtime(checked, options, chats=options.chat_template is not False) as runtime:
        return MODEL_STEPS[args.step](args, bank, runtime.engine)


def _check_output_dir(out: Path) -> None:
    from proctor.outputs.owned import check_writable_parent

    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir {out} exists and is not a directory; choose a directory path")
    check_writable_parent(out / "scored", "--output-dir")


def _bank(args: argparse.Namespace) -> Bank:
    from proctor.factual.bank import read_bank

    return read_bank(Path(args.bank))


def _csv(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def cmd_bank(args: argparse.Namespace) -> int:
    """Run `proctor factual bank`: build the bank from the data directory's sources and write it."""
    from proctor.data import resolve_data_dir
    from proctor.factual.bank import build_bank, write_bank
    from proctor.outputs.owned import check_output_file

    check_output_file(Path(args.output))
    data_dir = resolve_data_dir(args.data_dir)
    if data_dir is None:
        raise UserError("building a bank needs the factual sources on disk: pass --data-dir or set "
                        "PROCTOR_DATA_DIR to a directory holding factual/")
    options = {k: v for k, v in {"facts_per_relation": args.facts_per_relation,
                                 "languages": _csv(args.languages), "sources": _csv(args.sources)}.items()
               if v is not None}
    built = build_bank(data_dir, **options)
    version = write_bank(Path(args.output), built.rows, built.header_extra)
    families: dict[str, int] = {}
    for row in built.rows:
        families[row["condition_family"]] = families.get(row["condition_family"], 0) + 1
    counts = ", ".join(f"{family} {n}" for family, n in families.items())
    facts = len({row["fact_id"] for row in built.rows})
    print(f"wrote {args.output}: {len(built.rows)} queries over {facts} facts ({counts}); version {version[:12]}")
    if built.report["skipped"]:
        print("left out: " + ", ".join(f"{why} {n}" for why, n in built.report["skipped"].items()))
    return 0


def _run_options(args: argparse.Namespace) -> RunOptions:
    """Return the run options of a model step: its flags, the seed's decoding seed and OLMES's window."""
    from proctor.defaults import DEFAULT_MAX_LENGTH
    from proctor.factual.prompts import DECODING

    names = [name for name in RUN_FLAGS if hasattr(args, name)]
    return RunOptions.from_keywords({**keywords_of(args, names), "seed": DECODING.seed,
                                     "max_length": DEFAULT_MAX_LENGTH})


def _generations_path(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "generations" / f"{name}.jsonl"


def _hidden_dir(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "hidden" / name


def _scored_path(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "scored" / f"{name}.scored.jsonl"


def cmd_generate(args: argparse.Namespace, bank: Bank, engine: Engine) -> int:
    """Run `proctor factual generate`: every query's greedy generation, written by rank 0 with provenance."""
    from proctor.factual.generate import generate, provenance_path

    name = model_name(args.model, args.name)
    out = _generations_path(args, name)
    is_main = engine.distributed.is_main
    stats = generate(bank.rows, engine, out, model_name=name, write=is_main,
                     provenance={"bank_version": bank.version, "backend": getattr(args, "backend", "hf"),
                                 "command": ["proctor", *map(redact_url, sys.argv[1:])],
                                 "versions": library_versions(), "git": code_git_state()})
    if not is_main:
        return 0
    _print_protocol(engine.policy.chat_template)
    if stats.already_complete:
        print(f"{out} already holds every query of the bank; nothing to do")
    else:
        cached = f", {stats.cached} from the result cache" if stats.cached else ""
        print(f"wrote {out} and {provenance_path(out).name}: {stats.rows} queries ({stats.generated} prompts "
              f"generated{cached}, {stats.new_tokens} new tokens in {stats.seconds:.0f} s)")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Run `proctor factual validate`: check a generations file against the bank; 1 when it is not scorable."""
    from proctor.factual.validate import read_jsonl, validate_generations

    bank = _bank(args)
    report = validate_generations(bank.rows, list(read_jsonl(Path(args.generations))))
    if report.ok:
        print(f"{args.generations}: {report.rows} generations, every query of the bank once; ready to score")
        for line in report.protocol_differences():
            print(f"  {line}")
        return 0
    print(f"{args.generations}: {report.rows} rows, not scorable against {args.bank}:", file=sys.stderr)
    for line in report.lines() + report.protocol_differences():
        print(f"  {line}", file=sys.stderr)
    return 1


def cmd_score(args: argparse.Namespace, bank: Optional[Bank] = None) -> int:
    """Run `proctor factual score`: write the scored rows and their summary; 1 when the generations cannot be scored."""
    from proctor.factual.prompts import template_key
    from proctor.factual.report import print_summary
    from proctor.factual.score import score_generations, summaries
    from proctor.factual.validate import read_jsonl
    from proctor.outputs.owned import check_output_file, write_owned_file
    from proctor.outputs.run_dir import jsonl_text

    bank = bank or _bank(args)
    generations = list(read_jsonl(Path(args.generations)))
    try:
        scored = score_generations(bank.rows, generations, source=args.generations)
    except UserError as err:
        print(f"proctor: {err}", file=sys.stderr)
        return 1
    models = {r["model"] for r in scored if r["model"]}
    name = model_name(args.generations, args.name or (models.pop() if len(models) == 1 else None))
    out = _scored_path(args, name)
    summary_path = out.with_name(f"{name}.summary.json")
    for path in (out, summary_path):  # refuse before writing either
        check_output_file(path)
    templates = {template_key(r.get("chat_template")): r.get("chat_template") for r in scored}
    summary = {"model": name, "bank_version": bank.version, "generations": str(args.generations),
               "chat_template": next(iter(templates.values()), None), **summaries(scored)}
    write_owned_file(out, jsonl_text(scored).encode())
    write_owned_file(summary_path, (json.dumps(summary, indent=2) + "\n").encode())
    print_summary(summary)
    print(f"wrote {out} and {summary_path}")
    return 0


def cmd_hidden(args: argparse.Namespace, bank: Bank, engine: Engine) -> int:
    """Run `proctor factual hidden`: the main-forward queries' last-token hidden states, written by rank 0."""
    from proctor.factual.hidden import extract_hidden

    name = model_name(args.model, args.name)
    out = _hidden_dir(args, name)
    index = extract_hidden(bank.rows, engine, out, model_name=name, bank_version=bank.version,
                           write=engine.distributed.is_main)
    if engine.distributed.is_main:
        print(f"wrote {out}: {len(index.query_ids)} queries x {len(index.layers)} layers "
              f"(blocks {index.layers[0]}-{index.layers[-1]})")
    return 0


def cmd_metrics(args: argparse.Namespace, bank: Optional[Bank] = None) -> int:
    """Run `proctor factual metrics`: ISS and KTS per condition from the scored rows and hidden states."""
    from proctor.factual.hidden import load_hidden
    from proctor.factual.metrics import factual_metrics
    from proctor.factual.report import print_metrics
    from proctor.factual.validate import read_jsonl
    from proctor.outputs.owned import check_output_file, write_owned_file

    bank = bank or _bank(args)
    name = model_name(args.name, None)
    out = Path(args.output_dir) / "metrics" / f"{name}.json"
    check_output_file(out)
    scored = [row for row in read_jsonl(_scored_path(args, name))]
    hidden = load_hidden(_hidden_dir(args, name))
    result = factual_metrics(bank, scored, hidden, model=name, bootstrap=args.bootstrap,
                             kts_layer=args.kts_layer, source=str(_scored_path(args, name)))
    write_owned_file(out, (json.dumps(result, indent=2) + "\n").encode())
    print_metrics(result)
    print(f"wrote {out}")
    return 0


def _print_protocol(template: Optional["ChatTemplate"]) -> None:
    from proctor.factual.prompts import protocol_note, template_record

    note = protocol_note(template_record(template))
    if note is not None:
        print(f"proctor: {note}", file=sys.stderr)


def cmd_run(args: argparse.Namespace, bank: Bank, engine: Engine) -> int:
    """Run `proctor factual run`: generate and extract on every rank, then score and compute metrics on rank 0."""
    name = model_name(args.model, args.name)
    cmd_generate(args, bank, engine)
    cmd_hidden(args, bank, engine)
    if not engine.distributed.is_main:  # the other ranks help with the model work only
        return 0
    args.generations, args.name = str(_generations_path(args, name)), name
    if cmd_score(args, bank):
        return 1
    return cmd_metrics(args, bank)


MODEL_STEPS: dict[str, Callable[..., int]] = {"generate": cmd_generate, "hidden": cmd_hidden, "run": cmd_run}
STEPS: dict[str, Callable[[argparse.Namespace], int]] = {
    "bank": cmd_bank, "validate": cmd_validate, "score": cmd_score, "metrics": cmd_metrics,
}

