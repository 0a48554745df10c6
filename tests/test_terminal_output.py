"""What `proctor run` prints: the primary scores; every task's metrics only when asked (--per-task)."""

from proctor.cli import main

from tinylm import build_tiny_model


def test_the_per_task_table_is_printed_only_when_asked(tmp_path, data_dir, capsys, monkeypatch):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    model = build_tiny_model(tmp_path / "model")
    args = ["run", "--model", str(model), "--tasks", "arc_easy:rc::olmes", "arc_challenge:rc::olmes", "--limit", "1",
            "--data-dir", str(data_dir), "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "a")]) == 0
    plain = capsys.readouterr().out
    assert "Primary scores" in plain and "arc_challenge:rc::olmes" in plain and "Tasks" not in plain
    assert main([*args, "--output", str(tmp_path / "b"), "--per-task"]) == 0
    assert "Tasks" in capsys.readouterr().out


def test_the_model_options_help_names_its_default(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "(default: smollm2-135m)" in " ".join(capsys.readouterr().out.split())
