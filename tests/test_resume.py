"""`proctor run` killed with SIGKILL and run again gives byte-identical outputs."""

from pathlib import Path

import pytest

from killed_runs import finish, kill_when_stored, outputs, start_run
from tinylm import build_tiny_model

SPEC = "mmlu_stem:mc::olmes"


def args(model: Path, data_dir: Path, out: Path) -> list[str]:
    return ["--model", str(model), "--tasks", SPEC, "--limit", "12", "--batch-size", "2",
            "--data-dir", str(data_dir), "--output", str(out), "--no-progress"]


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_sigkill_then_rerun_is_byte_identical(data_dir, tmp_path):
    model = build_tiny_model(tmp_path / "tiny")
    out, cache = tmp_path / "run", tmp_path / "cache"

    done_before_kill = kill_when_stored(start_run(args(model, data_dir, out), cache), cache, "loglikelihood", 20)
    assert 0 < done_before_kill < 18 * 12
    assert not out.exists()  # nothing half-written stands at the output path

    # the resumed run and an uninterrupted one side by side, a core each
    resumed = start_run(args(model, data_dir, out), cache, OMP_NUM_THREADS="1")
    fresh_out = tmp_path / "fresh"
    fresh = start_run(args(model, data_dir, fresh_out), tmp_path / "fresh-cache", OMP_NUM_THREADS="1")
    finish(resumed)
    finish(fresh)

    resumed_files, fresh_files = outputs(out), outputs(fresh_out)
    assert len([n for n in fresh_files if n.endswith("predictions.jsonl")]) == 18
    assert resumed_files == fresh_files
