"""proctor as a library: `proctor.evaluate` with a path or a loaded model, typed records,
`RunRecord.write` / `proctor.read_run`, and the one exception type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import proctor
from proctor.outputs.records import ChoiceRecord, GenerationRecord, PerplexityRecord
from run_records import choice_record, run_record, task_record
from tinylm import build_tiny_model

MC = "mmlu_astronomy:mc::olmes"
RC = "mmlu_astronomy:rc::olmes"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def loaded(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(tiny)), AutoTokenizer.from_pretrained(str(tiny))


def test_a_loaded_model_scores_exactly_as_its_directory(tiny, data_dir, cache_dir, tmp_path):
    by_path = proctor.evaluate(str(tiny), tasks=[MC, RC], limit=4, data_dir=data_dir, progress=False)
    model, tokenizer = loaded(tiny)
    by_object = proctor.evaluate(model, tokenizer=tokenizer, tasks=[MC, RC], limit=4, data_dir=data_dir,
                                 progress=False, output=tmp_path / "run")
    for spec in (MC, RC):
        a, b = by_path.tasks[spec].records, by_object.tasks[spec].records
        assert len(a) == 4 and all(isinstance(r, ChoiceRecord) for r in a)
        assert [r.to_dict() for r in a] == [r.to_dict() for r in b]   # every sum_logits, bit for bit
        assert by_path.scores[spec] == by_object.scores[spec]
    assert by_object.model.fingerprint.startswith("weights:") and by_object.model.model.startswith("<loaded")
    assert proctor.read_run(tmp_path / "run") == by_object


def test_a_loaded_models_identity_is_its_weights_not_the_object(tiny, data_dir, cache_dir):
    import torch

    first, tokenizer = loaded(tiny)
    second, _ = loaded(tiny)
    run = proctor.evaluate(first, tokenizer=tokenizer, tasks=[MC], limit=2, data_dir=data_dir, progress=False)
    again = proctor.evaluate(second, tokenizer=tokenizer, tasks=[MC], limit=2, data_dir=data_dir, progress=False)
    assert again.model.fingerprint == run.model.fingerprint
    assert again.engine.stats.cached == again.engine.stats.unique > 0   # another object, the same weights: cached
    with torch.no_grad():
        next(second.parameters()).add_(1e-3)
    changed = proctor.evaluate(second, tokenizer=tokenizer, tasks=[MC], limit=2, data_dir=data_dir, progress=False)
    assert changed.model.fingerprint != run.model.fingerprint and changed.engine.stats.cached == 0


def test_a_loaded_model_needs_no_model_files_found(tiny, data_dir, cache_dir, monkeypatch):
    def nowhere(model):
        raise AssertionError(f"looked for {model}")

    monkeypatch.setattr("proctor.backends.options.resolve_source", nowhere)
    model, tokenizer = loaded(tiny)
    run = proctor.evaluate(model, tokenizer=tokenizer, tasks=[MC], limit=1, data_dir=data_dir, progress=False)
    assert run.model.backend == "hf" and len(run.tasks[MC].records) == 1


def test_weights_too_large_to_hash_run_without_the_cache_and_say_so(tiny, data_dir, cache_dir, monkeypatch):
    monkeypatch.setattr("proctor.backends.loaded.MAX_HASHED_BYTES", 1000)
    model, tokenizer = loaded(tiny)
    for _ in range(2):
        run = proctor.evaluate(model, tokenizer=tokenizer, tasks=[MC], limit=2, data_dir=data_dir, progress=False)
        assert run.engine.stats.cached == 0        # nothing stored, nothing read
    assert any("not hashed" in w and "result cache" in w for w in run.warnings)


def test_a_proctor_backend_object_runs_as_given(tiny, data_dir, cache_dir):
    from proctor.backends import load_backend

    backend = load_backend(str(tiny), device="cpu", max_length=2048)
    run = proctor.evaluate(backend, tasks=[MC], limit=2, data_dir=data_dir, progress=False, cache=False)
    by_path = proctor.evaluate(str(tiny), tasks=[MC], limit=2, data_dir=data_dir, progress=False, cache=False)
    assert run.tasks[MC].records == by_path.tasks[MC].records
    assert run.model.backend == "HFBackend" and run.model.fingerprint == by_path.model.fingerprint


def test_the_tokenizer_saved_beside_the_weights_is_found(tiny, data_dir, cache_dir):
    model, _ = loaded(tiny)   # name_or_path is the directory, which holds the tokenizer
    run = proctor.evaluate(model, tasks=[MC], limit=1, data_dir=data_dir, progress=False, cache=False)
    assert len(run.tasks[MC].records) == 1


def test_write_and_read_run_round_trip_every_record_type(tiny, data_dir, cache_dir, tmp_path):
    result = proctor.evaluate(str(tiny), tasks=[MC, "gsm8k::olmes", "c4_en::bpb"], limit=2, data_dir=data_dir,
                              progress=False, max_length=600, labels={"step": "1000", "run": "a"})
    assert [type(result.tasks[t].records[0]) for t in result.tasks] == [ChoiceRecord, GenerationRecord,
                                                                       PerplexityRecord]
    proctor.write_run(result, tmp_path / "run")
    back = proctor.read_run(tmp_path / "run")
    assert back == result and back.scores == result.scores
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["format_version"] == proctor.FORMAT_VERSION
    assert metrics["tasks"][MC]["task_config"]["limit"] == 2           # --limit is recorded
    assert metrics["run_config"]["labels"] == {"step": "1000", "run": "a"} == back.run_config.labels
    assert [metrics["tasks"][t]["kind"] for t in result.tasks] == ["choice", "generation", "perplexity"]
    with pytest.raises(proctor.UserError, match="overwrite=True"):
        proctor.write_run(result, tmp_path / "run")
    proctor.write_run(result, tmp_path / "run", overwrite=True)


def test_read_run_refuses_other_formats_and_non_runs(tmp_path):
    proctor.write_run(run_record(task_record(MC, [choice_record(MC, 0, 0, [-1.0, -2.0])], "choice")), tmp_path / "run")
    metrics = tmp_path / "run" / "metrics.json"
    data = json.loads(metrics.read_text())
    for version, says in ((99, "format_version 99"), (None, "no format_version")):
        data["format_version"] = version
        metrics.write_text(json.dumps(data))
        with pytest.raises(proctor.UserError, match="changed after proctor wrote it"):
            proctor.read_run(tmp_path / "run")
        with pytest.raises(proctor.UserError, match=says):
            proctor.read_run(tmp_path / "run", allow_edited=True)
    with pytest.raises(proctor.UserError, match="not a finished run directory"):
        proctor.read_run(tmp_path)


@pytest.mark.parametrize("call, message", [
    (dict(tasks=[]), "no task specs"),
    (dict(tasks="mmlu_nope:mc::olmes"), "unknown task spec"),
    (dict(tasks=[MC], batch_size=0), "batch_size"),
    (dict(tasks=[MC], backend="llamacpp", model=object()), "loads its model itself"),
    (dict(tasks=[MC], model=3.5), "cannot evaluate a float"),
    (dict(tasks=[MC], labels={"step=1": "2"}), "labels must map"),
    (dict(tasks=[MC], labels={"step": 1000}), "labels must map"),
])
def test_mistakes_are_user_errors_before_any_model_loads(call, message, data_dir):
    with pytest.raises(proctor.UserError, match=message):
        proctor.evaluate(**{"model": "smollm2-135m", "data_dir": data_dir, **call})


def test_a_loaded_model_runs_where_it_is_in_its_own_dtype(tiny, data_dir, cache_dir):
    model, tokenizer = loaded(tiny)
    with pytest.raises(proctor.UserError, match="not bfloat16"):
        proctor.evaluate(model, tokenizer=tokenizer, tasks=[MC], dtype="bfloat16", data_dir=data_dir)
    with pytest.raises(proctor.UserError, match="--base-url does not apply"):
        proctor.evaluate(model, tokenizer=tokenizer, tasks=[MC], base_url="http://x", data_dir=data_dir)


def test_import_proctor_is_light():
    code = "import sys, proctor; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.slow
def test_the_embedded_smollm2_loaded_by_the_caller_matches_proctor_run(data_dir, tmp_path, monkeypatch):
    """The must-show: SmolLM2 in float32 as a transformers object gives `proctor run`'s predictions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.backends.models import model_directory
    from proctor.backends.sources import resolve_source
    from proctor.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["run", "--model", "smollm2-135m", "--tasks", MC, "--limit", "5", "--data-dir", str(data_dir),
                 "--output", str(tmp_path / "cli"), "--no-progress", "--no-cache"]) == 0
    directory, _ = model_directory(resolve_source("smollm2-135m"))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    result = proctor.evaluate(model, tokenizer=AutoTokenizer.from_pretrained(str(directory)), tasks=[MC],
                              limit=5, data_dir=data_dir, progress=False, cache=False)
    cli = proctor.read_run(tmp_path / "cli")
    assert [r.to_dict() for r in result.tasks[MC].records] == [r.to_dict() for r in cli.tasks[MC].records]
    assert result.scores == cli.scores
    # the command counts its start-up from the process's start; a library call has no such start
    assert cli.timing.start_to_first_model_call_seconds > 0 and result.timing.start_to_first_model_call_seconds is None


@pytest.mark.parametrize("args, message", [
    (["--label", "step"], "expected KEY=VALUE"),
    (["--label", "=3"], "expected KEY=VALUE"),
    (["--label", "step=1", "--label", "step=2"], "given twice"),
])
def test_bad_labels_are_one_line(args, message, capsys):
    from proctor.cli import main

    assert main(["run", "--tasks", MC, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
