"""The options of a run, declared once.

`RunOptions` (with one options type per backend, `proctor.backends.options`) is the only
place a run option is written down. From it come:

- the `proctor run` flags and their help (`add_flags`), and the model flags of
  `proctor prompts` and `proctor factual` (the same declarations, a subset);
- the keywords of `proctor.evaluate`, their defaults and their checks
  (`evaluate_signature`, `RunOptions.from_keywords`);
- what metrics.json records of them in `run_config` (`RECORDED`).

`tests/test_options.py` holds the CLI and the API to the same names and defaults.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Mapping, Optional, Sequence, Union

from proctor.backends.options import (
    BACKENDS,
    OPTION_TYPES,
    BackendOptions,
    HFOptions,
    backend_fields,
    backend_options,
    taken_by,
)
from proctor.defaults import DEFAULT_MAX_LENGTH, DEFAULT_MODEL, DEFAULT_SEED
from proctor.errors import UserError
from proctor.option import (
    REQUIRED,
    boolean,
    count,
    declared,
    flag_of,
    maybe_flag,
    one_of,
    option,
    parse_batch_size,
    parse_count,
    parse_positive_int,
    parse_seed,
    path,
    path_text,
    paths,
    positive_int,
    run_check,
    seed_number,
    shown,
    spec_of,
    specs_of,
)

DEFAULT_THINK_TAGS = ("<think>", "</think>")

# ---- checks with messages of their own ----------------------------------------------------


def _model(name: str, value: Any) -> Any:
    """Accept a hub id, a local directory, a .gguf file or an alias (a string or os.PathLike), or a model object."""
    if not isinstance(value, (str, os.PathLike)):
        return value  # an object: `ModelArg.of` says which kinds it takes
    found = path_text(value)
    if found is None:
        raise UserError(f"model must be a hub id, a local directory, a .gguf file or an alias (a non-empty string "
                        f"or an os.PathLike giving one), or a loaded model; got {shown(value)}")
    return found


def _tasks(name: str, tasks: Any) -> tuple[str, ...]:
    """Accept a list of task specs (or one spec)."""
    if isinstance(tasks, str):
        tasks = [tasks]
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, str) for t in tasks):
        raise UserError(f"tasks must be a list of task specs, got {shown(tasks)}")
    specs = tuple(dict.fromkeys(t.strip() for t in tasks if t.strip()))
    if not specs:
        raise UserError("no task specs given; name at least one (`proctor tasks` lists them)")
    return specs


def _batch_size(name: str, value: Any) -> Union[int, str]:
    """Accept 'auto' or a positive whole number."""
    if (isinstance(value, str) and value == "auto") or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise UserError(f"batch_size must be 'auto' or a positive whole number, got {shown(value)}")


def _labels(name: str, value: Any) -> dict[str, str]:
    """Accept a dict of names (no '=') to strings, or None."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k.strip() and "=" not in k
                                                 and isinstance(v, str) for k, v in value.items()):
        raise UserError(f"labels must map names (no '=') to strings, e.g. {{'step': '1000'}}; got {shown(value)}")
    return dict(value)


def _chat_template(name: str, value: Any) -> Union[bool, str]:
    """Accept True, False or a Jinja file's path (which must exist)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise UserError(f"chat_template must be True, False or a Jinja file's path, got {shown(value)}")
    file = path_text(value)
    if file is None:
        raise UserError(f"chat_template must be True, False or a Jinja file's path, got {shown(value)}")
    if not os.path.isfile(file):
        raise UserError(f"chat template file {file} does not exist; pass a Jinja chat template file, "
                        "or --chat-template alone for the tokenizer's")
    return file


def _think_tags(name: str, value: Any) -> Optional[tuple[str, str]]:
    """Accept False (off), True (<think>...</think>) or an (opening, closing) pair."""
    if value is False or value is None:
        return None
    if value is True:
        return DEFAULT_THINK_TAGS
    if (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, str) for t in value)
            and value[1]):
        return (value[0], value[1])
    raise UserError(f"think_tags must be True or an (opening, closing) pair of tags with a closing tag, got {shown(value)}")


def _system_instruction(name: str, value: Any) -> Optional[str]:
    """Accept a non-empty string, or None."""
    if value is not None and (not isinstance(value, str) or not value):
        raise UserError(f"system_instruction must be a non-empty string, got {shown(value)}")
    return value


def _gen_kwargs(name: str, value: Any) -> Optional[dict[str, Any]]:
    """Accept a dict of generation settings, or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value or not all(isinstance(k, str) and k for k in value):
        raise UserError(f"gen_kwargs must map generation settings to values, e.g. {{'temperature': 0.7, "
                        f"'do_sample': True}}; got {shown(value)}")
    return dict(value)


def _command(name: str, value: Any) -> tuple[str, ...]:
    """Accept a list of strings (the command line recorded in metrics.json)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UserError(f"command must be a list of strings (the command line recorded in metrics.json), got {shown(value)}")


# ---- the flags' text -> values --------------------------------------------------------------


def _parse_think_tags(text: str) -> tuple[str, str]:
    opening, comma, closing = text.partition(",")
    if not comma or not closing:
        raise argparse.ArgumentTypeError(f"expected OPEN,CLOSE tags such as <think>,</think>, got {text!r}")
    return opening, closing


def _parse_label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. step=1000), got {text!r}")
    return key.strip(), value


def _parse_gen_kwargs(text: str) -> dict[str, Any]:
    """lm-eval's --gen_kwargs text: `key=value` pairs joined by commas, values read as Python literals."""
    out: dict[str, Any] = {}
    for pair in filter(None, text.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...] (e.g. temperature=0.7,"
                                             f"do_sample=True), got {text!r}")
        try:
            out[key.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key.strip()] = value
    if not out:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE[,KEY=VALUE...], got {text!r}")
    return out


def _labels_of(pairs: Optional[Sequence[tuple[str, str]]]) -> Optional[dict[str, str]]:
    if pairs is None:
        return None
    labels: dict[str, str] = {}
    for key, value in pairs:
        if key in labels and labels[key] != value:
            raise UserError(f"--label {key} is given twice ({labels[key]!r} and {shown(value)}); give it once")
        labels[key] = value
    return labels


# ---- the declaration ----------------------------------------------------------------------

_INCLUDE = "a task file (.yaml/.toml) or module (.py) of your own, or a directory of them (repeatable)"
_DATA_DIR = "local data directory (default: $PROCTOR_DATA_DIR, else the hub)"


@dataclass(frozen=True)
class RunOptions:
    """Everything a run can be asked; a backend's own options are in `backend_options`."""

    model: Any = option(DEFAULT_MODEL, f"HF hub id, local dir, .gguf file or alias (default: {DEFAULT_MODEL})", _model)
    tasks: tuple[str, ...] = option(REQUIRED, "task or suite specs, e.g. mmlu_stem:mc::olmes", _tasks,
                                    cli={"nargs": "+"}, from_cli=specs_of)
    include: tuple[str, ...] = option((), _INCLUDE, paths, metavar="PATH", cli={"action": "append", "default": None},
                                      from_cli=lambda v: tuple(v or ()))
    limit: Optional[int] = option(None, "only the first N documents of each task", positive_int,
                                  parse=parse_positive_int)
    num_fewshot: Optional[int] = option(
        None, "few-shot examples in every task's prompts, as lm-eval's --num_fewshot (default: each spec's own; "
        "an lm-eval task name's: lm-eval's default)", count, parse=parse_count, metavar="N")
    data_dir: Optional[str] = option(None, _DATA_DIR, path)
    chat_template: Union[bool, str] = option(
        False, "lay prompts out as chat messages rendered with the tokenizer's chat template (or this Jinja "
        "file's), as lm-eval's --apply_chat_template", _chat_template, metavar="FILE", cli={"nargs": "?", "const": True})
    fewshot_as_multiturn: Optional[bool] = option(
        None, "few-shot examples as user/assistant turns (default: on with --chat-template)", maybe_flag,
        cli={"action": argparse.BooleanOptionalAction})
    system_instruction: Optional[str] = option(
        None, "lm-eval-format specs: a system message before the description", _system_instruction, metavar="TEXT")
    gen_kwargs: Optional[Mapping[str, Any]] = option(
        None, "lm_eval: specs' generation tasks: settings over the task's generation_kwargs, as lm-eval's "
        "--gen_kwargs (e.g. temperature=0.7,do_sample=True,max_gen_toks=128)", _gen_kwargs,
        parse=_parse_gen_kwargs, metavar="KEY=VALUE,...")
    think_tags: Union[bool, tuple[str, str], None] = option(
        False, "generation tasks: read answers without reasoning spans (default tags <think>,</think>); the "
        "records keep the whole text", _think_tags, parse=_parse_think_tags, metavar="OPEN,CLOSE",
        cli={"nargs": "?", "const": "<think>,</think>", "default": None}, from_cli=lambda v: v or False)
    batch_size: Union[int, str] = option("auto", "rows per batch, or auto", _batch_size, parse=parse_batch_size)
    max_length: Optional[int] = option(
        None, f"context window in tokens (default: OLMES specs {DEFAULT_MAX_LENGTH}, lm-eval-format specs the "
        "model's context length)", positive_int, parse=parse_positive_int)
    deterministic: bool = option(False, "batch-invariant scores: bitwise identical for any batch size and request "
                                 "order (slower)", boolean, cli={"action": "store_true"})
    seed: int = option(DEFAULT_SEED, f"run seed every sample's seed derives from (default {DEFAULT_SEED})", seed_number,
                       parse=parse_seed)
    allow_unsafe_exec: bool = option(False, "run generated code (HumanEval) even where the sandbox cannot cut off "
                                     "the network", boolean, cli={"action": "store_true"})
    output: Optional[str] = option(None, "run directory (default: runs/<model>-<time>)", path)
    overwrite: bool = option(False, "replace --output when it holds an earlier proctor run (never other files)",
                             boolean, cli={"action": "store_true"})
    save_requests: bool = option(False, "also write <task>/requests.jsonl", boolean, cli={"action": "store_true"})
    labels: Optional[Mapping[str, str]] = option(
        None, "record a label in metrics.json for reports, e.g. step=1000 (repeatable)", _labels,
        parse=_parse_label, flag="--label", metavar="KEY=VALUE", cli={"action": "append"}, from_cli=_labels_of)
    cache: bool = option(True, "neither read nor store results in the result cache "
                         "($PROCTOR_CACHE_DIR/results.sqlite)", boolean, flag="--no-cache",
                         cli={"action": "store_false"})
    progress: bool = option(True, "no progress bar", boolean, flag="--no-progress", cli={"action": "store_false"})
    backend: str = option("hf", "transformers (default), llama.cpp (GGUF on CPU), an OpenAI-compatible server, or "
                          "vLLM", one_of(*BACKENDS), choices=BACKENDS)
    command: tuple[str, ...] = option((), "the command line recorded in metrics.json", _command, api_only=True)
    backend_options: BackendOptions = field(default_factory=HFOptions)

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> "RunOptions":
        """Build the options `evaluate`'s keywords ask for, each checked (UserError naming the first bad one).

        The keywords are names of `evaluate_signature()` (`evaluate` binds them first).
        """
        values = {f.name: run_check(spec_of(f).check, f.name, keywords[f.name]) for f in run_fields()
                  if f.name in keywords}
        chosen = backend_options(values.get("backend", "hf"), {k: v for k, v in keywords.items()
                                                                if k in backend_fields()})
        return cls(**values, backend_options=chosen)

    def absolute(self) -> "RunOptions":
        """Return these options with their paths made absolute (as they are now, before a task module runs).

        A task module is code: whatever it does to the working directory later, the data,
        the output, the chat template file and the task files stay where the caller meant.
        """
        def where(given: Optional[str]) -> Optional[str]:
            return None if given is None else os.path.abspath(os.path.expanduser(given))

        return replace(self, data_dir=where(self.data_dir), output=where(self.output),
                       include=tuple(os.path.abspath(os.path.expanduser(p)) for p in self.include),
                       chat_template=self.chat_template if isinstance(self.chat_template, bool)
                       else os.path.abspath(self.chat_template))

    @property
    def template_file(self) -> Optional[str]:
        """The chat template's Jinja file, if `chat_template` names one (True: the tokenizer's own)."""
        return None if isinstance(self.chat_template, bool) else self.chat_template



#: the options metrics.json records in `run_config` (beside the world size)
RECORDED = ("tasks", "limit", "data_dir", "include", "labels")


def run_fields() -> list[Field]:
    """Return the run-level options (not a backend's), in declaration order."""
    return [f for f in fields(RunOptions) if declared(f) is not None]


def all_fields() -> dict[str, Field]:
    """Every option: the run's, then each backend's (one entry per name)."""
    return {**{f.name: f for f in run_fields()}, **backend_fields()}


def option_help(name: str) -> str:
    """Return an option's help; a backend option's names the backends that take it."""
    if name not in backend_fields():
        return spec_of(all_fields()[name]).help
    parts: dict[str, list[str]] = {}
    for backend in taken_by(name):
        kind = OPTION_TYPES[backend]
        parts.setdefault(spec_of(next(f for f in fields(kind) if f.name == name)).help, []).append(backend)
    return "; ".join(f"{', '.join(backends)}: {text}" for text, backends in parts.items())


def cli_default(name: str) -> Any:
    """Return the flag's default as argparse holds it (before `from_cli`)."""
    f = all_fields()[name]
    return spec_of(f).cli.get("default", f.default)


RUN_FLAGS = tuple(name for name in all_fields() if not spec_of(all_fields()[name]).api_only)


def add_flags(parser: argparse.ArgumentParser, names: Sequence[str] = RUN_FLAGS, *,
              help: Optional[Mapping[str, str]] = None, required: Sequence[str] = ()) -> None:
    """Add the flags of the options `names` to `parser` (each with `dest` its keyword's name), as declared.

    `help` replaces an option's help where a command uses it in a narrower sense, and
    `required` makes options required that a run may leave out.
    """
    declared_fields = all_fields()
    for name in names:
        spec = spec_of(declared_fields[name])
        default = cli_default(name)
        how: dict[str, Any] = {"dest": name, "help": (help or {}).get(name, option_help(name)), **spec.cli}
        if default is REQUIRED or name in required:
            how["required"] = True
        else:
            how["default"] = default
        if spec.parse is not None:
            how["type"] = spec.parse
        if spec.choices is not None:
            how["choices"] = spec.choices
        if spec.metavar is not None:
            how["metavar"] = spec.metavar
        parser.add_argument(flag_of(name, spec), **how)


def keywords_of(args: argparse.Namespace, names: Sequence[str] = RUN_FLAGS) -> dict[str, Any]:
    """Return the `evaluate` keywords that parsed flags stand for."""
    declared_fields = all_fields()
    out = {}
    for name in names:
        convert = spec_of(declared_fields[name]).from_cli
        value = getattr(args, name)
        out[name] = value if convert is None else convert(value)
    return out


def evaluate_signature() -> inspect.Signature:
    """Build the signature `proctor.evaluate(model=..., *, tasks, ...)`: every declared option as a keyword.

    The API-only ones come last.
    """
    params = []
    for name, f in sorted(all_fields().items(), key=lambda item: spec_of(item[1]).api_only):
        default = inspect.Parameter.empty if f.default is REQUIRED else f.default
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if name == "model" else inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(name, kind, default=default, annotation=f.type))
    from proctor.outputs.records import RunRecord

    return inspect.Signature(params, return_annotation=RunRecord)
