"""`--backend` and the options that belong to one backend: misuse is one clear error, exit 2."""

import importlib.util

import pytest

from proctor.backends.options import OpenAIOptions, VLLMOptions, backend_options, backend_record
from proctor.cli import main
from proctor.errors import UserError

SPEC = "mmlu_abstract_algebra:mc::olmes"


@pytest.mark.parametrize("argv, message", [
    (["--vllm-for-mc"], "--vllm-for-mc does not apply to --backend hf"),
    (["--backend", "llamacpp", "--base-url", "http://127.0.0.1:1/v1"], "--base-url does not apply to --backend llamacpp"),
    (["--backend", "openai"], "--backend openai needs --base-url"),
    (["--threads", "2"], "--threads does not apply to --backend hf"),
    (["--backend", "openai", "--base-url", "http://x/v1", "--tensor-parallel-size", "2"],
     "--tensor-parallel-size does not apply to --backend openai"),
    (["--backend", "llamacpp", "--device", "cuda"], "--device does not apply to --backend llamacpp"),
])
def test_options_of_another_backend_are_refused(argv, message, data_dir, tmp_path, capsys):
    code = main(["run", "--tasks", SPEC, "--limit", "1", "--data-dir", str(data_dir),
                 "--output", str(tmp_path / "run"), *argv])
    assert code == 2 and not (tmp_path / "run").exists()
    assert message in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_the_extra_says_how_to_install():
    with pytest.raises(UserError, match=r"pip install 'proctor\[vllm\]'"):
        VLLMOptions().open("smollm2-135m", max_length=None, seed=0)


def test_unknown_backend_and_the_record():
    with pytest.raises(UserError, match="unknown backend 'tgi'"):
        backend_options("tgi", {})
    class Plain:
        def config_record(self) -> dict:
            return {}

    assert backend_record(Plain(), backend_options("hf", {})) == {"backend": "hf"}
    record = backend_record(Plain(), OpenAIOptions(base_url="http://h/v1"))
    assert record == {"backend": "openai", "base_url": "http://h/v1"}
