"""Check generations from another inference stack against the query bank before scoring.

The seed lets a user plug in their own stack (vLLM, an API, a harness); its file joins the
bank on `query_id`. A partial or mismatched file must never be scored silently: every
problem is listed, and `ValidationReport.ok` is False when any was found.

A file whose rows record a chat template (`chat_template`, see `prompts.template_record`)
follows another protocol than the seed's: it can be scored, and `protocol_differences`
says so (its numbers are not comparable with the seed's); its prompts must then contain
the bank's `build_prompt`. A file mixing prompt formats is a problem.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from proctor.data.readers import decode_text, split_lines
from proctor.errors import UserError
from proctor.factual.prompts import DECODING, build_prompt, describe_template, protocol_note, template_key

#: field -> the types it may hold (required fields first)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "query_id": (str,),
    "raw_response": (str,),
    "fact_id": (str,),
    "condition_family": (str,),
    "model": (str,),
    "prompt": (str,),
    "generated_tokens": (int,),
    "finish_reason": (str,),
    "chat_template": (dict, type(None)),   # proctor's record of a chat-formatted prompt
}
_TEMPLATE_FIELDS = ("origin", "digest")
REQUIRED = ("query_id", "raw_response")
_SHOWN = 5  # ids quoted per problem in the summary


@dataclass(frozen=True)
class InvalidLine:
    """A line of a JSONL file that is not valid JSON (validation reports it by line number)."""

    error: str


def read_jsonl(path: Path) -> Iterator[Any]:
    r"""Yield each line's JSON value, or an `InvalidLine` (so line numbers stay true).

    Lines are separated by "\n" only (see `proctor.data.readers.split_lines`), and a
    leading byte-order mark is dropped.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    for line in split_lines(decode_text(data, path)):
        yield _parse_line(line)


def _parse_line(line: str) -> Any:
    if not line.strip():
        return InvalidLine("empty line")
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        return InvalidLine(e.msg)
    except RecursionError:
        return InvalidLine("nested too deeply to read")


@dataclass
class ValidationReport:
    """What is wrong with a generations file, per kind of problem (ids or line numbers)."""

    rows: int = 0
    missing: list[str] = field(default_factory=list)        # bank ids with no generation
    duplicate: list[str] = field(default_factory=list)      # ids generated more than once
    unknown: list[str] = field(default_factory=list)        # ids not in the bank
    bad_types: list[str] = field(default_factory=list)      # "line N: field ... "
    prompt_mismatch: list[str] = field(default_factory=list)  # prompt differs from build_prompt
    family_mismatch: list[str] = field(default_factory=list)  # fact_id/condition_family differ
    cut_short: list[str] = field(default_factory=list)      # finish_reason "length" before 24 tokens
    stripped: bool = False                                   # every response looks stripped
    templates: Counter = field(default_factory=Counter)     # template_key(chat_template) -> rows

    @property
    def mixed_templates(self) -> bool:
        """Rows made with and without a chat template, or with different ones."""
        return len(self.templates) > 1

    @property
    def chat_template(self) -> Any:
        """The one recorded chat template of every row (None: the seed's protocol, or mixed)."""
        return json.loads(next(iter(self.templates))) if len(self.templates) == 1 else None

    @property
    def ok(self) -> bool:
        """Whether the file is scorable: no problem of any kind."""
        return not (self.missing or self.duplicate or self.unknown or self.bad_types
                    or self.prompt_mismatch or self.family_mismatch or self.cut_short or self.stripped
                    or self.mixed_templates)

    def protocol_differences(self) -> list[str]:
        """Return how a scorable file departs from the seed's protocol.

        These are not problems: the file can be scored, but its numbers are not comparable
        with the seed's.
        """
        note = protocol_note(self.chat_template)
        return [] if note is None else [note]

    def lines(self) -> list[str]:
        """One line per problem, with counts and the first few ids."""
        out = []
        for name, items, why in [
            ("missing", self.missing, "query ids of the bank with no generation"),
            ("duplicate", self.duplicate, "query ids generated more than once"),
            ("unknown", self.unknown, "query ids that are not in the bank"),
            ("wrong types", self.bad_types, "fields of the wrong type"),
            ("prompt mismatch", self.prompt_mismatch,
             "prompts that differ from the bank's template (protocol mismatch: see build_prompt; a "
             "chat-formatted prompt must contain it and its row must record chat_template)"),
            ("bank mismatch", self.family_mismatch, "fact_id/condition_family that differ from the bank"),
            ("cut short", self.cut_short,
             f"responses that hit the length limit before {DECODING.max_new_tokens} new tokens "
             f"(protocol mismatch: max_new_tokens={DECODING.max_new_tokens})"),
        ]:
            if items:
                shown = ", ".join(items[:_SHOWN]) + (", ..." if len(items) > _SHOWN else "")
                out.append(f"{name}: {len(items)} {why}: {shown}")
        if self.mixed_templates:
            counts = "; ".join(f"{n} with {_described(key)}" for key, n in self.templates.items())
            out.append(f"mixed prompt formats: {counts}; every row must be generated under one protocol "
                       "(regenerate the file)")
        if self.stripped:
            out.append("stripped responses: no raw_response starts with whitespace; write the raw "
                       "continuation (not stripped, lowercased or truncated)")
        return out


def validate_generations(bank: Sequence[Mapping[str, Any]], generations: Iterable[Mapping[str, Any]]
                         ) -> ValidationReport:
    """Join generation rows (in file order) to the bank on `query_id` and list every problem."""
    by_id = {row["query_id"]: row for row in bank}
    report = ValidationReport()
    seen: Counter = Counter()
    leading_space = 0
    responses = 0
    for line, gen in enumerate(generations, start=1):
        report.rows += 1
        if isinstance(gen, InvalidLine):
            report.bad_types.append(f"line {line}: not valid JSON ({gen.error})")
            continue
        if not isinstance(gen, Mapping):
            report.bad_types.append(f"line {line}: not a JSON object")
            continue
        problems = _type_problems(gen)
        report.bad_types.extend(f"line {line}: {p}" for p in problems)
        qid = gen.get("query_id")
        if not isinstance(qid, str):
            continue
        seen[qid] += 1
        row = by_id.get(qid)
        if row is None:
            continue
        chat = gen.get("chat_template") if _valid_template(gen.get("chat_template")) else None
        report.templates[template_key(chat)] += 1
        if isinstance(gen.get("prompt"), str) and not _prompt_matches(gen["prompt"], row, chat is not None):
            report.prompt_mismatch.append(qid)
        if any(k in gen and gen[k] != row.get(k) for k in ("fact_id", "condition_family")):
            report.family_mismatch.append(qid)
        text = gen.get("raw_response")
        # the seed's prompts end in "Answer:", so a raw continuation starts with a space; a
        # chat reply starts a turn of its own and need not
        if isinstance(text, str) and text and chat is None:
            responses += 1
            leading_space += text[:1].isspace()
        tokens = gen.get("generated_tokens")
        if gen.get("finish_reason") == "length" and isinstance(tokens, int) and tokens < DECODING.max_new_tokens:
            report.cut_short.append(qid)
    report.missing = [q for q in by_id if q not in seen]
    report.duplicate = [q for q, n in seen.items() if n > 1]
    report.unknown = [q for q in seen if q not in by_id]
    report.stripped = responses >= 20 and leading_space == 0
    return report


def _prompt_matches(prompt: str, row: Mapping[str, Any], chat: bool) -> bool:
    """Check a prompt is the seed's exactly; a chat-formatted one must hold it (a template may trim a turn)."""
    expected = build_prompt(row)
    return expected.strip() in prompt if chat else prompt == expected


def _valid_template(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(value.get(k), str) for k in _TEMPLATE_FIELDS)


def _described(key: str) -> str:
    return describe_template(json.loads(key))


def _type_problems(gen: Mapping[str, Any]) -> list[str]:
    problems = [f"required field {name!r} is absent" for name in REQUIRED if name not in gen]
    for name, types in FIELD_TYPES.items():
        value = gen.get(name)
        if name in gen and (not isinstance(value, types) or isinstance(value, bool)):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            problems.append(f"field {name!r} is {type(value).__name__}, expected {wanted}")
    if isinstance(gen.get("chat_template"), dict) and not _valid_template(gen["chat_template"]):
        problems.append("field 'chat_template' must hold the template's 'origin' and 'digest' as strings")
    return problems
