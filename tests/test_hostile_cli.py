"""The CLI against a hostile user (issue 13): outputs that would destroy files, protocol
changes that must not pass silently, secrets, and checks that must come before any work."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from proctor.cli import main
from proctor.outputs.owned import MANIFEST

from test_cli_errors import _mmlu_copy, assert_user_error, proctor
from tinylm import build_tiny_model

SPEC = "mmlu_astronomy:mc::olmes"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))}


def run_tiny(tiny: Path, data_dir: Path, *extra: str, cwd: Path | None = None, cache: Path | None = None):
    env_cache = {"PROCTOR_CACHE_DIR": str(cache)} if cache else {}
    return subprocess.run(
        [sys.executable, "-m", "proctor", "run", "--model", str(tiny), "--tasks", SPEC, "--limit", "2",
         "--data-dir", str(data_dir), "--no-progress", *extra],
        capture_output=True, text=True, cwd=cwd, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env_cache})


# ---- class 1: --output never deletes what proctor did not write ---------------------

def test_output_dot_in_a_users_directory_is_refused_byte_for_byte(tiny, data_dir, tmp_path):
    home = tmp_path / "thesis"
    (home / ".git").mkdir(parents=True)
    (home / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (home / "thesis.tex").write_text("\\section{Results}\n")
    before = tree(tmp_path)
    for target in (".", str(home), str(home / ".git")):
        done = run_tiny(tiny, data_dir, "--output", target, "--overwrite", cwd=home, cache=tmp_path / "c")
        assert_user_error(done, "--output")
    assert tree(tmp_path) == before


def test_prompts_into_the_data_directory_deletes_nothing(data_dir, tmp_path):
    copy = _mmlu_copy(data_dir, tmp_path / "data").parents[2]
    before = tree(copy)
    for extra in ([], ["--overwrite"]):
        done = proctor("prompts", "--tasks", SPEC, "--limit", "2", "--data-dir", str(copy), "--output", str(copy),
                       *extra)
        assert_user_error(done, "proctor did not write")
    assert tree(copy) == before


@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_a_rerun_replaces_a_run_directory_only_with_overwrite(tiny, data_dir, tmp_path):
    out, cache = tmp_path / "run", tmp_path / "cache"
    assert run_tiny(tiny, data_dir, "--output", str(out), cache=cache).returncode == 0
    first = tree(out)
    assert MANIFEST in first
    done = run_tiny(tiny, data_dir, "--output", str(out), cache=cache)
    assert_user_error(done, "--overwrite")
    assert tree(out) == first
    done = run_tiny(tiny, data_dir, "--output", str(out), "--overwrite", cache=cache)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "metrics.json").read_text())["primary_scores"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "run"]  # no staging or old copies left
    (out / "my-notes.txt").write_text("mine")
    assert_user_error(run_tiny(tiny, data_dir, "--output", str(out), "--overwrite", cache=cache), "my-notes.txt")
    assert (out / "my-notes.txt").read_text() == "mine"


# ---- class 11: everything checkable fails before any data or model work -------------

@pytest.fixture
def no_work(monkeypatch):
    """Planning data or opening a backend fails the test: the error had to come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("data or model work started before the options were checked")

    monkeypatch.setattr("proctor.api.plan", forbidden)
    monkeypatch.setattr("proctor.backends.options.HFOptions.open", forbidden)


def _main_error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("proctor: error: "), err
    return err


def test_unwritable_output_is_reported_before_any_work(no_work, data_dir, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for output in (tmp_path / "file" / "run", Path("/proc/proctor-run"), tmp_path / "file"):
        err = _main_error(["run", "--tasks", SPEC, "--data-dir", str(data_dir), "--output", str(output)], capsys)
        assert "--output" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_reported_before_any_work(no_work, data_dir, tmp_path, capsys):
    err = _main_error(["run", "--tasks", SPEC, "--device", "cuda", "--data-dir", str(data_dir),
                       "--output", str(tmp_path / "run")], capsys)
    assert "CUDA is not available" in err


def test_a_model_that_cannot_be_found_is_reported_before_any_work(no_work, data_dir, tmp_path, capsys):
    for model in (str(tmp_path / "missing"), "nobody/no-such-model-anywhere", "not/a/hub/id"):
        err = _main_error(["run", "--model", model, "--tasks", SPEC, "--data-dir", str(data_dir),
                           "--output", str(tmp_path / "run")], capsys)
        assert model.split("/")[-1] in err, err
    assert not (tmp_path / "run").exists()


def test_a_broken_cache_is_reported_before_any_work(no_work, data_dir, tmp_path, capsys, monkeypatch):
    (tmp_path / "cache").write_text("a file, not a directory")
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    err = _main_error(["run", "--tasks", SPEC, "--data-dir", str(data_dir), "--output", str(tmp_path / "run")], capsys)
    assert "PROCTOR_CACHE_DIR" in err


# ---- class 10: small inconsistencies -------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "0", "1.5", "-0.2", "lots"])
def test_gpu_memory_utilization_must_be_a_fraction(value, no_work, capsys):
    err = _main_error(["run", "--tasks", SPEC, "--backend", "vllm", "--gpu-memory-utilization", value], capsys)
    assert "--gpu-memory-utilization" in err


def test_gpu_memory_utilization_does_not_apply_to_hf(no_work, data_dir, tmp_path, capsys):
    err = _main_error(["run", "--tasks", SPEC, "--gpu-memory-utilization", "0.5", "--data-dir", str(data_dir),
                       "--output", str(tmp_path / "run")], capsys)
    assert "does not apply to --backend hf" in err


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_python_m_proctor_beside_a_proctor_directory(tiny, data_dir, tmp_path):
    """`python -m` puts the current directory first on sys.path; a `proctor/` there must not win."""
    work = tmp_path / "work"
    (work / "proctor" / "cli").mkdir(parents=True)  # e.g. a data directory named proctor
    (work / "proctor" / "version.py").write_text("raise SystemExit('the wrong proctor was imported')\n")
    done = run_tiny(tiny, data_dir, "--output", str(tmp_path / "run"), cwd=work, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["versions"]["proctor"]


# ---- class 5 and 6: bad lengths; the protocol never changes silently ------------------

@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_max_length_1_is_one_line(tiny, data_dir, tmp_path):
    done = run_tiny(tiny, data_dir, "--max-length", "1", "--output", str(tmp_path / "run"), cache=tmp_path / "c")
    assert_user_error(done, "--max-length")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_max_length_beyond_the_models_positions_is_refused(data_dir, tmp_path):
    from tinylm import build_tiny_gpt2

    gpt2 = build_tiny_gpt2(tmp_path / "gpt2")  # 2048 learned positions
    done = run_tiny(gpt2, data_dir, "--max-length", "4096", "--output", str(tmp_path / "run"), cache=tmp_path / "c")
    assert_user_error(done, "2048 positions", "--max-length 2048")


def test_an_empty_model_name_is_refused(no_work, data_dir, tmp_path, capsys):
    err = _main_error(["run", "--model", " ", "--tasks", SPEC, "--data-dir", str(data_dir),
                       "--output", str(tmp_path / "run")], capsys)
    assert "model name is empty" in err


@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_prompts_cut_by_max_length_are_warned_about_and_recorded(tiny, data_dir, tmp_path):
    out = tmp_path / "run"
    done = run_tiny(tiny, data_dir, "--max-length", "8", "--output", str(out), cache=tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert "2 of 2 documents did not fit in --max-length 8" in done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert any("--max-length 8" in w for w in metrics["warnings"])
    assert any("--max-length 8" in w for w in metrics["tasks"][SPEC]["warnings"])
    # all cached now: the rerun reports the same without planning again
    again = run_tiny(tiny, data_dir, "--max-length", "8", "--output", str(tmp_path / "again"), cache=tmp_path / "c")
    assert "2 of 2 documents did not fit in --max-length 8" in again.stderr
    assert json.loads((tmp_path / "again" / "metrics.json").read_text())["warnings"] == metrics["warnings"]
    # the same run with room for the prompts warns about nothing
    done = run_tiny(tiny, data_dir, "--output", str(tmp_path / "full"), cache=tmp_path / "c")
    assert "did not fit" not in done.stderr
    assert not json.loads((tmp_path / "full" / "metrics.json").read_text())["warnings"]


@pytest.mark.slow  # heavy: runs the CLI end to end, over 3 s
def test_generation_prompts_cut_by_max_length_are_warned_about_cached_or_not(tiny, data_dir, tmp_path):
    def gsm8k(out: str):
        return subprocess.run(
            [sys.executable, "-m", "proctor", "run", "--model", str(tiny), "--tasks", "gsm8k::olmes", "--limit", "1",
             "--max-length", "600", "--data-dir", str(data_dir), "--no-progress", "--output", str(tmp_path / out)],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PROCTOR_CACHE_DIR": str(tmp_path / "c")})

    for out in ("first", "cached"):
        done = gsm8k(out)
        assert done.returncode == 0, done.stderr
        assert "gsm8k::olmes: 1 of 1 documents did not fit in --max-length 600" in done.stderr, done.stderr
    first, cached = (json.loads((tmp_path / o / "metrics.json").read_text()) for o in ("first", "cached"))
    assert cached["engine"]["gen_batches_run"] == 0 and cached["warnings"] == first["warnings"]


# ---- class 8: what a killed GGUF conversion left is removed by the next -------------

def test_a_killed_gguf_conversion_leaves_nothing_for_long(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF fake")
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from proctor.backends import models
        def slow_convert(gguf, out):
            (out / "model.safetensors").write_bytes(b"x" * (8 << 20))
            print("converting", flush=True)
            time.sleep(60)
        models._convert_gguf = slow_convert
        models.converted_gguf_dir(Path({str(gguf)!r}), "ab" * 32)
    """)
    victim = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PROCTOR_CACHE_DIR": str(cache)})
    assert victim.stdout.readline().strip() == "converting"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert len(list((cache / "models").iterdir())) == 1  # the dead conversion's staging

    from proctor.backends import models

    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(cache))
    monkeypatch.setattr(models, "_convert_gguf", lambda gguf, out: (out / "config.json").write_text("{}"))
    target = models.converted_gguf_dir(gguf, "ab" * 32)
    assert [p.name for p in (cache / "models").iterdir()] == [target.name]


# ---- factual outputs ----------------------------------------------------------------

def test_factual_output_dir_naming_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for step in (["score", "--generations", str(tmp_path / "g.jsonl")], ["metrics", "--name", "m"]):
        done = proctor("factual", *step, "--bank", str(tmp_path / "bank.jsonl"), "--output-dir", str(tmp_path / "file"))
        assert_user_error(done, "--output-dir", "not a directory")


def test_factual_bank_output_never_replaces_a_users_file(tmp_path, data_dir):
    (tmp_path / "bank.jsonl").write_text("my own notes\n")
    done = proctor("factual", "bank", "--data-dir", str(data_dir), "--output", str(tmp_path / "bank.jsonl"))
    assert_user_error(done, "bank.jsonl", "did not write")
    assert (tmp_path / "bank.jsonl").read_text() == "my own notes\n"
    ours = tmp_path / "ours.jsonl"
    for _ in range(2):  # the second build replaces proctor's own, unchanged bank
        done = proctor("factual", "bank", "--data-dir", str(data_dir), "--output", str(ours),
                       "--facts-per-relation", "1", "--sources", "rome")
        assert done.returncode == 0, done.stderr
