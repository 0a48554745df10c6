"""With only the core install (no httpx, llama.cpp, vLLM, lm-eval, Bergson), every proctor command
either works or ends in one line naming the extra and its install command: no traceback.

The extras are hidden from the child processes by an import hook (a `sitecustomize` on their
path), as if they were not installed."""

import os
import subprocess
import sys

import pytest

from tinylm import build_tiny_model

EXTRAS = ("httpx", "llama_cpp", "vllm", "lm_eval", "bergson")
HIDE = f"""
import sys
from importlib.machinery import PathFinder
class _Hiding(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS!r}:
            return None   # found nowhere: find_spec gives None and an import raises ModuleNotFoundError
        return PathFinder.find_spec(name, path, target)
sys.meta_path = [_Hiding if finder is PathFinder else finder for finder in sys.meta_path]
"""


@pytest.fixture(scope="module")
def core_only(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(HIDE)
    model = build_tiny_model(tmp_path_factory.mktemp("model"), chat=True)
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "PROCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return env, model


def proctor(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proctor", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_the_hook_hides_the_extras(core_only):
    env, _ = core_only
    done = subprocess.run([sys.executable, "-c", "import importlib.util; assert importlib.util.find_spec('vllm') is None; "
                           "import httpx"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and "No module named 'httpx'" in done.stderr, done.stderr


@pytest.mark.slow  # ~2 min of CLI runs; names the real model's alias (it never loads)
def test_every_command_works_or_names_its_extra(core_only, data_dir, tmp_path):
    env, model = core_only
    data = ["--data-dir", str(data_dir)]
    run = tmp_path / "run"
    works = [
        ["tasks", "mmlu_astronomy"],
        ["prompts", "--tasks", "mmlu_astronomy:mc::tulu", "--limit", "1", "--chat-template", "--model", str(model),
         *data, "--output", str(tmp_path / "prompts")],
        ["run", "--model", str(model), "--tasks", "arc_easy:rc::olmes", "--limit", "2", *data,
         "--output", str(run), "--no-progress"],
        ["report", str(run), "--output", str(tmp_path / "report.html")],
        ["compare", str(run), str(run), "--json", str(tmp_path / "cmp.json")],
    ]
    extras = {  # command -> the extra its one line names
        "llamacpp": ["run", "--backend", "llamacpp", "--model", "smollm2-135m", "--tasks", "arc_easy:rc::olmes",
                     "--limit", "1", *data, "--output", str(tmp_path / "l")],
        "vllm": ["run", "--backend", "vllm", "--model", str(model), "--tasks", "arc_easy:rc::olmes", "--limit", "1",
                 *data, "--output", str(tmp_path / "v")],
        "openai": ["run", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "smollm2-135m",
                   "--tasks", "arc_easy:rc::olmes", "--limit", "1", *data, "--output", str(tmp_path / "o")],
        "lm-eval": ["run", "--model", str(model), "--tasks", "lm_eval:arc_easy", "--limit", "1", *data,
                    "--output", str(tmp_path / "h")],
    }
    tracebacks = []
    for args in works:
        done = proctor(env, *args)
        tracebacks += [args[0]] if "Traceback" in done.stderr else []
        assert done.returncode == 0, (args, done.stderr[-1500:])
    for extra, args in extras.items():
        done = proctor(env, *args)
        tracebacks += [extra] if "Traceback" in done.stderr else []
        assert done.returncode == 2, (extra, done.stderr[-1500:])
        (line,) = done.stderr.strip().splitlines()  # the error alone: refused before any other work
        assert f"proctor[{extra}]" in line, line
    assert tracebacks == []
    assert not any((tmp_path / name).exists() for name in "lvoh")
