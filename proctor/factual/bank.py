"""Build, write, read and check the factual query bank (one JSONL row per query).

`build_bank` turns the sources under <data dir>/factual/ into rows of the five condition
families with stable hash ids; `write_bank` writes them behind a header line carrying the
bank's version (sha256 of the canonical rows); `read_bank` reads a built bank, or a bank the
user brings (with or without the header), and refuses one that breaks the bank's invariants.
Every choice (capped facts, paraphrase template, distractors, option order) is a hash order,
so a build is reproducible and a fact's rows do not depend on which other facts were kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence, Union

from proctor.data.readers import split_lines
from proctor.errors import UserError, check_positive_int
from proctor.factual.prompts import CONDITION_FAMILIES, condition_of
from proctor.factual.relations import RELATIONS, Relation, Template, fill, relation_sort_key
from proctor.factual.scorer import normalise_forms
from proctor.factual.sources import (
    SOURCES,
    Fact,
    ParaRelPattern,
    factual_dir,
    read_pararel,
    read_source,
)
from proctor.outputs.owned import write_owned_file

BANK_FORMAT = 1
DEFAULT_FACTS_PER_RELATION = 100
DEFAULT_LANGUAGES = ("fr", "ru", "zh", "ja", "ar")
LETTERS = "ABCD"
MAX_DISTRACTORS = 10
BLANK = "___"

#: bank field -> its type; `template_id` and `source` may be absent from a user's bank
FIELD_TYPES: dict[str, type] = {
    "query_id": str, "fact_id": str, "relation": str, "relation_id": str,
    "condition_family": str, "language": str, "target_slot": str, "answer_type": str,
    "answer_granularity": str, "answer_in_subject_surface": bool, "query": str,
    "aliases": list, "distractors": list, "use_for_main_forward": bool,
    "use_for_reverse_analysis": bool, "use_for_recognition_analysis": bool, "subject": str,
    "template_id": str, "source": str,
}
OPTIONAL_FIELDS = frozenset({"template_id", "source"})
_SHOWN = 5  # ids or line numbers quoted per problem

Forms = tuple[str, str, str, str]
PathLike = Union[str, Path]


# --- ids and normalisation ----------------------------------------------------------------

def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


@lru_cache(maxsize=1 << 18)
def _forms(text: str, language: str = "en") -> Forms:
    """`normalise_forms`, cached: a build normalises the same names many times."""
    return normalise_forms(text, language)


def _norm(text: str) -> str:
    return _forms(text)[0]


def make_fact_id(relation_id: str, subject: str, obj: str) -> str:
    """Return a fact's stable id, a hash of its relation and normalised subject and object."""
    return "fact_" + _digest(relation_id, _norm(subject), _norm(obj))[:12]


def make_query_id(fact_id: str, family: str, language: str, template_id: str) -> str:
    """Return a query's stable id, a hash of its fact, condition family, language and template."""
    return "query_" + _digest(fact_id, family, language, template_id)[:12]


def _same(a: Forms, b: Forms) -> bool:
    return any(x and x == y for x, y in zip(a, b))


def _contains(haystack: Forms, needle: Forms) -> bool:
    return any(n and f" {n} " in f" {h} " for h, n in zip(haystack, needle))


def _in_surface(aliases: Sequence[str], surface: str, language: str = "en") -> bool:
    """Whether any alias occurs in `surface` (normalised, on token boundaries)."""
    hay = _forms(surface, language)
    return any(_contains(hay, _forms(a, language)) for a in aliases)


# --- facts: merge, cap, pools -------------------------------------------------------------

@dataclass
class _Entry:
    """A merged fact with its id."""

    fact: Fact
    fact_id: str


def _merge(facts: Iterable[Fact]) -> tuple[list[_Entry], int]:
    """One entry per (relation, normalised subject); later duplicates add their aliases."""
    by_key: dict[tuple[str, str], Fact] = {}
    merged = 0
    for fact in facts:
        key = (fact.relation_id, _norm(fact.subject))
        first = by_key.get(key)
        if first is None:
            by_key[key] = dataclasses.replace(fact, aliases=list(fact.aliases),
                                              subject_aliases=list(fact.subject_aliases),
                                              clozes=dict(fact.clozes))
            continue
        merged += 1
        first.aliases.extend(a for a in fact.aliases if a not in first.aliases)
        first.subject_aliases.extend(a for a in fact.subject_aliases
                                     if a not in first.subject_aliases)
        for lang, cloze in fact.clozes.items():   # BMLAMA lists many-valued facts row by row
            mine = first.clozes.get(lang)
            if mine is not None and cloze.answer not in mine.aliases:
                first.clozes[lang] = dataclasses.replace(mine,
                                                         aliases=(*mine.aliases, cloze.answer))
    entries = [_Entry(f, make_fact_id(f.relation_id, f.subject, f.object))
               for f in by_key.values()]
    return entries, merged


@dataclass
class _Pool:
    """A relation's distinct objects and subjects (hash order) and who has which object."""

    objects: list[tuple[str, Forms]]
    subjects: list[tuple[str, Forms]]
    subjects_of_object: dict[str, set[str]]


def _pools(entries: Sequence[_Entry], seed: int) -> dict[str, _Pool]:
    objects: dict[str, dict[str, str]] = defaultdict(dict)
    subjects: dict[str, dict[str, str]] = defaultdict(dict)
    owners: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for e in entries:
        rid, obj, subj = e.fact.relation_id, e.fact.object, e.fact.subject
        objects[rid].setdefault(_norm(obj), obj)
        subjects[rid].setdefault(_norm(subj), subj)
        owners[rid][_norm(obj)].add(_norm(subj))

    def ordered(rid: str, surfaces: dict[str, str], kind: str) -> list[tuple[str, Forms]]:
        keys = sorted(surfaces, key=lambda k: _digest(seed, rid, kind, k))
        return [(surfaces[k], _forms(surfaces[k])) for k in keys]

    return {rid: _Pool(ordered(rid, objects[rid], "object"), ordered(rid, subjects[rid], "subject"),
                       dict(owners[rid])) for rid in objects}


def _pick(pool: Sequence[tuple[str, Forms]], start_key: str, exclude: Sequence[Forms],
          k: int) -> list[str]:
    """Up to k pool items that match no excluded form, walking the pool from a hashed start."""
    out: list[str] = []
    if not pool:
        return out
    start = int(_digest(start_key)[:8], 16) % len(pool)
    for i in range(len(pool)):
        surface, forms = pool[(start + i) % len(pool)]
        if any(_same(forms, ex) for ex in exclude):
            continue
        out.append(surface)
        if len(out) == k:
            break
    return out


def _cap(entries: Sequence[_Entry], limit: Optional[int], seed: int) -> list[_Entry]:
    """At most `limit` facts per (source, relation), the first in hash order of the fact id."""
    groups: dict[tuple[str, str], list[_Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.fact.source, e.fact.relation_id)].append(e)
    kept = []
    for group in groups.values():
        group.sort(key=lambda e: _digest(seed, "cap", e.fact_id))
        kept.extend(group if limit is None else group[:limit])
    return kept


# --- rows ---------------------------------------------------------------------------------

def render_cloze(pattern: str, subject: str) -> str:
    """Render a ParaRel pattern as a fill-in-the-blank prompt: [X] = subject, [Y] = ___."""
    text = re.sub(r"\s+([.,])", r"\1", " ".join(pattern.split())).strip().rstrip(",").strip()
    if text[:1].islower():
        text = text[0].upper() + text[1:]
    return f"Fill in the blank: {fill(text, subject, BLANK)}"


def _paraphrase(relation: Relation, anchor: Template, subject: str, fact_id: str,
                patterns: Sequence[ParaRelPattern], seed: int) -> Optional[tuple[str, str]]:
    """(template_id, query) of one other template of the relation, never the anchor's surface."""
    anchor_text = " ".join(fill(anchor.text, subject).split()).casefold()
    options = [(t.template_id, fill(t.text, subject)) for t in relation.question_templates()]
    options += [(f"pararel:{p.relation_id}:{p.index}", render_cloze(p.pattern, subject))
                for p in patterns]
    options = [(tid, q) for tid, q in options
               if tid != anchor.template_id and " ".join(q.split()).casefold() != anchor_text]
    if not options:
        return None
    return min(options, key=lambda o: _digest(seed, fact_id, "paraphrase", o[0]))


class _MakeRow(Protocol):
    """`_RowMaker.rows`'s `row`: one row of the fact, its fields past the common ones."""

    def __call__(self, family: str, template_id: str, query: str, **fields: Any) -> dict: ...


class _RowMaker:
    """Rows of one fact: every family that applies, in family order."""

    def __init__(self, pararel: dict[str, list[ParaRelPattern]], pools: dict[str, _Pool],
                 languages: Sequence[str], seed: int, skipped: Counter) -> None:
        self.pararel, self.pools, self.seed, self.skipped = pararel, pools, seed, skipped
        self.languages = [lang for lang in dict.fromkeys(languages) if lang != "en"]

    def rows(self, entry: _Entry) -> list[dict]:
        fact, fid = entry.fact, entry.fact_id
        relation = RELATIONS[fact.relation_id]
        pool = self.pools[fact.relation_id]
        anchor = relation.anchor_for(fact.source)
        question = fill(anchor.text, fact.subject)
        gold_forms = [_forms(a) for a in fact.aliases]
        distractors = _pick(pool.objects, f"{self.seed}\x1f{fid}\x1fdistractors", gold_forms,
                            MAX_DISTRACTORS)
        in_subject = _in_surface(fact.aliases, fact.subject)

        def row(family: str, template_id: str, query: str, **fields: Any) -> dict:
            out = {
                "query_id": make_query_id(fid, family, fields.get("language", "en"), template_id),
                "fact_id": fid, "relation": relation.name, "relation_id": relation.relation_id,
                "condition_family": family, "language": "en", "target_slot": "object",
                "answer_type": relation.answer_type,
                "answer_granularity": relation.answer_granularity,
                "answer_in_subject_surface": in_subject, "query": query,
                "aliases": list(fact.aliases), "distractors": list(distractors),
                "use_for_main_forward": family != "recognition",
                "use_for_reverse_analysis": False, "use_for_recognition_analysis": False,
                "subject": fact.subject, "template_id": template_id, "source": fact.source,
            }
            out.update(fields)
            return out

        rows = [row("anchor", anchor.template_id, question)]
        para = _paraphrase(relation, anchor, fact.subject, fid,
                           self.pararel.get(fact.relation_id, []), self.seed)
        if para:
            rows.append(row("paraphrase", *para))
        else:
            self.skipped["paraphrase: relation has no other template"] += 1
        reverse = self._reverse(entry, relation, pool, row)
        recognition = self._recognition(entry, anchor, question, gold_forms, pool, row)
        for extra, key in ((reverse, "use_for_reverse_analysis"),
                           (recognition, "use_for_recognition_analysis")):
            if extra:
                rows[0][key] = extra[key] = True
                rows.append(extra)
        rows.extend(self._crosslingual(entry, row))
        return rows

    def _reverse(self, entry: _Entry, relation: Relation, pool: _Pool, row: _MakeRow) -> Optional[dict]:
        fact = entry.fact
        if relation.reverse is None:
            return None
        if len(pool.subjects_of_object.get(_norm(fact.object), ())) != 1:
            self.skipped["reverse: object has several subjects in the bank's sources"] += 1
            return None
        aliases = list(dict.fromkeys([fact.subject, *fact.subject_aliases]))
        exclude = [_forms(a) for a in aliases]
        return row("reverse", relation.reverse.template_id,
                   fill(relation.reverse.text, obj=fact.object), target_slot="subject", aliases=aliases,
                   distractors=_pick(pool.subjects, f"{self.seed}\x1f{entry.fact_id}\x1freverse",
                                     exclude, MAX_DISTRACTORS),
                   # the answer leaking from the entity the question names (here the object)
                   answer_in_subject_surface=_in_surface(aliases, fact.object))

    def _recognition(self, entry: _Entry, anchor: Template, question: str,
                     gold_forms: list[Forms], pool: _Pool, row: _MakeRow) -> Optional[dict]:
        fact, fid = entry.fact, entry.fact_id
        key = f"{self.seed}\x1f{fid}\x1frecognition"
        if "en" in fact.clozes:   # BMLAMA's own candidates, in hash order
            own = [(c, _forms(c)) for c in fact.clozes["en"].candidates]
            own.sort(key=lambda item: _digest(key, item[0]))
            wrong = _pick(own, key, gold_forms, len(LETTERS) - 1)
        else:
            wrong = _pick(pool.objects, key, gold_forms, len(LETTERS) - 1)
        if len(wrong) < len(LETTERS) - 1:
            self.skipped["recognition: fewer than 3 distractors"] += 1
            return None
        options = sorted([fact.object, *wrong], key=lambda o: _digest(key, "order", o))
        letter = LETTERS[options.index(fact.object)]
        query = question + "".join(f"\n{L}. {o}" for L, o in zip(LETTERS, options))
        others = [(L, o) for L, o in zip(LETTERS, options) if o != fact.object]
        return row("recognition", f"mc:{anchor.template_id}", query,
                   aliases=[*fact.aliases, letter],
                   distractors=[o for _, o in others] + [L for L, _ in others])

    def _crosslingual(self, entry: _Entry, row: _MakeRow) -> list[dict]:
        out = []
        for lang in sorted(self.languages):
            cloze = entry.fact.clozes.get(lang)
            aliases = [a for a in cloze.aliases if a.strip()] if cloze else []
            if cloze is None or not aliases:
                continue
            golds = [_forms(a, lang) for a in aliases]
            others = [c for c in cloze.candidates
                      if not any(_same(_forms(c, lang), g) for g in golds)]
            out.append(row("crosslingual", f"bmlama17:{lang}",
                           cloze.cloze.replace("<mask>", BLANK), language=lang,
                           aliases=aliases, distractors=others,
                           answer_in_subject_surface=_in_surface(aliases, cloze.subject, lang)))
        return out


# --- build --------------------------------------------------------------------------------

@dataclass
class BuiltBank:
    """A freshly built bank: its rows, the build's report, and what its header records."""

    rows: list[dict]
    report: dict          # counts per family/source/relation, facts, skipped reasons
    options: dict         # the build options, as written in the header
    sources: dict         # relative path under factual/ -> sha256 of the file read

    @property
    def header_extra(self) -> dict:
        """The header fields the build adds: its options and the sources it read."""
        return {"options": self.options, "sources": self.sources}


def _row_order(row: dict) -> tuple:
    return (SOURCES.index(row["source"]), relation_sort_key(row["relation_id"]), row["fact_id"],
            CONDITION_FAMILIES.index(row["condition_family"]), row["language"])


def build_bank(data_dir: Optional[PathLike], *,
               facts_per_relation: Optional[int] = DEFAULT_FACTS_PER_RELATION,
               languages: Sequence[str] = DEFAULT_LANGUAGES, sources: Sequence[str] = SOURCES,
               seed: int = 0) -> BuiltBank:
    """Build the query bank from <data dir>/factual/ (data_dir None: $PROCTOR_DATA_DIR).

    `facts_per_relation` caps the facts of each (source, relation), None keeps all;
    `languages` are the BMLAMA-17 languages of the crosslingual family.
    """
    if facts_per_relation is not None:
        check_positive_int("facts_per_relation", facts_per_relation)
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise UserError(f"unknown or no factual sources {unknown or list(sources)}; choose from "
                        f"{', '.join(SOURCES)}")
    root = factual_dir(data_dir)
    files: dict[str, str] = {}
    pararel = read_pararel(root, files)
    skipped: Counter = Counter()
    facts: list[Fact] = []
    for name in SOURCES:
        if name in sources:
            read = read_source(name, root, languages, pararel)
            facts.extend(read.facts)
            skipped.update(read.skipped)
            files.update(read.files)
    entries, merged = _merge(facts)
    pools = _pools(entries, seed)   # from every fact, so a fact's rows do not depend on the cap
    kept = _cap(entries, facts_per_relation, seed)
    maker = _RowMaker(pararel, pools, languages, seed, skipped)
    rows = sorted((r for e in kept for r in maker.rows(e)), key=_row_order)
    options = {"facts_per_relation": facts_per_relation,
               "languages": [lang for lang in dict.fromkeys(languages) if lang != "en"],
               "sources": [s for s in SOURCES if s in sources], "seed": seed}
    report = {
        "rows": len(rows),
        "main_forward_rows": sum(r["use_for_main_forward"] for r in rows),
        "facts": dict(Counter(e.fact.source for e in kept)),
        "facts_before_cap": dict(Counter(e.fact.source for e in entries)),
        "duplicate_facts_merged": merged,
        "families": dict(Counter(condition_of(r) for r in rows)),
        "sources": dict(Counter(r["source"] for r in rows)),
        "relations": dict(sorted(Counter(r["relation_id"] for r in rows).items(),
                                 key=lambda kv: relation_sort_key(kv[0]))),
        "skipped": dict(sorted(skipped.items())),
    }
    problems = validate_rows(rows)
    if problems:   # a builder bug, not a user mistake
        raise AssertionError("built bank breaks its invariants: " + "; ".join(problems))
    return BuiltBank(rows, report, options, dict(sorted(files.items())))


# --- file format --------------------------------------------------------------------------

def canonical_row(row: Mapping[str, Any]) -> str:
    """Return a row as compact JSON with sorted keys, the form the bank's version hashes."""
    return json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def bank_version(rows: Iterable[Mapping[str, Any]]) -> str:
    """Return the sha256 of the canonical rows joined with newlines."""
    return hashlib.sha256("\n".join(canonical_row(r) for r in rows).encode("utf-8")).hexdigest()


def write_bank(path: PathLike, rows: Sequence[Mapping[str, Any]],
               header_extra: Optional[Mapping[str, Any]] = None) -> str:
    """Write the header line and the canonical rows atomically; return the version.

    An existing file at `path` is replaced only when proctor wrote it and nobody changed it since.
    """
    problems = validate_rows(rows)
    if problems:
        raise UserError(f"refusing to write an invalid query bank to {path}: "
                        + "; ".join(problems))
    lines = [canonical_row(r) for r in rows]
    version = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    header = {"proctor_factual_bank": BANK_FORMAT, "version": version, "rows": len(lines),
              **(header_extra or {})}
    text = "\n".join([json.dumps(header, sort_keys=True, ensure_ascii=False), *lines]) + "\n"
    write_owned_file(Path(path), text.encode("utf-8"))
    return version


@dataclass
class Bank:
    """A query bank as read: its rows, its version and its header."""

    rows: list[dict]
    version: str
    header: dict          # {} for a bank without a header line

    def main_forward_rows(self) -> list[dict]:
        """Return the rows that get hidden states, in bank order."""
        return main_forward_rows(self.rows)


def main_forward_rows(rows: Iterable[Mapping[str, Any]]) -> list:
    """Return the rows marked `use_for_main_forward` (those that get hidden states), in order."""
    return [r for r in rows if r["use_for_main_forward"]]


def _summary(what: str, items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN]) + (", ..." if len(items) > _SHOWN else "")
    return f"{what}: {len(items)} ({shown})"


def _field_problems(row: Mapping[str, Any]) -> list[str]:
    out = []
    for name, kind in FIELD_TYPES.items():
        if name not in row:
            if name not in OPTIONAL_FIELDS:
                out.append(f"missing {name!r}")
            continue
        value = row[name]
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if ok and kind is list:
            ok = all(isinstance(v, str) for v in value)
        if not ok:
            wanted = "list of strings" if kind is list else kind.__name__
            out.append(f"{name!r} is {type(value).__name__}, expected {wanted}")
    return out


def validate_rows(rows: Sequence[Mapping[str, Any]], lines: Optional[Sequence[int]] = None
                  ) -> list[str]:
    """Every broken invariant of a bank, one summary line per kind (counts + first few)."""
    where = (lambda i: f"line {lines[i]}") if lines is not None else (lambda i: f"row {i + 1}")
    fields: list[str] = []
    families: list[str] = []
    slots: list[str] = []
    empty: list[str] = []
    ids: Counter = Counter()
    anchors: Counter = Counter()
    facts: dict[str, None] = {}
    forward: Counter = Counter()
    for i, row in enumerate(rows):
        bad = _field_problems(row)
        if bad:
            fields.append(f"{where(i)}: " + ", ".join(bad))
            continue
        qid = row["query_id"]
        ids[qid] += 1
        facts.setdefault(row["fact_id"])
        family = row["condition_family"]
        if family not in CONDITION_FAMILIES:
            families.append(f"{qid} ({family!r})")
            continue
        anchors[row["fact_id"]] += family == "anchor"
        if row["target_slot"] not in ("object", "subject"):
            slots.append(f"{qid} ({row['target_slot']!r})")
        if not any(a.strip() for a in row["aliases"]):
            empty.append(qid)
        if row["use_for_main_forward"]:
            forward[(row["fact_id"], condition_of(row))] += 1
    problems = []
    for what, items in [
        ("rows with missing or wrong-typed fields", fields),
        (f"unknown condition_family (expected one of {', '.join(CONDITION_FAMILIES)})", families),
        ("target_slot not 'object' or 'subject'", slots),
        ("rows with no aliases", empty),
        ("duplicate query_id", [q for q, n in ids.items() if n > 1]),
        ("facts without exactly one anchor row", [f"{f} ({anchors[f]} anchors)" for f in facts
                                                  if anchors[f] != 1]),
        ("several main-forward rows for one fact and condition",
         [f"{f} {c} ({n} rows)" for (f, c), n in forward.items() if n > 1]),
    ]:
        if items:
            problems.append(_summary(what, items))
    return problems


def read_bank(path: PathLike) -> Bank:
    """Read a bank file: a header line and rows, or rows alone (a user's bank; version computed)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"query bank not found: {path}; build one first or pass the path of an "
                        "existing bank file")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a leading byte-order mark dropped
    except UnicodeDecodeError:
        raise UserError(f"{path}: the query bank is not UTF-8 text") from None
    except OSError as e:
        raise UserError(f"cannot read the query bank {path}: {e.strerror or e}") from None
    header: dict = {}
    rows: list[dict] = []
    lines: list[int] = []
    not_json: list[str] = []
    not_object: list[str] = []
    for line_no, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            not_json.append(f"line {line_no}")
            continue
        if not isinstance(obj, dict):
            not_object.append(f"line {line_no}")
        elif "proctor_factual_bank" in obj and not rows and not header:
            header = obj
        else:
            rows.append(obj)
            lines.append(line_no)
    problems = []
    if not_json:
        problems.append(_summary("lines that are not JSON", not_json))
    if not_object:
        problems.append(_summary("lines that are not JSON objects", not_object))
    if header and header.get("proctor_factual_bank") != BANK_FORMAT:
        problems.append(f"header says bank format {header.get('proctor_factual_bank')!r}, this "
                        f"proctor reads format {BANK_FORMAT}")
    if not rows and not problems:
        problems.append("no query rows")
    problems += validate_rows(rows, lines)
    if problems:
        raise UserError(f"{path} is not a valid factual query bank: " + "; ".join(problems)
                        + "; fix these rows or rebuild the bank")
    version = bank_version(rows)
    if header and header.get("version") != version:
        raise UserError(f"{path}: the header's version {str(header.get('version'))[:12]}... does "
                        f"not match its rows ({version[:12]}...): the bank was edited after it "
                        "was built: rebuild it, or delete the header line to accept the edit")
    return Bank(rows, version, header)
