"""Every command and code block of the documentation runs as written, and prints the tables the page shows.

Each page runs in a workspace of its own laid out like a fresh clone beside the shared data
(`../shared/data`), its blocks in page order (`tests/docs_blocks.py` says how a page marks
a block that is an install, needs an extra, or is a file to write). The real model runs
here, so the pages keep their limits small; the whole test is in the slow tier.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import RUN_LANGUAGES, Block, checked_python, doc_pages, page_blocks

REPO = Path(__file__).resolve().parents[1]
#: what a page's commands may use of the clone besides proctor itself
CLONE_PARTS = ("scripts", "benchmarks", "examples", "pyproject.toml", "README.md", "docs")
PAGES = {str(p.relative_to(REPO)): p for p in doc_pages(REPO)}
RUNNABLE = [name for name, path in PAGES.items()
            if any(b.language in RUN_LANGUAGES and b.skip is None for b in page_blocks(path, REPO))]


def test_every_page_block_is_read_and_every_skip_says_why():
    blocks = [b for path in PAGES.values() for b in page_blocks(path, REPO)]
    assert len(blocks) > 30  # the parser found the pages' blocks
    for block in blocks:
        if block.skip is not None:
            assert block.skip != "no reason given", f"{block.where}: a skipped block must say why"
        if block.file is not None:
            assert block.file and not Path(block.file).is_absolute() and ".." not in Path(block.file).parts, \
                f"{block.where}: a block's file must be a path inside the workspace"
        for command in block.commands:
            assert command.text.strip(), f"{block.where}: an empty command"


def test_no_page_installs_a_build_the_docs_call_unsafe():
    """pip's own llama-cpp-python build is host-tuned (AMX kernels that crash): every install says how to avoid it."""
    for path in PAGES.values():
        for block in page_blocks(path, REPO):
            for line in block.text.splitlines():
                if "pip install" in line and ("llamacpp" in line or "llama-cpp-python" in line):
                    assert "GGML_NATIVE=OFF" in line, f"{block.where}: {line.strip()}"


def test_the_values_a_code_block_shows_are_checked():
    checked = checked_python('x = 0.1512  # 0.15: not checked, an assignment\nx  # 0.15, the score\n(2, 576)  # (2, 576)\n')
    assert "__docs_shows(x, '0.15', 2)" in checked and "__docs_shows((2, 576), '(2, 576)', 3)" in checked
    exec(checked, {})
    with pytest.raises(AssertionError, match="the page shows 0.16"):
        exec(checked_python("0.1512  # 0.16\n"), {})
    shown = [b for p in PAGES.values() for b in page_blocks(p, REPO) if b.language == "python" and b.skip is None]
    assert sum(checked_python(b.text).count("__docs_shows(") - 1 for b in shown) >= 8  # the pages' shown values


def _workspace(tmp_path: Path, data_dir: Path) -> Path:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_dir)
    clone = tmp_path / "clone"
    clone.mkdir()
    for part in CLONE_PARTS:
        if (REPO / part).exists():
            (clone / part).symlink_to(REPO / part)
    return clone


def _run(block: Block, argv: list[str], cwd: Path, env: dict, stdin: str | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=900)
    shown = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{shown}"
    assert "Traceback (most recent call last)" not in done.stderr, f"{block.where} printed a traceback:\n{shown}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE)
def test_every_command_on_the_page_runs_as_written(page, tmp_path, data_dir):
    clone = _workspace(tmp_path, data_dir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TERM": "dumb", "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = 0
    for block in page_blocks(PAGES[page], REPO):
        if block.language not in RUN_LANGUAGES and block.file is None or block.skip is not None:
            continue
        if any(importlib.util.find_spec(module) is None for module in block.needs):
            continue  # the extra is not installed here (CI installs them all)
        if block.file is not None:
            target = clone / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            continue
        if block.language == "bash":
            _run(block, ["bash", "-euo", "pipefail", "-c", block.text], clone, env)
        elif block.language == "python":
            _run(block, [sys.executable, "-"], clone, env, stdin=checked_python(block.text))
        else:
            for command in block.commands:
                printed = _run(block, ["bash", "-euo", "pipefail", "-c", command.text], clone, env)
                lines = {line.rstrip() for line in printed.splitlines()}
                missing = [row for row in command.rows if row not in lines]
                assert not missing, f"{block.where}: `{command.text}` did not print the page's rows:\n" + \
                    "\n".join(missing) + "\nit printed:\n" + printed
        ran += 1
    assert ran, f"{page}: no block ran"
