"""`proctor factual ...`: build the bank, generate, validate, score, extract hidden states, ISS/KTS.

Files under `--output-dir` (default outputs/factual), one set per model name:
  generations/<model>.jsonl        the seed's generations schema
  scored/<model>.scored.jsonl      the seed's scored schema; scored/<model>.summary.json
  hidden/<model>/                  L{l:03d}.npy + index.json (the seed's layout)
  metrics/<model>.json             ISS and KTS per condition

`--chat-template [FILE]` (generate, hidden, run) leaves the seed's no-template protocol:
each prompt becomes one user turn rendered with the tokenizer's chat template (or FILE's),
and every file records the template.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from proctor.errors import UserError

if TYPE_CHECKING:
    from proctor.engine.chat import ChatTemplate

DEFAULT_OUTPUT = "outputs/factual"


def add_parser(sub: Any, positive_int: Callable[[str], int]) -> None:
    """Register `proctor factual` and its subcommands on the main parser's subparsers."""
    factual = sub.add_parser("factual", help="factual recall under perturbation (bank, generate, score, ISS/KTS)")
    steps = factual.add_subparsers(dest="step", required=True, parser_class=type(factual))

    bank = steps.add_parser("bank", help="build a query bank from the factual sources in the data directory")
    bank.add_argument("--output", required=True, help="bank file to write (JSONL)")
    bank.add_argument("--data-dir", help="data directory holding factual/ (default: $PROCTOR_DATA_DIR)")
    bank.add_argument("--facts-per-relation", type=positive_int, help="at most N facts per source and relation")
    bank.add_argument("--languages", help="crosslingual languages of BMLAMA-17, comma-separated (default: fr,ru,zh,ja,ar)")
    bank.add_argument("--sources", help="sources to use, comma-separated (default: all)")

    def model_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="smollm2-135m", help="HF hub id, local dir, .gguf file, or smollm2-135m")
        p.add_argument("--name", help="model name in file names and rows (default: from --model)")
        p.add_argument("--batch-size", type=positive_int, default=32)
        p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: cuda if available)")
        p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                       help="auto: bfloat16 where the device supports it fast, else float32")
        p.add_argument("--chat-template", nargs="?", const=True, default=False, metavar="FILE",
                       help="not the seed's protocol: give each query as one user turn rendered with the "
                            "tokenizer's chat template (or this Jinja file's) and its generation prompt; "
                            "the files record the template, and numbers are not comparable with the seed's")

    def common(p: argparse.ArgumentParser, *, bank_required: bool = True) -> None:
        p.add_argument("--bank", required=bank_required, help="the query bank (JSONL)")
        p.add_argument("--output-dir", default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
        p.add_argument("--no-progress", action="store_true")

    generate = steps.add_parser("generate", help="greedy generations for every query (resumable)")
    common(generate)
    model_options(generate)

    validate = steps.add_parser("validate", help="check a generations file against the bank (exit 1 on problems)")
    validate.add_argument("--bank", required=True)
    validate.add_argument("--generations", required=True, help="generations JSONL from any inference stack")

    score = steps.add_parser("score", help="label generations; write scored rows and summaries")
    common(score)
    score.add_argument("--generations", required=True)
    score.add_argument("--name", help="model name for output files (default: the rows' model field)")

    hidden = steps.add_parser("hidden", help="last-token hidden states of the main-forward queries (resumable)")
    common(hidden)
    model_options(hidden)

    metrics = steps.add_parser("metrics", help="ISS and KTS per condition from scored rows and hidden states")
    common(metrics)
    metrics.add_argument("--name", required=True, help="model name used by the earlier steps")
    metrics.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples for ISS CIs")
    metrics.add_argument("--kts-layer", default="mean", choices=["mean", "best"],
                         help="KTS features: the mean of the stored layers, or the layer with the best "
                              "anchor validation AUROC (chosen on anchor training facts only)")

    run = steps.add_parser("run", help="generate, score, extract hidden states and compute ISS/KTS")
    common(run)
    model_options(run)
    run.add_argument("--bootstrap", type=positive_int, default=1000)
    run.add_argument("--kts-layer", default="mean", choices=["mean", "best"])


def model_name(model: str, name: Optional[str]) -> str:
    """A file-name-safe model name: --name, else the model's last path component."""
    raw = name or Path(model.rstrip("/")).name.removesuffix(".gguf")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.")
    if not safe:
        raise UserError(f"cannot make a file name from model name {raw!r}; pass --name")
    return safe


def run_command(args: argparse.Namespace) -> int:
    if getattr(args, "output_dir", None) is not None:
        _check_output_dir(Path(args.output_dir))  # before any bank, data or model work
    return STEPS[args.step](args)


def _check_output_dir(out: Path) -> None:
    from proctor.outputs.owned import check_writable_parent

    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir {out} exists and is not a directory; choose a directory path")
    check_writable_parent(out / "scored", "--output-dir")


def _bank(args: argparse.Namespace):
    from proctor.factual.bank import read_bank

    return read_bank(Path(args.bank))


def _csv(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def cmd_bank(args: argparse.Namespace) -> int:
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


def _check_template_option(args: argparse.Namespace) -> None:
    """A --chat-template FILE must exist (checked before the model loads)."""
    from proctor.api import chat_template_file

    chat_template_file(args.chat_template)


def _chat_template(args: argparse.Namespace, tokenizer: Any) -> Optional["ChatTemplate"]:
    """The run's chat template: None (the seed's protocol), the tokenizer's, or the file's."""
    from proctor.api import chat_template_file
    from proctor.engine.chat import ChatTemplate

    if args.chat_template is False:
        return None
    return ChatTemplate.resolve(chat_template_file(args.chat_template), tokenizer)


def _load(args: argparse.Namespace):
    from proctor.backends.hf import resolve_device, resolve_dtype
    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source

    device = resolve_device(args.device)
    return load_model(resolve_source(args.model), dtype=resolve_dtype(args.dtype, device), device=device)


def _generations_path(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "generations" / f"{name}.jsonl"


def _hidden_dir(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "hidden" / name


def _scored_path(args: argparse.Namespace, name: str) -> Path:
    return Path(args.output_dir) / "scored" / f"{name}.scored.jsonl"


def cmd_generate(args: argparse.Namespace, bank=None, loaded=None) -> int:
    from proctor.factual.generate import generate

    _check_template_option(args)
    bank = bank or _bank(args)
    name = model_name(args.model, args.name)
    loaded = loaded or _load(args)
    template = _chat_template(args, loaded.tokenizer)
    out = _generations_path(args, name)
    stats = generate(bank.rows, loaded.model, loaded.tokenizer, out, model_name=name,
                     model_identity=loaded.identity, batch_size=args.batch_size,
                     progress=not args.no_progress, chat_template=template)
    _print_protocol(template)
    if stats.already_complete:
        print(f"{out} already holds every query of the bank; nothing to do")
    else:
        resumed = f", {stats.resumed_rows} resumed" if stats.resumed_rows else ""
        print(f"wrote {out}: {stats.rows} queries ({stats.generated_rows} generated{resumed}, "
              f"{stats.new_tokens} new tokens in {stats.seconds:.0f} s)")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
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


def cmd_score(args: argparse.Namespace, bank=None) -> int:
    from proctor.factual.report import print_summary
    from proctor.factual.prompts import template_key
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


def cmd_hidden(args: argparse.Namespace, bank=None, loaded=None) -> int:
    from proctor.factual.hidden import extract_hidden

    _check_template_option(args)
    bank = bank or _bank(args)
    name = model_name(args.model, args.name)
    loaded = loaded or _load(args)
    out = _hidden_dir(args, name)
    index = extract_hidden(bank.rows, loaded.model, loaded.tokenizer, out, model_name=name,
                           model_identity=loaded.identity, bank_version=bank.version,
                           batch_size=args.batch_size, progress=not args.no_progress,
                           chat_template=_chat_template(args, loaded.tokenizer))
    print(f"wrote {out}: {len(index.query_ids)} queries x {len(index.layers)} layers "
          f"(blocks {index.layers[0]}-{index.layers[-1]})")
    return 0


def cmd_metrics(args: argparse.Namespace, bank=None) -> int:
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


def cmd_run(args: argparse.Namespace) -> int:
    _check_template_option(args)
    bank = _bank(args)
    name = model_name(args.model, args.name)
    loaded = _load(args)
    cmd_generate(args, bank, loaded)
    args.generations, args.name = str(_generations_path(args, name)), name
    if cmd_score(args, bank):
        return 1
    cmd_hidden(args, bank, loaded)
    return cmd_metrics(args, bank)


STEPS: dict[str, Callable[[argparse.Namespace], int]] = {
    "bank": cmd_bank, "generate": cmd_generate, "validate": cmd_validate, "score": cmd_score,
    "hidden": cmd_hidden, "metrics": cmd_metrics, "run": cmd_run,
}

