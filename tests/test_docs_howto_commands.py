"""Every command and code block of the how-to pages and the benchmarks page runs as written.

The same runner as tests/test_docs_commands.py (`tests.docs_blocks.run_page`), in a file of
its own so that pytest-xdist's `--dist loadfile` runs these pages on the other worker.
"""

from __future__ import annotations

import pytest

from tests.docs_blocks import run_page
from tests.test_docs_commands import HOW_TO, PAGES, REPO, RUNNABLE


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in RUNNABLE if p.startswith(HOW_TO)])
def test_every_command_on_the_page_runs_as_written(page, tmp_path, data_dir):
    run_page(PAGES[page], REPO, tmp_path, data_dir)
