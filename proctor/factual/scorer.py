"""Label one factual-recall generation against its gold aliases (spec: factual.md, "Labels").

Pure: no I/O, no model. `score_response` takes the raw continuation (not the prompt) and
returns a `Score` whose `label` is one of `LABELS` and whose `scorer` names the rule that
fired: `unparseable_empty`, `exact_alias`, `ambiguous_list`, `ambiguous_distractor`,
`contains_alias`, `abstain_phrase`, `partial_match` or `no_match` (tried in that order).
`popqa_match` is the secondary PopQA rule; `summarise` gives the headline figures.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence, Union

LABELS = ("correct", "incorrect", "ambiguous", "abstain", "unparseable")

#: articles removed (as whole tokens) after normalisation, per question language
ARTICLES: dict[str, frozenset[str]] = {
    "en": frozenset({"a", "an", "the"}),
    "fr": frozenset({"le", "la", "les", "l", "un", "une", "des"}),
    "de": frozenset({"der", "die", "das", "ein", "eine"}),
    "es": frozenset({"el", "la", "los", "las", "un", "una"}),
    "it": frozenset({"il", "lo", "la", "i", "gli", "le", "l", "un", "una"}),
    "pt": frozenset({"o", "a", "os", "as", "um", "uma"}),
    "nl": frozenset({"de", "het", "een"}),
}
#: languages whose articles elide before a vowel (l'Italie): the elided form is dropped too
_ELIDING = frozenset({"fr", "it"})

#: abstention phrases, matched on token boundaries in the normalised span (English always)
ABSTAIN_PHRASES: dict[str, tuple[str, ...]] = {
    "en": ("i don't know", "i do not know", "don't know", "unknown", "not sure", "unsure",
           "cannot answer", "can't answer", "no information", "no answer", "not known"),
    "fr": ("je ne sais pas", "je sais pas", "inconnu", "inconnue", "pas sûr", "pas sûre",
           "je ne peux pas répondre", "aucune information"),
    "de": ("ich weiß nicht", "ich weiss nicht", "weiß nicht", "unbekannt", "nicht sicher",
           "kann nicht antworten", "keine informationen", "keine information"),
    "es": ("no lo sé", "no sé", "desconocido", "desconocida", "no estoy seguro",
           "no estoy segura", "no puedo responder", "no hay información", "sin información"),
    "it": ("non lo so", "non so", "sconosciuto", "sconosciuta", "non sono sicuro",
           "non sono sicura", "non posso rispondere", "nessuna informazione"),
    "pt": ("não sei", "desconhecido", "desconhecida", "não tenho certeza",
           "não posso responder", "sem informação", "nenhuma informação"),
    "nl": ("ik weet het niet", "weet het niet", "weet niet", "onbekend", "niet zeker",
           "kan niet antwoorden", "geen informatie"),
}

#: words that join several candidate answers ("X or Y"), per question language (plus English)
_LIST_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset({"or"}), "fr": frozenset({"ou"}), "de": frozenset({"oder"}),
    "es": frozenset({"o", "u"}), "it": frozenset({"o", "oppure"}), "pt": frozenset({"ou"}),
    "nl": frozenset({"of"}),
}

_ECHO = re.compile(r"^(?:answer|a)\s*:\s*", re.IGNORECASE)
_CUT = re.compile(r"\n|Question:|(?<![^\W\d_])Q:")
_CLAUSE = re.compile(r",\s*which\b| \(")
_WRAPPERS = (("**", "**"), ("*", "*"), ("`", "`"), ('"', '"'), ("'", "'"), ("“", "”"),
             ("‘", "’"), ("«", "»"), ("„", "“"))


@dataclass(frozen=True)
class Score:
    """One scored generation (the label fields of a `<model>.scored.jsonl` row)."""

    span: str
    label: str                     # one of LABELS
    scorer: str                    # the rule that fired
    matched_alias: Optional[str]   # the gold alias as given, or None
    flags: list[str] = field(default_factory=list)
    needs_manual_review: bool = False


def _extract(raw_response: str) -> tuple[str, list[str]]:
    """Return the answer span and the flags its extraction raised."""
    flags: list[str] = []
    text = raw_response.lstrip()
    echoed = _ECHO.match(text)
    if echoed:
        text = text[echoed.end():]
        flags.append("echoed_prompt")
    cut = _CUT.search(text)
    if cut:
        text = text[:cut.start()]
    text = text.strip()
    clause = _CLAUSE.search(text)
    if clause and clause.start() > 0:
        text = text[:clause.start()]
        flags.append("stripped_clause")
    previous = None
    while text != previous:
        previous = text
        text = text.strip()
        if text.endswith("."):
            text = text[:-1]
        for left, right in _WRAPPERS:
            if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left):-len(right)]
                break
    return text.strip(), flags


def extract_span(raw_response: str) -> str:
    """Return the answer span of a raw continuation (spec step 1)."""
    return _extract(raw_response)[0]


def _strip_diacritics(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def _is_punct(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


def normalise_forms(text: str, language: str = "en") -> tuple[str, str, str, str]:
    """Four normalised forms: (diacritics kept, stripped) × (punctuation deleted, → space).

    Each is NFKC + casefold, `_`→space, articles of `language` removed (unless that would
    leave nothing), spaces collapsed. Two strings match when any same-position forms do.
    """
    base = unicodedata.normalize("NFKC", text).casefold().replace("_", " ")
    if language in _ELIDING:
        base = re.sub(r"\b[l][’']", "l ", base)
    articles = ARTICLES.get(language, frozenset())
    forms = []
    for variant in (base, _strip_diacritics(base)):
        for joiner in ("", " "):
            tokens = "".join(joiner if _is_punct(c) else c for c in variant).split()
            kept = [t for t in tokens if t not in articles]
            forms.append(" ".join(kept or tokens))
    return forms[0], forms[1], forms[2], forms[3]


def _is_short(alias: str, normalised: Sequence[str]) -> bool:
    """Aliases shorter than 2 characters, or all-caps short forms (US, U.K.), match only exactly."""
    letters = re.sub(r"\W", "", alias)
    return min(len(n) for n in normalised) < 2 or (len(letters) <= 4 and letters.isupper())


def _contains(span: Sequence[str], alias: Sequence[str]) -> bool:
    return any(a and f" {a} " in f" {s} " for s, a in zip(span, alias))


def _token_f1(span: str, alias: str) -> float:
    s, a = span.split(), alias.split()
    common = sum(min(s.count(t), a.count(t)) for t in set(s))
    if not common:
        return 0.0
    precision, recall = common / len(s), common / len(a)
    return 2 * precision * recall / (precision + recall)


def _lists_candidates(span: str, language: str) -> bool:
    """Whether the span offers several answers: "X or Y", "either X or Y", "X/Y"."""
    words = _LIST_WORDS["en"] | _LIST_WORDS.get(language, frozenset())
    tokens = re.findall(r"\w+", span.casefold())
    if any(t in words for t in tokens[1:-1]):
        return True
    return re.search(r"\w\s*/\s*\w", span) is not None


def _abstains(span_forms: Sequence[str], language: str) -> bool:
    for lang in {"en", language}:
        for phrase in ABSTAIN_PHRASES.get(lang, ()):
            if _contains(span_forms, normalise_forms(phrase, lang)):
                return True
    return False


def score_response(raw_response: str, aliases: Sequence[str], distractors: Sequence[str] = (),
                   language: str = "en", finish_reason: Optional[str] = None) -> Score:
    """Label one generation (spec steps 1-4); `finish_reason == "length"` adds flag `truncated`."""
    span, flags = _extract(raw_response)
    if finish_reason == "length":
        flags.append("truncated")

    def make(label: str, scorer: str, alias: Optional[str] = None) -> Score:
        return Score(span, label, scorer, alias, flags, label == "ambiguous")

    span_forms = normalise_forms(span, language) if span else ("",) * 4
    if not any(span_forms):       # empty, or nothing but punctuation/markup
        return make("unparseable", "unparseable_empty")
    golds = [(a, normalise_forms(a, language)) for a in aliases if a.strip()]
    for alias, forms in golds:
        if any(s == a for s, a in zip(span_forms, forms)):
            return make("correct", "exact_alias", alias)
    contained = [(a, f) for a, f in golds if not _is_short(a, f) and _contains(span_forms, f)]
    if _lists_candidates(span, language):
        return make("ambiguous", "ambiguous_list", contained[0][0] if contained else None)
    if contained:
        alias, forms = max(contained, key=lambda pair: len(pair[1][0]))
        for distractor in distractors:
            d_forms = normalise_forms(distractor, language)
            if _is_short(distractor, d_forms) and not any(s == d for s, d in zip(span_forms, d_forms)):
                continue
            if _contains(span_forms, d_forms) and not _contains(forms, d_forms):
                return make("ambiguous", "ambiguous_distractor", alias)
        return make("correct", "contains_alias", alias)
    if _abstains(span_forms, language):
        return make("abstain", "abstain_phrase")
    best_f1, best_alias = 0.0, None
    for alias, forms in golds:
        f1 = max(_token_f1(s, a) for s, a in zip(span_forms, forms))
        if f1 > best_f1:
            best_f1, best_alias = f1, alias
    if 0.5 <= best_f1 < 1.0:
        return make("ambiguous", "partial_match", best_alias)
    return make("incorrect", "no_match")


def popqa_match(raw_response: str, aliases: Iterable[str]) -> bool:
    """PopQA's rule: any alias, or its lower-case or capitalised form, as a raw substring."""
    return any(form in raw_response
               for alias in aliases if alias
               for form in (alias, alias.lower(), alias.capitalize()))


def summarise(scores: Iterable[Union[Score, tuple[Score, Optional[bool]]]]) -> dict:
    """Accuracy, abstain rate, accuracy given attempted, PopQA accuracy, and counts per label.

    Each item is a `Score` or a `(Score, popqa_bool)`; `popqa_accuracy` is over the items
    that carry a bool (None when none do). Rates over zero items are None.
    """
    counts = dict.fromkeys(LABELS, 0)
    popqa_hits = popqa_n = 0
    for item in scores:
        score, popqa = item if isinstance(item, tuple) else (item, None)
        counts[score.label] += 1
        if popqa is not None:
            popqa_n += 1
            popqa_hits += bool(popqa)
    n = sum(counts.values())
    attempted = n - counts["abstain"] - counts["unparseable"]

    def rate(k: int, d: int) -> Optional[float]:
        return k / d if d else None

    return {
        "n": n,
        "counts": counts,
        "accuracy": rate(counts["correct"], n),
        "abstain_rate": rate(counts["abstain"], n),
        "attempted": attempted,
        "accuracy_given_attempted": rate(counts["correct"], attempted),
        "popqa_accuracy": rate(popqa_hits, popqa_n),
    }
