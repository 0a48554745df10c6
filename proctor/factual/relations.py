"""The relations of the factual query bank: question templates, reverse templates, answer kinds.

Templates use `[X]` for the subject and `[Y]` for the object. A relation's `question` is its
canonical question (the anchor); where a source asks its own question for the relation
(PopQA's 16 templates), `source_questions` holds it and that source's facts are anchored on
it. EntityQuestions templates are copied verbatim from its relation_query_templates.json
(the dataset's questions are those templates), PopQA templates verbatim from PopQA's code;
questions marked `proctor:` are ours. ParaRel cloze patterns add paraphrases at build time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Template:
    """A question template and its stable id."""

    template_id: str   # e.g. "eq:P19", "popqa:place of birth", "proctor:P1001"
    text: str          # with [X] (and [Y] for reverse templates)


@dataclass(frozen=True)
class Relation:
    """A Wikidata relation of the bank: its question templates and the kind of answer it asks for."""

    relation_id: str                   # Wikidata property id
    name: str                          # readable snake_case
    question: Template                 # canonical question asking for the object
    paraphrases: tuple[Template, ...]  # other question templates asking for the object
    reverse: Optional[Template]        # asks for the subject given [Y]; only where well defined
    answer_type: str
    answer_granularity: str            # "entity" or "category"
    source_questions: dict[str, Template] = field(default_factory=dict)  # source -> its anchor

    def anchor_for(self, source: str) -> Template:
        """Return the anchor question for a source's facts: the source's own, else the canonical one."""
        return self.source_questions.get(source, self.question)

    def question_templates(self) -> tuple[Template, ...]:
        """Every question template of the relation (canonical, per-source, paraphrases), once."""
        seen: dict[str, Template] = {}
        for t in (self.question, *self.source_questions.values(), *self.paraphrases):
            seen.setdefault(t.template_id, t)
        return tuple(seen.values())


def _t(template_id: str, text: str) -> Template:
    return Template(template_id, text)


def _eq(pid: str, text: str) -> Template:
    return Template(f"eq:{pid}", text)


def _popqa(prop: str, text: str) -> Template:
    return Template(f"popqa:{prop}", text)


def _own(pid: str, text: str, n: int = 0) -> Template:
    return Template(f"proctor:{pid}" + (f":{n}" if n else ""), text)


def _rev(pid: str, text: str) -> Template:
    return Template(f"proctor:{pid}:reverse", text)


#: PopQA property name -> Wikidata id, and PopQA's own question template per property
POPQA_PROPS: dict[str, str] = {
    "occupation": "P106", "place of birth": "P19", "genre": "P136", "father": "P22",
    "country": "P17", "producer": "P162", "director": "P57", "capital of": "P1376",
    "screenwriter": "P58", "composer": "P86", "color": "P462", "religion": "P140",
    "sport": "P641", "author": "P50", "mother": "P25", "capital": "P36",
}
POPQA_TEMPLATES: dict[str, str] = {
    "occupation": "What is [X]'s occupation?",
    "place of birth": "In what city was [X] born?",
    "genre": "What genre is [X]?",
    "father": "Who is the father of [X]?",
    "country": "In what country is [X]?",
    "producer": "Who was the producer of [X]?",
    "director": "Who was the director of [X]?",
    "capital of": "What is [X] the capital of?",
    "screenwriter": "Who was the screenwriter for [X]?",
    "composer": "Who was the composer of [X]?",
    "color": "What color is [X]?",
    "religion": "What is the religion of [X]?",
    "sport": "What sport does [X] play?",
    "author": "Who is the author of [X]?",
    "mother": "Who is the mother of [X]?",
    "capital": "What is the capital of [X]?",
}


def _pq(prop: str) -> Template:
    return _popqa(prop, POPQA_TEMPLATES[prop])


def _rel(pid: str, name: str, question: Template, paraphrases: list[Template], answer_type: str,
         granularity: str = "entity", reverse: Optional[Template] = None,
         popqa: Optional[str] = None) -> Relation:
    """Build a relation; `popqa` names the PopQA property whose template anchors PopQA's facts.

    A PopQA template that differs from the canonical question is also a paraphrase.
    """
    source_questions: dict[str, Template] = {}
    if popqa is not None:
        source_questions["popqa"] = pq = _pq(popqa)
        if pq.text != question.text and question.template_id != pq.template_id:
            paraphrases = [*paraphrases, pq]
    return Relation(pid, name, question, tuple(paraphrases), reverse, answer_type, granularity,
                    source_questions)


_CHILD_OF = "Who is [Y]'s child?"

RELATIONS: dict[str, Relation] = {r.relation_id: r for r in [
    _rel("P17", "country", _eq("P17", "Which country is [X] located in?"), [], "place",
         popqa="country"),
    _rel("P19", "place_of_birth", _eq("P19", "Where was [X] born?"),
         [_t("eq:P19_similar", "What is the birthplace of [X]?")], "place", popqa="place of birth"),
    _rel("P20", "place_of_death", _eq("P20", "Where did [X] die?"),
         [_own("P20", "In which place did [X] die?", 1)], "place"),
    _rel("P22", "father", _pq("father"), [_own("P22", "Who was [X]'s father?", 1)], "person",
         reverse=_rev("P22", _CHILD_OF), popqa="father"),
    _rel("P25", "mother", _pq("mother"), [_own("P25", "Who was [X]'s mother?", 1)], "person",
         reverse=_rev("P25", _CHILD_OF), popqa="mother"),
    _rel("P26", "spouse", _eq("P26", "Who is [X] married to?"),
         [_own("P26", "Who is the spouse of [X]?", 1)], "person",
         reverse=_rev("P26", "Who is married to [Y]?")),
    _rel("P27", "country_of_citizenship", _own("P27", "Which country is [X] a citizen of?"),
         [_own("P27", "What is the nationality of [X]?", 1)], "place"),
    _rel("P30", "continent", _own("P30", "Which continent is [X] located on?"),
         [_own("P30", "On which continent is [X]?", 1)], "place"),
    _rel("P36", "capital", _eq("P36", "What is the capital of [X]?"),
         [_own("P36", "Which city is the capital of [X]?", 1)], "place",
         reverse=_rev("P36", "What is [Y] the capital of?"), popqa="capital"),
    _rel("P37", "official_language", _own("P37", "What is the official language of [X]?"),
         [_own("P37", "Which language is official in [X]?", 1)], "language", "category"),
    _rel("P39", "position_held", _own("P39", "What position did [X] hold?"),
         [_own("P39", "Which office has [X] held?", 1)], "position", "category"),
    _rel("P40", "child", _eq("P40", "Who is [X]'s child?"),
         [_own("P40", "Who is a child of [X]?", 1)], "person",
         reverse=_rev("P40", "Who is [Y]'s parent?")),
    _rel("P47", "shares_border_with", _own("P47", "Which place shares a border with [X]?"),
         [_own("P47", "What borders [X]?", 1)], "place"),
    _rel("P50", "author", _eq("P50", "Who is the author of [X]?"),
         [_own("P50", "Who wrote [X]?", 1)], "person", popqa="author"),
    _rel("P57", "director", _pq("director"), [_own("P57", "Who directed [X]?", 1)], "person",
         popqa="director"),
    _rel("P58", "screenwriter", _pq("screenwriter"),
         [_own("P58", "Who wrote the screenplay for [X]?", 1)], "person", popqa="screenwriter"),
    _rel("P69", "educated_at", _eq("P69", "Where was [X] educated?"),
         [_own("P69", "Which school did [X] attend?", 1)], "organization"),
    _rel("P86", "composer", _pq("composer"),
         [_own("P86", "Who composed the music for [X]?", 1)], "person", popqa="composer"),
    _rel("P101", "field_of_work", _own("P101", "What field does [X] work in?"),
         [_own("P101", "What is [X]'s area of expertise?", 1)], "field", "category"),
    _rel("P103", "native_language", _own("P103", "What is the native language of [X]?"),
         [_own("P103", "What is [X]'s mother tongue?", 1)], "language", "category"),
    _rel("P106", "occupation", _eq("P106", "What kind of work does [X] do?"), [],
         "occupation", "category", popqa="occupation"),
    _rel("P108", "employer", _own("P108", "Who is [X]'s employer?"),
         [_own("P108", "Which organization does [X] work for?", 1)], "organization"),
    _rel("P112", "founded_by", _eq("P112", "Who founded [X]?"),
         [_own("P112", "Who was the founder of [X]?", 1)], "person",
         reverse=_rev("P112", "Which organization was founded by [Y]?")),
    _rel("P127", "owned_by", _eq("P127", "Who owns [X]?"),
         [_own("P127", "Who is the owner of [X]?", 1)], "organization"),
    _rel("P131", "located_in_the_administrative_territorial_entity",
         _eq("P131", "Where is [X] located?"),
         [_own("P131", "In which administrative region is [X] located?", 1)], "place"),
    _rel("P136", "genre", _eq("P136", "What type of music does [X] play?"), [],
         "genre", "category", popqa="genre"),
    _rel("P138", "named_after", _own("P138", "Who or what is [X] named after?"),
         [_own("P138", "What was [X] named for?", 1)], "other"),
    _rel("P140", "religion", _pq("religion"),
         [_own("P140", "Which religion does [X] follow?", 1)], "religion", "category",
         popqa="religion"),
    _rel("P159", "headquarters_location", _eq("P159", "Where is the headquarter of [X]?"),
         [_t("eq:P159_similar", "Where is [X] headquartered?")], "place"),
    _rel("P162", "producer", _pq("producer"), [_own("P162", "Who produced [X]?", 1)], "person",
         popqa="producer"),
    _rel("P170", "creator", _eq("P170", "Who was [X] created by?"),
         [_t("eq:P170_similar", "Who is the creator of [X]?")], "person"),
    _rel("P175", "performer", _eq("P175", "Who performed [X]?"),
         [_own("P175", "Who is the performer of [X]?", 1)], "person"),
    _rel("P176", "manufacturer", _eq("P176", "Which company is [X] produced by?"),
         [_own("P176", "Which company manufactures [X]?", 1)], "organization"),
    _rel("P178", "developer", _own("P178", "Who developed [X]?"),
         [_own("P178", "Which company is the developer of [X]?", 1)], "organization"),
    _rel("P190", "twinned_administrative_body", _own("P190", "Which city is a twin city of [X]?"),
         [_own("P190", "What is a sister city of [X]?", 1)], "place"),
    _rel("P264", "record_label", _eq("P264", "What music label is [X] represented by?"),
         [_own("P264", "Which record label is [X] signed to?", 1)], "organization"),
    _rel("P276", "location", _eq("P276", "Where is [X] located?"),
         [_own("P276", "What is the location of [X]?", 1)], "place"),
    _rel("P279", "subclass_of", _own("P279", "What is [X] a subclass of?"),
         [_own("P279", "What more general class does [X] belong to?", 1)], "other", "category"),
    _rel("P361", "part_of", _own("P361", "What is [X] a part of?"),
         [_own("P361", "Which larger whole does [X] belong to?", 1)], "other"),
    _rel("P364", "original_language_of_film_or_tv_show",
         _own("P364", "What is the original language of [X]?"),
         [_own("P364", "In which language was [X] originally made?", 1)], "language", "category"),
    _rel("P407", "language_of_work_or_name", _eq("P407", "Which language was [X] written in?"),
         [_own("P407", "In what language is [X] written?", 1)], "language", "category"),
    _rel("P413", "position_played_on_team", _eq("P413", "What position does [X] play?"),
         [_own("P413", "What is [X]'s position on the team?", 1)], "position", "category"),
    _rel("P449", "original_broadcaster", _own("P449", "Which network originally aired [X]?"),
         [_own("P449", "On which channel did [X] premiere?", 1)], "organization"),
    _rel("P462", "color", _pq("color"), [_own("P462", "What is the colour of [X]?", 1)],
         "color", "category", popqa="color"),
    _rel("P463", "member_of", _own("P463", "Which organization is [X] a member of?"),
         [_own("P463", "What is [X] a member of?", 1)], "organization"),
    _rel("P495", "country_of_origin", _eq("P495", "Which country was [X] created in?"),
         [_own("P495", "What is the country of origin of [X]?", 1)], "place"),
    _rel("P530", "diplomatic_relation",
         _own("P530", "Which country does [X] maintain diplomatic relations with?"),
         [_own("P530", "With which country does [X] have diplomatic relations?", 1)], "place"),
    _rel("P641", "sport", _pq("sport"), [_own("P641", "Which sport is [X] associated with?", 1)],
         "sport", "category", popqa="sport"),
    _rel("P740", "location_of_formation", _eq("P740", "Where was [X] founded?"),
         [_own("P740", "In which city was [X] formed?", 1)], "place"),
    _rel("P800", "notable_work", _eq("P800", "What is [X] famous for?"),
         [_own("P800", "What is [X]'s best-known work?", 1)], "work"),
    _rel("P937", "work_location", _own("P937", "Where did [X] work?"),
         [_own("P937", "In which city did [X] work?", 1)], "place"),
    _rel("P1001", "applies_to_jurisdiction",
         _own("P1001", "Which jurisdiction does [X] have legal force in?"),
         [_own("P1001", "In which jurisdiction does [X] apply?", 1)], "place"),
    _rel("P1303", "instrument", _own("P1303", "What instrument does [X] play?"),
         [_own("P1303", "Which musical instrument does [X] play?", 1)], "instrument", "category"),
    _rel("P1376", "capital_of", _pq("capital of"),
         [_own("P1376", "Which place has [X] as its capital?", 1)], "place",
         reverse=_rev("P1376", "What is the capital of [Y]?"), popqa="capital of"),
    _rel("P1412", "languages_spoken_written_or_signed",
         _own("P1412", "What language does [X] speak?"),
         [_own("P1412", "Which language did [X] use to communicate?", 1)], "language", "category"),
]}

#: EntityQuestions' relations (its test split covers these 24)
EQ_RELATIONS = ("P17", "P19", "P20", "P26", "P36", "P40", "P50", "P69", "P106", "P112", "P127",
                "P131", "P136", "P159", "P170", "P175", "P176", "P264", "P276", "P407", "P413",
                "P495", "P740", "P800")


def relation_sort_key(relation_id: str) -> tuple[int, str]:
    """P17 before P106: numeric order of the property number."""
    digits = relation_id[1:]
    return (int(digits), relation_id) if digits.isdigit() else (10**9, relation_id)


def fill(template: str, subject: str = "", obj: str = "") -> str:
    """Put `subject` in place of [X] and `obj` in place of [Y]."""
    return template.replace("[X]", subject).replace("[Y]", obj)
