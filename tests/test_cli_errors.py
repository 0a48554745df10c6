"""Every user error: one line on stderr, exit code 2, no traceback, no run directory."""

import subprocess
import sys
from pathlib import Path

import pytest


def proctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        timeout=300,
    )


def assert_user_error(done: subprocess.CompletedProcess, *fragments: str) -> str:
    err = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(err.splitlines()) == 1, err
    assert err.startswith("proctor: error: ")
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "run"


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_unknown_spec_suggests_close_names(data_dir, out):
    done = proctor("run", "--tasks", "mmlu_astronmy:mc::olmes", "--data-dir", str(data_dir), "--output", str(out))
    assert_user_error(done, "mmlu_astronmy:mc::olmes", "mmlu_astronomy:mc::olmes")
    assert not out.exists()


@pytest.mark.parametrize("limit", ["0", "-3", "ten"])
def test_bad_limit(limit, data_dir, out):
    done = proctor("run", "--tasks", "mmlu_astronomy:mc::olmes", "--limit", limit, "--output", str(out))
    assert_user_error(done, "--limit")
    assert not out.exists()


def test_missing_data_dir(tmp_path, out):
    done = proctor("run", "--tasks", "mmlu_astronomy:mc::olmes", "--data-dir", str(tmp_path / "nope"), "--output", str(out))
    assert_user_error(done, "nope")
    assert not out.exists()


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_data_dir_without_the_benchmark_says_where_it_looked(tmp_path, out):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = proctor("run", "--tasks", "mmlu_astronomy:mc::olmes", "--data-dir", str(empty), "--output", str(out))
    assert_user_error(done, str(empty))
    assert not out.exists()


def _mmlu_copy(data_dir: Path, root: Path) -> Path:
    """A data dir holding the real astronomy CSVs (and few-shot lists) to corrupt."""
    for split in ("dev", "test"):
        (root / "mmlu" / split).mkdir(parents=True)
        src = data_dir / "mmlu" / split / f"astronomy_{split}.csv"
        (root / "mmlu" / split / src.name).write_bytes(src.read_bytes())
    return root / "mmlu" / "test" / "astronomy_test.csv"


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_malformed_csv_row_names_file_and_line(data_dir, tmp_path, out):
    test_csv = _mmlu_copy(data_dir, tmp_path / "data")
    lines = test_csv.read_text().splitlines(keepends=True)
    lines.insert(3, "a lone field with no options\n")
    test_csv.write_text("".join(lines))
    done = proctor("run", "--tasks", "mmlu_astronomy:mc::olmes", "--data-dir", str(tmp_path / "data"), "--output", str(out))
    assert_user_error(done, "astronomy_test.csv:4:")
    assert not out.exists()


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_non_utf8_file_is_named(data_dir, tmp_path, out):
    test_csv = _mmlu_copy(data_dir, tmp_path / "data")
    test_csv.write_bytes(test_csv.read_bytes() + "caf\u00e9,b,c,d,e,A\n".encode("latin-1"))
    done = proctor("run", "--tasks", "mmlu_astronomy:mc::olmes", "--data-dir", str(tmp_path / "data"), "--output", str(out))
    assert_user_error(done, "astronomy_test.csv", "UTF-8")
    assert not out.exists()


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_malformed_jsonl_row_names_file_and_line(data_dir, tmp_path, out):
    src = data_dir / "social_i_qa" / "socialiqa-train-dev"
    dst = tmp_path / "data" / "social_i_qa" / "socialiqa-train-dev"
    dst.mkdir(parents=True)
    for name in ("train.jsonl.gz", "train-labels.lst", "dev-labels.lst"):
        (dst / name).write_bytes((src / name).read_bytes())
    lines = (src / "dev.jsonl").read_text().splitlines(keepends=True)
    lines[6] = '{"context": "broken\n'
    (dst / "dev.jsonl").write_text("".join(lines))
    (tmp_path / "data" / "fewshot").mkdir()
    for f in (data_dir / "fewshot").iterdir():
        (tmp_path / "data" / "fewshot" / f.name).write_bytes(f.read_bytes())
    done = proctor("run", "--tasks", "socialiqa:mc::olmes", "--data-dir", str(tmp_path / "data"), "--output", str(out))
    assert_user_error(done, "dev.jsonl:7:")
    assert not out.exists()


@pytest.mark.slow  # heavy: a `python -m proctor` subprocess, over 3 s
def test_unreadable_model_path(data_dir, tmp_path, out):
    done = proctor(
        "run", "--model", str(tmp_path / "no-such-model"), "--tasks", "mmlu_astronomy:mc::olmes",
        "--limit", "2", "--data-dir", str(data_dir), "--output", str(out),
    )
    assert_user_error(done, "no-such-model")
    assert not out.exists()


def test_bad_option_is_one_line(out):
    assert_user_error(proctor("run", "--tasks", "x", "--batch-size", "zero"), "--batch-size")
    assert_user_error(proctor("run", "--tasks", "x", "--device", "tpu"), "--device")
