"""Every command and code block of the documentation runs as written, and prints the tables the page shows.

Each page runs in a workspace of its own laid out like a fresh clone beside the shared data
(`../shared/data`), its blocks in page order (`tests/docs_blocks.py` says how a page marks
a block that is an install, needs an extra, or is a file to write). The real model runs
here, so the pages keep their limits small; the whole test is in the slow tier. The how-to
pages run in tests/test_docs_howto_commands.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_blocks import RUN_LANGUAGES, checked_python, doc_pages, page_blocks, run_page

REPO = Path(__file__).resolve().parents[1]
#: pages tests/test_docs_howto_commands.py runs (a file of its own: pytest-xdist's loadfile gives each file one worker)
HOW_TO = ("docs/how-to/", "docs/benchmarks.md")
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


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in RUNNABLE if not p.startswith(HOW_TO)])
def test_every_command_on_the_page_runs_as_written(page, tmp_path, data_dir):
    run_page(PAGES[page], REPO, tmp_path, data_dir)
