"""The CLI's generation options: --seed, --allow-unsafe-exec and the sandbox preflight."""

import pytest

from proctor import sandbox
from proctor.cli import build_parser, main
from proctor.tasks.humaneval import HumanEvalTask

from tinylm import build_tiny_model


def no_network_isolation(self):
    return sandbox.SandboxInfo(isolation=sandbox.Isolation.NONE, drops_uid=False)


@pytest.fixture
def model_never_opens(monkeypatch, tmp_path):
    """A model directory that passes the location check; opening it says so instead of loading."""
    from proctor.errors import UserError

    def opened(options, model, source, **how):
        raise UserError("the backend was opened")

    monkeypatch.setattr("proctor.backends.options.HFOptions.open", opened)
    return str(build_tiny_model(tmp_path / "tiny"))


def test_humaneval_refuses_before_the_model_loads(monkeypatch, model_never_opens, data_dir, tmp_path, capsys):
    monkeypatch.setattr(HumanEvalTask, "sandbox_info", no_network_isolation)
    code = main(["run", "--model", model_never_opens, "--tasks", "humaneval::greedy",
                 "--limit", "1", "--data-dir", str(data_dir), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--allow-unsafe-exec" in err
    assert "backend was opened" not in err   # refused first: the model was never loaded
    assert err.count("\n") == 1


def test_allow_unsafe_exec_reaches_the_task(monkeypatch, model_never_opens, data_dir, tmp_path, capsys):
    seen = []
    monkeypatch.setattr(HumanEvalTask, "sandbox_info", no_network_isolation)
    monkeypatch.setattr(HumanEvalTask, "preflight", lambda self, allow_unsafe_exec: seen.append(allow_unsafe_exec))
    code = main(["run", "--model", model_never_opens, "--tasks", "humaneval::greedy",
                 "--limit", "1", "--allow-unsafe-exec", "--data-dir", str(data_dir),
                 "--output", str(tmp_path / "out")])
    assert seen == [True]
    assert code == 2 and "backend was opened" in capsys.readouterr().err   # went on to the model


@pytest.mark.parametrize("bad", ["-1", "x", str(2**63)])
def test_bad_seed_is_a_user_error(bad, capsys):
    assert main(["run", "--tasks", "gsm8k::olmes", "--seed", bad]) == 2
    assert "--seed" in capsys.readouterr().err


def test_seed_defaults_to_the_fixed_default():
    args = build_parser().parse_args(["run", "--tasks", "gsm8k::olmes"])
    assert args.seed == 1234 and not args.allow_unsafe_exec
