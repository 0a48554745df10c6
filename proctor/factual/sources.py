"""Readers of the factual-recall source files under <data dir>/factual/ (see its SOURCES.md).

Each reader returns `Fact` records with a Wikidata relation id, plus a `SourceRead` that
counts what it skipped and why. Facts whose relation is not in `RELATIONS` are skipped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from proctor.data.fields import check, field, optional_field
from proctor.data.readers import parse_json, read_text, split_lines
from proctor.data.sources import resolve_data_dir
from proctor.digests import file_sha256
from proctor.errors import UserError
from proctor.factual.relations import EQ_RELATIONS, POPQA_PROPS, RELATIONS

SOURCES = ("entityquestions", "popqa", "rome", "bmlama17", "reversal_curse")
BMLAMA_LANGUAGES = ("ar", "ca", "el", "en", "es", "fa", "fr", "he", "hu", "ja", "ko", "nl", "ru",
                    "tr", "uk", "vi", "zh")
PARAREL_PATH = "pararel/patterns.jsonl"
CONTINENTS = frozenset({"Africa", "Antarctica", "Asia", "Europe", "North America",
                        "South America", "Oceania", "Australia", "Americas"})


@dataclass(frozen=True)
class Cloze:
    """One language's BMLAMA prompt: `cloze` holds `<mask>` where the answer goes."""

    cloze: str
    answer: str
    candidates: tuple[str, ...]   # includes the answer
    subject: str                  # the subject as written in that language
    aliases: tuple[str, ...] = ()  # every accepted answer: the answer, and those of merged facts

    def __post_init__(self) -> None:
        if not self.aliases:
            object.__setattr__(self, "aliases", (self.answer,))


@dataclass
class Fact:
    """One fact read from a source: relation, subject, object and the accepted answers."""

    relation_id: str
    subject: str
    object: str
    aliases: list[str]            # English answers, the object first
    source: str
    subject_aliases: list[str] = dataclasses.field(default_factory=list)
    clozes: dict[str, Cloze] = dataclasses.field(default_factory=dict)   # BMLAMA only: language -> prompt


@dataclass
class SourceRead:
    """What reading one source gave: its facts, what it skipped and why, and the files it read."""

    facts: list[Fact]
    skipped: Counter               # reason -> count
    files: dict[str, str]          # relative path -> sha256 of the file


@dataclass(frozen=True)
class ParaRelPattern:
    """One ParaRel cloze pattern of a relation ([X] subject, [Y] object)."""

    relation_id: str
    index: int                     # position among the relation's patterns, in file order
    pattern: str                   # "[X] was born in [Y] ."


def factual_dir(data_dir: Optional[Path | str]) -> Path:
    """Return <data dir>/factual/ (data_dir None: $PROCTOR_DATA_DIR), refusing when no data directory is set."""
    root = resolve_data_dir(data_dir)
    if root is None:
        raise UserError("the factual query bank is built from <data dir>/factual/ and no data "
                        "directory was given; pass --data-dir DIR or set PROCTOR_DATA_DIR")
    return root / "factual"


def _require(root: Path, relative: str) -> Path:
    path = root / relative
    if not path.is_file():
        raise UserError(f"factual source file not found: {path}; pass --data-dir DIR or set "
                        "PROCTOR_DATA_DIR to a directory laid out like shared/data "
                        "(with factual/ as described in its SOURCES.md)")
    return path


def _read(root: Path, relative: str, files: dict[str, str]) -> str:
    path = _require(root, relative)
    files[relative] = file_sha256(path)
    return read_text(path)


def _json_lines(root: Path, relative: str, files: dict[str, str]) -> Iterator[tuple[str, object]]:
    """(where, value) of each non-blank line of a JSON-lines source file."""
    path = root / relative
    for line_no, line in enumerate(split_lines(_read(root, relative, files)), start=1):
        if line.strip():
            yield f"{path}:{line_no}: the row", parse_json(line, path, line_no)


def _csv_rows(root: Path, relative: str, files: dict[str, str]) -> Iterator[tuple[str, dict]]:
    """(where, row) of each data row of a CSV source file with a header line."""
    path = root / relative
    reader = csv.DictReader(io.StringIO(_read(root, relative, files), newline=""))
    try:
        for row in reader:
            yield f"{path}:{reader.line_num}: the row", row
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None


def _json_list(text: str, where: str) -> list[str]:
    """Parse a JSON-encoded list inside a CSV/JSON field ('[]' or empty -> []) as strings."""
    if not text.strip():
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise UserError(f"{where}: expected a JSON list, found {text[:40]!r}") from None
    if not isinstance(value, list):
        return []
    return [str(v) for v in value if isinstance(v, (str, int, float)) and str(v).strip()]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(s.strip() for s in items if s and s.strip()))


# --- ParaRel ------------------------------------------------------------------------------

def read_pararel(root: Path, files: dict[str, str]) -> dict[str, list[ParaRelPattern]]:
    """Relation id -> its ParaRel cloze patterns, in file order."""
    out: dict[str, list[ParaRelPattern]] = {}
    for where, obj in _json_lines(root, PARAREL_PATH, files):
        pid, pattern = field(obj, "relation", str, where), field(obj, "pattern", str, where)
        patterns = out.setdefault(pid, [])
        patterns.append(ParaRelPattern(pid, len(patterns), pattern))
    return out


def _cloze_key(template: str) -> str:
    """Compare cloze templates ignoring spacing before punctuation and case."""
    return re.sub(r"\s+([.,])", r"\1", " ".join(template.split())).rstrip(" .").casefold()


# --- EntityQuestions ----------------------------------------------------------------------

def _template_regex(template: str) -> re.Pattern:
    head, _, tail = template.partition("[X]")
    return re.compile("^" + re.escape(head) + "(.+)" + re.escape(tail) + "$")


def read_entityquestions(root: Path) -> SourceRead:
    """Read EntityQuestions' test split; the subject is cut out of the question with the relation's template."""
    files: dict[str, str] = {}
    skipped: Counter = Counter()
    relative = "entityquestions/test.jsonl.gz"
    regexes = {pid: _template_regex(RELATIONS[pid].question.text) for pid in EQ_RELATIONS}
    facts = []
    for where, obj in _json_lines(root, relative, files):
        pid, question = field(obj, "relation", str, where), field(obj, "question", str, where)
        answers = field(obj, "answers", list[str], where)
        regex = regexes.get(pid)
        if regex is None:
            skipped["entityquestions: unknown relation"] += 1
            continue
        match = regex.match(question.strip())
        aliases = _unique(answers)
        if not match or not aliases:
            skipped["entityquestions: question does not fit its template, or no answer"] += 1
            continue
        facts.append(Fact(pid, match.group(1).strip(), aliases[0], aliases, "entityquestions"))
    return SourceRead(facts, skipped, files)


# --- PopQA --------------------------------------------------------------------------------

def _popqa_fact(prop: str, subj: str, obj: str, answers: list[str], subject_aliases: list[str],
                skipped: Counter) -> Optional[Fact]:
    pid = POPQA_PROPS.get(prop)
    if pid is None:
        skipped[f"popqa: unmapped property {prop!r}"] += 1
        return None
    aliases = _unique([obj, *answers])
    if not subj.strip() or not aliases:
        skipped["popqa: empty subject or answers"] += 1
        return None
    return Fact(pid, subj.strip(), aliases[0], aliases, "popqa", _unique(subject_aliases))


def read_popqa(root: Path) -> SourceRead:
    """Both PopQA files: the random sample (golden_answers) and the long tail (possible_answers)."""
    files: dict[str, str] = {}
    skipped: Counter = Counter()
    facts: list[Fact] = []
    relative = "popqa/popqa_random1000_flashrag.jsonl"
    for where, obj in _json_lines(root, relative, files):
        meta = field(obj, "metadata", dict, where)
        subj, prop, gold = (field(meta, name, str, f"{where}'s metadata") for name in ("subj", "prop", "obj"))
        s_aliases = _json_list(optional_field(meta, "s_aliases", str, f"{where}'s metadata", ""), where)
        fact = _popqa_fact(prop, subj, gold, field(obj, "golden_answers", list[str], where), s_aliases,
                           skipped)
        if fact:
            facts.append(fact)
    relative = "popqa/DisambPopQA_longtail.csv"
    for where, row in _csv_rows(root, relative, files):
        subj, prop, gold, answers = (field(row, name, str, where)
                                     for name in ("subj", "prop", "obj", "possible_answers"))
        alias_text = row.get("s_aliases") or ""   # an optional column
        fact = _popqa_fact(prop, subj, gold, _json_list(answers, where), _json_list(alias_text, where),
                           skipped)
        if fact:
            facts.append(fact)
    return SourceRead(facts, skipped, files)


# --- ROME ---------------------------------------------------------------------------------

def read_rome(root: Path) -> SourceRead:
    """ROME's known_1000: subject, attribute (the gold object), relation_id."""
    files: dict[str, str] = {}
    skipped: Counter = Counter()
    relative = "rome/known_1000.json"
    path = root / relative
    records = check(parse_json(_read(root, relative, files), path), list, f"{path}: the file")
    facts = []
    for i, rec in enumerate(records):
        where = f"{path}: item {i}"
        pid, subject, attribute = (field(rec, name, str, where)
                                   for name in ("relation_id", "subject", "attribute"))
        if pid not in RELATIONS:
            skipped[f"rome: unmapped relation {pid}"] += 1
        elif subject.strip() and attribute.strip():
            facts.append(Fact(pid, subject.strip(), attribute.strip(), [attribute.strip()], "rome"))
        else:
            skipped["rome: empty subject or attribute"] += 1
    return SourceRead(facts, skipped, files)


# --- BMLAMA-17 ----------------------------------------------------------------------------

def _bmlama_rows(root: Path, lang: str, files: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(prompt, answer, candidates, subject) rows; columns are positional (zh's header is off)."""
    relative = f"bmlama17/{lang}.tsv.gz"
    lines = [line.rstrip("\r") for line in _read(root, relative, files).split("\n")]
    rows = []
    for line_no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 4 or "<mask>" not in cells[0]:
            raise UserError(f"{root / relative}:{line_no}: expected 4 tab-separated columns "
                            "(Prompt with <mask>, Ans, Candidate Ans, Subject)")
        rows.append((cells[0], cells[1].strip(), cells[2], cells[3].strip()))
    return rows


def bmlama_relation_finder(pararel: dict[str, list[ParaRelPattern]]
                           ) -> Callable[[str, str], tuple[Optional[str], str]]:
    """Map an English BMLAMA template ("[X] ... [Y] .") to a relation id, or a skip reason.

    A template several relations share goes to the relation whose first ParaRel pattern
    (LAMA's own template) it is; "[X] is located in [Y]." is LAMA's template of four
    relations (P17, P131, P276, P30), so only continent answers (P30) are kept.
    """
    matches: dict[str, list[str]] = {}
    firsts: dict[str, list[str]] = {}
    for pid, patterns in pararel.items():
        if pid not in RELATIONS:
            continue
        for p in patterns:
            key = _cloze_key(p.pattern)
            if pid not in matches.setdefault(key, []):
                matches[key].append(pid)
            if p.index == 0:
                firsts.setdefault(key, []).append(pid)

    def find(template: str, answer: str) -> tuple[Optional[str], str]:
        key = _cloze_key(template)
        candidates = matches.get(key, [])
        if len(candidates) == 1:
            return candidates[0], ""
        if not candidates:
            return None, "bmlama17: template not among ParaRel's patterns"
        first = firsts.get(key, [])
        if len(first) == 1:
            return first[0], ""
        if "P30" in first and answer in CONTINENTS:
            return "P30", ""
        return None, "bmlama17: template shared by several relations (not a continent answer)"

    return find


def read_bmlama(root: Path, languages: Sequence[str],
                pararel: dict[str, list[ParaRelPattern]]) -> SourceRead:
    """BMLAMA-17: row-aligned across languages; English is always read (it names the relation)."""
    files: dict[str, str] = {}
    skipped: Counter = Counter()
    unknown = [lang for lang in languages if lang not in BMLAMA_LANGUAGES]
    if unknown:
        raise UserError(f"unknown BMLAMA-17 language(s) {', '.join(unknown)}; choose from "
                        f"{', '.join(BMLAMA_LANGUAGES)}")
    langs = ["en", *[lang for lang in dict.fromkeys(languages) if lang != "en"]]
    table = {lang: _bmlama_rows(root, lang, files) for lang in langs}
    n = len(table["en"])
    for lang, rows in table.items():
        if len(rows) != n:
            raise UserError(f"{root / 'bmlama17'}: {lang}.tsv.gz has {len(rows)} rows but "
                            f"en.tsv.gz has {n}; the files must be row-aligned")
    find = bmlama_relation_finder(pararel)
    facts = []
    for i, (prompt, answer, _cands, subject) in enumerate(table["en"]):
        template = prompt.replace(subject, "[X]", 1).replace("<mask>", "[Y]")
        pid, reason = find(template, answer) if subject and subject in prompt else (
            None, "bmlama17: subject not in the English prompt")
        if pid is None:
            skipped[reason] += 1
            continue
        clozes = {}
        for lang in langs:
            l_prompt, l_answer, l_cands, l_subject = table[lang][i]
            candidates = tuple(_unique(l_cands.split(", ")))
            clozes[lang] = Cloze(l_prompt, l_answer, candidates, l_subject)
        facts.append(Fact(pid, subject, answer, [answer], "bmlama17", clozes=clozes))
    return SourceRead(facts, skipped, files)


# --- reversal curse -----------------------------------------------------------------------

def read_reversal_curse(root: Path) -> SourceRead:
    """Celebrity parent pairs: the child is the subject of mother (P25) / father (P22)."""
    files: dict[str, str] = {}
    skipped: Counter = Counter()
    relative = "reversal_curse/parent_child_pairs.csv"
    facts = []
    for where, row in _csv_rows(root, relative, files):
        child, parent, kind = (field(row, name, str, where).strip()
                               for name in ("child", "parent", "parent_type"))
        pid = {"mother": "P25", "father": "P22"}.get(kind.strip().lower())
        if pid is None or not child or not parent:
            skipped["reversal_curse: unknown parent_type or empty name"] += 1
            continue
        facts.append(Fact(pid, child, parent, [parent], "reversal_curse"))
    return SourceRead(facts, skipped, files)


def read_source(name: str, root: Path, languages: Sequence[str],
                pararel: dict[str, list[ParaRelPattern]]) -> SourceRead:
    """One source by name (one of SOURCES); `root` is <data dir>/factual."""
    if name == "entityquestions":
        return read_entityquestions(root)
    if name == "popqa":
        return read_popqa(root)
    if name == "rome":
        return read_rome(root)
    if name == "bmlama17":
        return read_bmlama(root, languages, pararel)
    if name == "reversal_curse":
        return read_reversal_curse(root)
    raise UserError(f"unknown factual source {name!r}; choose from {', '.join(SOURCES)}")
