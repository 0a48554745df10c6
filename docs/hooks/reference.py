"""MkDocs hook: the reference pages, generated from the code at build time.

A page holds a marker on a line of its own; the hook replaces it with Markdown built from
what the code declares, so the reference cannot drift from it:

- `<!-- proctor:cli -->`: every command of `proctor.cli.build_parser()`, nested ones
  included (`export bergson`, `factual generate`, ...), with every option, its default and
  its help;
- `<!-- proctor:evaluate -->`: every keyword of `inspect.signature(proctor.evaluate)` with
  its default, and the help of the `proctor run` flag of the same name;
- `<!-- proctor:records -->`: every dataclass of `proctor/outputs/records.py` (and of the
  modules named in RECORD_MODULES), its docstring, and each field with its type and its
  documentation (the trailing `# comment` on its line, or the `#:` comments above it).

It also fails the build when a hand-written page names a `proctor run` option that the
parser does not have (see `check_flags`).
"""

from __future__ import annotations

import argparse
import ast
import html
import importlib.util
import inspect
import io
import re
import tokenize
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

from mkdocs.exceptions import PluginError

RECORD_MODULES = ("proctor.outputs.records", "proctor.tasks.config", "proctor.engine.stats")
MARKERS = {
    "<!-- proctor:cli -->": lambda: cli_reference(),
    "<!-- proctor:evaluate -->": lambda: evaluate_reference(),
    "<!-- proctor:records -->": lambda: records_reference(),
}


# ---- MkDocs events -------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    check_flags(markdown, page.file.src_uri)
    for marker, generate in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


# ---- Markdown helpers ----------------------------------------------------------------------


def cell(text: Optional[str]) -> str:
    """Text for a table cell: `<` and `&` escaped outside code spans, pipes escaped, one line."""
    if not text:
        return ""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = [p if p.startswith("`") else html.escape(p, quote=False) for p in parts]
    return "".join(out).replace("|", "\\|")


def prose(text: str) -> str:
    """Docstring text as Markdown: `<` and `&` escaped outside code spans (`<n>` is no HTML tag)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else html.escape(p, quote=False) for p in parts)


def code(text: str) -> str:
    """An inline code span for `text` (a cell's pipes escaped)."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


# ---- the CLI -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from proctor.cli import build_parser

    return build_parser()


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, Optional[str]]]:
    """(command words, parser, its one-line help) for every command under `parser`, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from commands(sub, (*path, name))


def _subcommand_action(parser: argparse.ArgumentParser) -> Optional[argparse._SubParsersAction]:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        try:
            text = text % {**vars(action), "default": action.default}
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    value = action.default
    if value is None or value is argparse.SUPPRESS:
        return ""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off" if isinstance(action, argparse._StoreTrueAction) else "on"
    return code(repr(value) if isinstance(value, str) else str(value))


def _option_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar or action.dest)
    names = " / ".join(action.option_strings)
    if action.nargs == 0:
        return code(names)
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                 else action.dest.upper())
    if action.nargs == "?":
        metavar = f"[{metavar}]"
    elif action.nargs in ("+", "*"):
        metavar = f"{metavar} [{metavar} ...]"
    return code(f"{names} {metavar}")


def option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        text = _help(action)
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            text += f" (one of: {', '.join(map(str, action.choices))})"
        if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
            text += " (repeatable)"
        rows.append(f"| {_option_name(action)} | {_default(action)} | {cell(text)} |")
    return rows


def cli_reference() -> str:
    parser = _parser()
    out = ["Generated from `proctor.cli.build_parser()` when these pages were built.\n",
           "```text", parser.format_usage().strip(), "```", ""]
    top = option_rows(parser)
    if top:
        out += ["| option | default | what it does |", "|---|---|---|", *top, ""]
    for words, sub, summary in commands(parser):
        name = " ".join(("proctor", *words))
        level = "#" * min(2 + len(words) - 1, 4)
        out += [f"{level} `{name}`", ""]
        if summary:
            out += [cell(summary)[0:1].upper() + cell(summary)[1:] + ".", ""]
        usage = " ".join(sub.format_usage().split())   # one line: argparse wraps at the terminal width
        out += ["```text", usage.removeprefix("usage: "), "```", ""]
        nested = _subcommand_action(sub)
        if nested is not None:
            out += ["Subcommands: " + ", ".join(f"`{name} {n}`" for n in nested.choices) + ".", ""]
        rows = option_rows(sub)
        if rows:
            out += ["| option | default | what it does |", "|---|---|---|", *rows, ""]
    return "\n".join(out)


@lru_cache(maxsize=None)
def _option_strings(*words: str) -> frozenset[str]:
    """Every option string of the command `proctor <words>`; empty when there is no such command."""
    parser: Optional[argparse.ArgumentParser] = _parser()
    for word in words:
        action = _subcommand_action(parser) if parser is not None else None
        parser = None if action is None else action.choices.get(word)
    if parser is None:
        return frozenset()
    return frozenset(s for a in parser._actions for s in a.option_strings)


# ---- proctor.evaluate ----------------------------------------------------------------------


def evaluate_reference() -> str:
    import proctor

    run = next(sub for words, sub, _ in commands(_parser()) if words == ("run",))
    by_dest = {a.dest: a for a in run._actions if a.option_strings}
    by_flag = {s: a for a in run._actions for s in a.option_strings}
    out = ["Generated from `inspect.signature(proctor.evaluate)` and the `proctor run` parser when these "
           "pages were built.\n", "```python", f"proctor.evaluate{inspect.signature(proctor.evaluate)}", "```", "",
           "| keyword | default | `proctor run` flag | what it does |", "|---|---|---|---|"]
    for name, param in inspect.signature(proctor.evaluate).parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        action = by_dest.get(name) or by_flag.get("--" + name.replace("_", "-"))
        if param.default is inspect.Parameter.empty:
            default = "required"
        else:
            default = code(repr(param.default))
        flag = "" if action is None else code(" / ".join(action.option_strings))
        text = "" if action is None else _help(action)
        if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            text = f"(also positional) {text}"
        if action is None:
            text = "Python only, no `proctor run` flag"
        out.append(f"| `{name}` | {default} | {flag} | {cell(text)} |")
    return "\n".join(out) + "\n"


# ---- the records ---------------------------------------------------------------------------


def _comments(source: str) -> dict[int, str]:
    """Each line's comment text, by line number."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string
    return found


def _field_doc(node: ast.AnnAssign, lines: list[str], comments: dict[int, str]) -> str:
    """The `#:` comment lines right above a field, else the trailing comment on its line(s)."""
    above = []
    line = node.lineno - 1
    while line >= 1 and lines[line - 1].strip().startswith("#:"):
        above.insert(0, lines[line - 1].strip()[2:].strip())
        line -= 1
    if above:
        return " ".join(above)
    trailing = [comments[n][1:].strip() for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                if n in comments and not lines[n - 1].strip().startswith("#")]
    return " ".join(trailing)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(target, ast.Name) and target.id == "dataclass") or \
                (isinstance(target, ast.Attribute) and target.attr == "dataclass"):
            return True
    return False


def _module_source(module: str) -> tuple[str, str]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise PluginError(f"reference hook: cannot find module {module}")
    return Path(spec.origin).read_text(encoding="utf-8"), module.replace(".", "/") + ".py"


def dataclass_docs(module: str) -> Iterator[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """(class name, docstring, [(field, type, default, documentation)]) for each dataclass of `module`."""
    source, _ = _module_source(module)
    tree = ast.parse(source)
    lines = source.splitlines()
    comments = _comments(source)
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not _is_dataclass(node):
            continue
        rows = []
        for stmt in node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            kind = ast.get_source_segment(source, stmt.annotation) or ""
            if kind.startswith("ClassVar"):
                continue
            default = "" if stmt.value is None else (ast.get_source_segment(source, stmt.value) or "")
            match = re.fullmatch(r"field\(default_factory=(\w+)\)", default)
            if match:
                default = {"dict": "{}", "list": "[]", "tuple": "()"}.get(match.group(1), default)
            rows.append((stmt.target.id, kind, " ".join(default.split()), _field_doc(stmt, lines, comments)))
        yield node.name, inspect.cleandoc(ast.get_docstring(node) or ""), rows


def _module_constants(module: str) -> list[tuple[str, str, str]]:
    """(name, value, documentation) of the module's documented top-level assignments."""
    source, _ = _module_source(module)
    lines = source.splitlines()
    comments = _comments(source)
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            fake = ast.AnnAssign(target=node.targets[0], annotation=node.value, simple=1,
                                 lineno=node.lineno, end_lineno=node.end_lineno, col_offset=0)
            doc = _field_doc(fake, lines, comments)
            value = ast.get_source_segment(source, node.value) or ""
            if doc and len(value) < 60:
                out.append((node.targets[0].id, value, doc))
    return out


def records_reference() -> str:
    out = []
    for module in RECORD_MODULES:
        source, path = _module_source(module)
        out += [f"## `{module}`", "", f"Generated from `{path}` when these pages were built.", ""]
        doc = ast.get_docstring(ast.parse(source))
        if doc and module == RECORD_MODULES[0]:
            out += [prose(doc), ""]
        constants = _module_constants(module)
        if constants:
            out += ["| name | value | what it is |", "|---|---|---|",
                    *(f"| `{n}` | {code(v)} | {cell(d)} |" for n, v, d in constants), ""]
        for name, docstring, rows in dataclass_docs(module):
            out += [f"### `{name}`", ""]
            if docstring:
                out += [prose(docstring), ""]
            out += ["| field | type | default | what it is |", "|---|---|---|---|"]
            out += [f"| `{f}` | {code(t)} | {code(d) if d else ''} | {cell(doc)} |" for f, t, d, doc in rows]
            out.append("")
    return "\n".join(out)


# ---- hand-written pages must name real options ---------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_COMMAND = re.compile(r"\bproctor ((?:[a-z]+)(?: [a-z]+)?)")
_FLAG = re.compile(r"(?<![\w-])--(?:\[no-\])?[a-z][a-z0-9-]*")


def _flag_names(text: str) -> list[str]:
    """The options a command text names: `--[no-]x` gives both `--x` and `--no-x`."""
    names = []
    for match in _FLAG.finditer(text):
        flag = match.group(0)
        if flag.startswith("--[no-]"):
            names += ["--" + flag[len("--[no-]"):], "--no-" + flag[len("--[no-]"):]]
        else:
            names.append(flag)
    return names


def _known(words: str) -> frozenset[str]:
    parts = words.split()
    return _option_strings(*parts) or _option_strings(*parts[:1])


def _blocks(markdown: str) -> Iterator[tuple[str, bool]]:
    """The page's paragraphs (blank-line separated) and fenced blocks: (text, is_code)."""
    block: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            if fenced:
                yield "\n".join(block), True
                block, fenced = [], False
            else:
                if block:
                    yield "\n".join(block), False
                block, fenced = [], True
            continue
        if not fenced and not line.strip():
            if block:
                yield "\n".join(block), False
            block = []
            continue
        block.append(line)
    if block:
        yield "\n".join(block), fenced


def _commands_in_code(text: str) -> Iterator[str]:
    """Each `proctor ...` command line of a code block, continuation lines (`\\`) joined."""
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.split("  #", 1)[0]
        match = _COMMAND.search(line)
        if match:
            yield line[match.start():]


def check_flags(markdown: str, page: str) -> None:
    """Fail the build on a `--flag` a hand-written page gives a proctor command that lacks it.

    Checked: every `proctor <command> ... --flag` written in an inline code span or on a
    line of a code block (the options after the command words must be that command's); and
    in a paragraph that names `proctor run` in code, every inline code span that starts with
    `--x` (lm-eval's and Bergson's `--x_y` options have underscores and are left alone) must
    be an option of `proctor run` or of another proctor command named in that paragraph.
    Generated sections are never checked (the markers are replaced after this)."""
    bad = []
    for text, is_code in _blocks(markdown):
        spans = [text] if is_code else re.findall(r"`([^`\n]+)`", text.replace("\n", " "))
        lines = list(_commands_in_code(text)) if is_code else [s for s in spans if _COMMAND.match(s)]
        for line in lines:
            words = _COMMAND.match(line).group(1)  # type: ignore[union-attr]
            known = _known(words)
            if not known:
                continue   # another program's `proctor` word, or a command this check cannot place
            bad += [f"{f} (in `{line.strip()[:80]}`)" for f in _flag_names(line) if f not in known]
        if is_code or "proctor run" not in " ".join(spans):
            continue
        named = {m.group(1) for s in spans for m in _COMMAND.finditer(s)}
        known = frozenset().union(*(_known(w) for w in named | {"run"}))
        for span in spans:
            if span.startswith("--") and not _COMMAND.search(span):
                head = span.split()[0].split("=")[0]
                if "_" in head:
                    continue
                bad += [f"{f} (in `{span}`)" for f in _flag_names(head) if f not in known]
    if bad:
        raise PluginError(f"{page} names options that proctor's parser does not have: " + "; ".join(bad))
