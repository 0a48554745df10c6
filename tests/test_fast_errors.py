"""A newcomer's mistakes are reported before torch or transformers is imported (issue 37: within seconds).

Each case runs `proctor` in a fresh interpreter and lists the heavy modules loaded by the time
the one-line error is printed: none may be torch, transformers or datasets. (The time itself
is measured in docs/benchmarks.md, never asserted here.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "datasets", "lm_eval", "vllm", "llama_cpp", "httpx")

PROBE = """
import json, sys
from proctor.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "heavy": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)

TASK = "mmlu_astronomy:mc::olmes"

MISTAKES = {
    "task name typo": (["run", "--tasks", "mmlu_astronomyy:mc::olmes"], "did you mean 'mmlu_astronomy:mc::olmes'"),
    "model path": (["run", "--model", "/no/such/model", "--tasks", TASK], "model path /no/such/model does not exist"),
    "alias typo": (["run", "--model", "smollm2-135", "--tasks", TASK], "smollm2-135"),
    "cuda without a GPU": (["run", "--device", "cuda", "--tasks", TASK], "CUDA is not available"),
    "unknown device": (["run", "--device", "tpu", "--tasks", TASK], "unknown device 'tpu'"),
    "data directory": (["run", "--data-dir", "/no/such/data", "--tasks", TASK], "data directory /no/such/data"),
    "output path": (["run", "--output", "/proc/proctor-run", "--tasks", TASK], "--output /proc/proctor-run"),
    "chat template file": (["run", "--chat-template", "/no/such.jinja", "--tasks", TASK], "/no/such.jinja"),
    "prompts task typo": (["prompts", "--tasks", "mmlu_astronomyy:mc::olmes", "--output", "{tmp}/p"],
                          "did you mean"),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_reported_before_the_heavy_imports(case, tmp_path, data_dir):
    argv, message = MISTAKES[case]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--data-dir" not in argv:
        argv += ["--data-dir", str(data_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PROCTOR_CACHE_DIR": str(tmp_path / "cache")}
    if case == "cuda without a GPU":
        from proctor.backends.options import torch_build

        build = torch_build()
        if build.get("cuda") or build.get("hip"):
            pytest.skip("this torch is a CUDA build: torch itself must say whether a GPU is there")
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("proctor: error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert result["heavy"] == [], f"{case}: {result['heavy']} imported before the error"
    assert not (tmp_path / "runs").exists()
