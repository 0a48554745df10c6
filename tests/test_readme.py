"""README.md stays short, its links resolve, and its worked example runs as written."""

from __future__ import annotations

import ast
import io
import math
import os
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 250


def readme() -> str:
    return README.read_text(encoding="utf-8")


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def example_command() -> tuple[list[str], list[str]]:
    """The worked example's `proctor run` command (its words) and the output lines it shows."""
    block = next(b for b in fenced_blocks(readme(), "console") if b.startswith("$ proctor run"))
    lines = block.splitlines()
    command, rest = lines[0], 1
    while command.endswith("\\"):
        command = command[:-1] + " " + lines[rest].strip()
        rest += 1
    return shlex.split(command[2:]), lines[rest:]


def table_rows(lines: list[str]) -> list[list[str]]:
    """The cells of a rich table's body rows (`│ a │ b │`)."""
    return [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in lines
            if line.strip().startswith("│")]


# ---- fast: the README itself ------------------------------------------------------------------


def test_readme_is_short():
    lines = readme().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; keep it to {MAX_LINES} and move the rest to docs/"


def test_every_relative_link_in_the_readme_exists():
    text = re.sub(r"^```.*?^```", "", readme(), flags=re.S | re.M)   # links only outside code
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, flags=re.M)
    relative = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    assert relative, "the README links into docs/"
    missing = [t for t in relative if not (REPO / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_worked_example_is_found():
    words, output = example_command()
    assert words[:2] == ["proctor", "run"] and "--limit" in words
    assert table_rows(output), "the worked example shows the primary-score table"
    assert any("proctor.evaluate(" in b for b in fenced_blocks(readme(), "python"))


# ---- slow: run the worked example for real ----------------------------------------------------


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    """A results cache of its own, so the model really scores (the converted model is shared)."""
    from proctor.backends.models import cache_root

    root = tmp_path_factory.mktemp("readme-cache")
    (cache_root() / "models").mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    return root


def _with_data_dir(words: list[str], data_dir: Path, output: Path) -> list[str]:
    """The README's command with this machine's data directory and a fresh output path."""
    out = list(words)
    for flag, value in (("--data-dir", str(data_dir)), ("--output", str(output))):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


@pytest.mark.slow
def test_the_readme_command_prints_the_readme_table(data_dir, fresh_cache, tmp_path):
    words, shown = example_command()
    argv = _with_data_dir(words, data_dir, tmp_path / "demo")
    env = {**os.environ, "PROCTOR_CACHE_DIR": str(fresh_cache), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "proctor", *argv[1:], "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout.splitlines()) == table_rows(shown), done.stdout
    assert (tmp_path / "demo" / "metrics.json").exists()


def _expected_value(comment: str) -> float | None:
    """The number a `# 0.15, ...` comment promises, or None when it promises none."""
    match = re.match(r"#\s*(-?\d+(?:\.\d+)?)\b", comment)
    return None if match is None else float(match.group(1))


def _places(number: str) -> int:
    return len(number.split(".", 1)[1]) if "." in number else 0


@pytest.mark.slow
def test_the_readme_python_block_gives_the_values_it_shows(data_dir, fresh_cache, tmp_path, monkeypatch):
    source = next(b for b in fenced_blocks(readme(), "python") if "proctor.evaluate(" in b)
    source = source.replace('data_dir="../shared/data"', f"data_dir={str(data_dir)!r}")
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(fresh_cache))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    checked = 0
    for statement in ast.parse(source).body:
        comment = comments.get(statement.end_lineno or statement.lineno, "")
        expected = _expected_value(comment)
        if isinstance(statement, ast.Expr) and expected is not None:
            value = eval(compile(ast.Expression(statement.value), "README.md", "eval"), namespace)
            places = _places(re.match(r"#\s*(-?[\d.]+)", comment).group(1))  # type: ignore[union-attr]
            assert math.isclose(value, expected, abs_tol=0.5 * 10 ** -places + 1e-12), \
                f"{ast.unparse(statement)} is {value}, README.md says {comment}"
            checked += 1
        else:   # the block's own asserts run as written
            exec(compile(ast.Module([statement], []), "README.md", "exec"), namespace)
    assert checked >= 3, "the README's Python block shows the values it computes"
    assert (tmp_path / "runs" / "x" / "metrics.json").exists()
