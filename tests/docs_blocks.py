"""The code blocks of the documentation pages, as the docs-commands test runs them.

A page's fenced blocks of language `bash`, `console` or `python` run in page order (fences
may be indented inside list items). An HTML comment on its own line right before a fence
controls it:

- `<!-- docs-test: skip REASON -->`: not run (REASON says why: an install, a GPU, a server);
- `<!-- docs-test: file PATH -->`: its text is written to PATH instead of being run;
- `<!-- docs-test: needs MODULE[,MODULE] -->`: run where those modules import (an extra the
  page names at its top is installed), else skipped.

A `console` block's lines that start with `$ ` are commands (continued by a trailing `\\`);
the lines after one, up to the next, are what it printed, and the rows of its tables (lines
starting with `│`) must be printed again, verbatim.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

RUN_LANGUAGES = ("bash", "console", "python")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*$")
_CONTROL = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<verb>skip|file|needs)\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Command:
    """A console block's command and the table rows it printed on the page."""

    text: str
    rows: tuple[str, ...]


@dataclass
class Block:
    """One fenced block of a page."""

    page: str
    line: int                       # the fence's line, 1-based
    language: str
    text: str
    skip: Optional[str] = None      # why it is not run
    file: Optional[str] = None      # where its text is written instead
    needs: tuple[str, ...] = ()     # modules it runs with (an extra's)
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        """The block as `page:line`."""
        return f"{self.page}:{self.line}"


def console_commands(text: str) -> list[Command]:
    """Split a console block into its commands and, for each, the table rows it printed."""
    commands: list[Command] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i].strip())
        i += 1
        printed = []
        while i < len(lines) and not lines[i].startswith("$ "):
            printed.append(lines[i])
            i += 1
        commands.append(Command("\n".join(command), tuple(p.rstrip() for p in printed if p.startswith("│"))))
    return commands


def page_blocks(path: Path, root: Path) -> list[Block]:
    """Return the fenced blocks of one page, each with its control comment's verdict."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, language, start = fence["indent"], fence["lang"], i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        text = textwrap.dedent("\n".join(body)) + "\n" if indent else "\n".join(body) + "\n"
        block = Block(str(path.relative_to(root)), start + 1, language, text)
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        control = _CONTROL.match(lines[above]) if above >= 0 else None
        if control is not None:
            if control["verb"] == "skip":
                block.skip = control["arg"] or "no reason given"
            elif control["verb"] == "file":
                block.file = control["arg"]
            else:
                block.needs = tuple(m.strip() for m in control["arg"].split(",") if m.strip())
        if language == "console":
            block.commands = console_commands(text)
        blocks.append(block)
    return blocks


def doc_pages(root: Path) -> list[Path]:
    """README.md and every page of docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


_SHOWN = re.compile(r"^(?P<expr>[^#]+?)\s+#\s*(?P<value>-?\d+(?:\.\d+)?|\((?:\d+,\s*)+\d*\))(?=$|[\s:,;)])")

_CHECK = '''
def __docs_shows(value, shown, line):
    if isinstance(value, tuple) or shown.startswith("("):
        assert tuple(value) == eval(shown), f"line {line}: the page shows {shown}, the code gives {value!r}"
        return
    places = len(shown.split(".")[1]) if "." in shown else 0
    assert abs(float(value) - float(shown)) <= 0.5 * 10 ** -places + 1e-12, \\
        f"line {line}: the page shows {shown}, the code gives {value!r}"
'''


def checked_python(text: str) -> str:
    """`text` with each top-level expression whose comment starts with a value checked against that value.

    `result.scores["x"]   # 0.15, the headline score` runs as a check that the expression
    rounds to 0.15 (to the places shown); a shape comment such as `# (2, 576)` must equal.
    """
    import ast

    out = [_CHECK]
    for number, line in enumerate(text.splitlines(), 1):
        shown = _SHOWN.match(line)
        if shown and not line[:1].isspace():
            try:
                ast.parse(shown["expr"], mode="eval")
            except SyntaxError:  # a statement (an assignment, say): its comment is prose
                out.append(line)
                continue
            out.append(f"__docs_shows({shown['expr'].strip()}, {shown['value']!r}, {number})")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


#: what a page's commands may use of the clone besides proctor itself
CLONE_PARTS = ("scripts", "benchmarks", "examples", "pyproject.toml", "README.md", "docs")


def _workspace(tmp_path: Path, data_dir: Path, repo: Path) -> Path:
    """A directory laid out like a fresh clone beside the shared data (`../shared/data`)."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_dir)
    clone = tmp_path / "clone"
    clone.mkdir()
    for part in CLONE_PARTS:
        if (repo / part).exists():
            (clone / part).symlink_to(repo / part)
    return clone


def _run(block: Block, argv: list[str], cwd: Path, env: dict, stdin: Optional[str] = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=900)
    shown = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{shown}"
    assert "Traceback (most recent call last)" not in done.stderr, f"{block.where} printed a traceback:\n{shown}"
    return done.stdout


def run_page(page: Path, repo: Path, tmp_path: Path, data_dir: Path) -> None:
    """Run every block of `page` as written, in page order, in a fresh workspace; fail on the first that does not."""
    clone = _workspace(tmp_path, data_dir, repo)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TERM": "dumb", "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = 0
    for block in page_blocks(page, repo):
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
