"""The run options are declared once (`proctor.options`): the CLI's flags, `evaluate`'s keywords,
their defaults and what run_config records all come from that one declaration."""

import argparse
import inspect
from dataclasses import fields

import pytest

import proctor
from proctor.backends.options import OPTION_TYPES, backend_fields, backend_options, taken_by
from proctor.cli import DISPLAY_FLAGS, PROMPT_FLAGS, build_parser
from proctor.errors import UserError
from proctor.factual.cli import GENERATE_BACKEND_FLAGS, MODEL_FLAGS
from proctor.backends.options import HFOptions
from proctor.options import RECORDED, RUN_FLAGS, RunOptions, all_fields, cli_default, option_help
from proctor.option import REQUIRED, declared
from proctor.outputs.records import RunConfig


def subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's run options (the CLI's display flags, which no run option stands for, left out)."""
    display = {f.removeprefix("--").replace("-", "_") for f in DISPLAY_FLAGS}
    return {a.dest: a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.dest not in display}


def test_the_cli_flags_and_the_api_keywords_are_the_same_set_with_the_same_defaults():
    run = flags(subparser("run"))
    keywords = inspect.signature(proctor.evaluate).parameters
    api_only = {name for name, f in all_fields().items() if declared(f).api_only}
    assert api_only == {"command"}
    assert set(run) == set(keywords) - api_only
    for name, action in run.items():
        spec = declared(all_fields()[name])
        expected = keywords[name].default
        if expected is inspect.Parameter.empty:
            assert action.required and all_fields()[name].default is REQUIRED, name
            continue
        parsed = action.default if spec.from_cli is None else spec.from_cli(action.default)
        assert parsed == expected, name
    assert set(RUN_FLAGS) == set(run)


def test_every_flag_says_what_it_does_and_a_backends_option_names_its_backends():
    for name, action in flags(subparser("run")).items():
        assert action.help and action.help == option_help(name)
    assert option_help("threads") == "llamacpp: CPU threads (default: all cores)"
    assert option_help("dtype").startswith("hf, vllm: ")
    assert taken_by("device") == ["hf", "llamacpp", "vllm"]


def test_other_commands_take_the_same_declarations():
    prompts, generate, hidden = subparser("prompts"), subparser("factual", "generate"), subparser("factual", "hidden")
    assert set(PROMPT_FLAGS) <= set(flags(prompts))
    assert flags(prompts)["output"].required
    assert set(MODEL_FLAGS) | {"backend", *GENERATE_BACKEND_FLAGS} <= set(flags(generate))
    assert not {"backend", "threads", "base_url"} & set(flags(hidden))
    for name in ("model", "batch_size", "cache"):
        assert flags(generate)[name].default == cli_default(name)
        assert flags(prompts).get(name, flags(generate)[name]).option_strings == flags(subparser("run"))[name].option_strings


def test_run_config_records_the_declared_options():
    assert {f.name for f in fields(RunConfig)} - {"world_size"} == set(RECORDED)
    assert set(RECORDED) <= set(all_fields())


@pytest.mark.parametrize("backend", sorted(OPTION_TYPES))
def test_an_option_of_another_backend_is_refused_by_the_backends_own_type(backend):
    own = {f.name for f in fields(OPTION_TYPES[backend])}
    for name, f in backend_fields().items():
        if name in own:
            continue
        given = {name: 2 if name in ("threads", "concurrency", "tensor_parallel_size") else "x"}
        if name in ("vllm_for_mc",):
            given = {name: True}
        if name == "gpu_memory_utilization":
            given = {name: 0.5}
        with pytest.raises(UserError, match=f"--{name.replace('_', '-')} does not apply to --backend {backend}"):
            backend_options(backend, given)
        backend_options(backend, {name: f.default, "base_url": "http://h/v1"} if backend == "openai"
                        else {name: f.default})  # a default is not a request


@pytest.mark.parametrize("keyword, value, says", [
    ("include", 7, "include (--include) must be a path or a list of paths"),
    ("include", ["a", 3], "include (--include) must be a path"),
    ("limit", 0, "limit (--limit) must be a positive whole number, got 0"),
    ("limit", "5", "limit (--limit) must be a positive whole number"),
    ("max_length", -1, "max_length (--max-length) must be a positive whole number"),
    ("seed", -1, "seed (--seed) must be a whole number between 0 and 2**63 - 1"),
    ("seed", 2**63, "seed (--seed)"),
    ("deterministic", "yes", "deterministic must be True or False"),
    ("backend", "tgi", "backend (--backend) must be one of hf, llamacpp, openai, vllm"),
    ("dtype", "int4", "dtype (--dtype) must be one of auto, float32, bfloat16, float16"),
    ("data_dir", 3, "data_dir (--data-dir) must be a path"),
    ("fewshot_as_multiturn", "on", "fewshot_as_multiturn must be True, False or None"),
    ("command", "proctor run", "command must be a list of strings"),
])
def test_every_keyword_is_checked_with_a_message_naming_it(keyword, value, says):
    with pytest.raises(UserError, match=says.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        RunOptions.from_keywords({"tasks": ["mmlu_astronomy:mc::olmes"], keyword: value})


def test_an_unknown_keyword_is_pythons_own_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'limt'"):
        proctor.evaluate("smollm2-135m", tasks=["x"], limt=3)
    with pytest.raises(TypeError, match="tasks"):
        proctor.evaluate("smollm2-135m")


def test_defaults_come_from_the_declaration():
    defaults = {name: f.default for name, f in all_fields().items()}
    assert defaults["seed"] == 1234 and defaults["batch_size"] == "auto" and defaults["cache"] is True
    options = RunOptions.from_keywords({"tasks": "a:mc::olmes", "think_tags": True, "labels": None})
    assert options.tasks == ("a:mc::olmes",) and options.think_tags == ("<think>", "</think>")
    assert options.labels == {} and options.backend_options == HFOptions(device=None, dtype="auto")
