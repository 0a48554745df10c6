"""The factual-recall scorer (issue 6; spec factual.md, "Labels (scorer)")."""

import pytest

from proctor.factual import Score, extract_span, normalise_forms, popqa_match, score_response, summarise


def label(raw, aliases, **kw):
    s = score_response(raw, aliases, **kw)
    return s.label, s.scorer


# -- span extraction ---------------------------------------------------------------------

@pytest.mark.parametrize("raw, span", [
    (" Paris", "Paris"),
    ("Answer: Paris", "Paris"),
    (" A: Paris", "Paris"),
    (" **Paris**", "Paris"),
    (' "Paris"', "Paris"),
    (" `Paris`", "Paris"),
    (" “Paris”.", "Paris"),
    (" *Paris*", "Paris"),
    (" Paris.", "Paris"),
    (" Paris, which is the capital of France.", "Paris"),
    (" Paris (France)", "Paris"),
    (" Paris\nQuestion: What is", "Paris"),
    (" Paris Question: next", "Paris"),
    (" Paris Q: next", "Paris"),
    (" St. Louis", "St. Louis"),
    ("   \n  ", ""),
    ("", ""),
])
def test_extract_span(raw, span):
    assert extract_span(raw) == span


def test_flags_echo_and_clause():
    s = score_response("Answer: Paris, which is in France", ["Paris"])
    assert (s.span, s.label, s.scorer, s.matched_alias) == ("Paris", "correct", "exact_alias", "Paris")
    assert s.flags == ["echoed_prompt", "stripped_clause"]
    assert s.needs_manual_review is False
    assert score_response(" Paris (France)", ["Paris"]).flags == ["stripped_clause"]


# -- normalisation -----------------------------------------------------------------------

def test_normalise_forms():
    assert normalise_forms("Zürich") == ("zürich", "zürich", "zurich", "zurich")
    assert normalise_forms("Guinea-Bissau")[:2] == ("guineabissau", "guinea bissau")
    assert normalise_forms("The  Netherlands")[0] == "netherlands"
    assert normalise_forms("la France", "fr")[0] == "france"
    assert normalise_forms("l'Italie", "fr")[0] == "italie"
    assert normalise_forms("snake_case")[0] == "snake case"
    assert normalise_forms("The")[0] == "the"          # an article alone is kept
    assert normalise_forms("ＰＡＲＩＳ")[0] == "paris"   # NFKC


@pytest.mark.parametrize("raw, aliases, language", [
    (" Zurich", ["Zürich"], "en"),
    (" Zürich", ["Zurich"], "en"),
    (" Sao Paulo", ["São Paulo"], "pt"),
    (" SÃO PAULO", ["São Paulo"], "pt"),
    (" St Louis", ["St. Louis"], "en"),
    (" St. Louis", ["St Louis"], "en"),
    (" Guinea Bissau", ["Guinea-Bissau"], "en"),
    (" GuineaBissau", ["Guinea-Bissau"], "en"),
    (" The Netherlands", ["Netherlands"], "en"),
    (" Netherlands", ["the Netherlands"], "en"),
    (" la France", ["France"], "fr"),
    (" die Schweiz", ["Schweiz"], "de"),
    (" Ludwig_van_Beethoven", ["Ludwig van Beethoven"], "en"),
])
def test_variants_are_exact(raw, aliases, language):
    assert label(raw, aliases, language=language) == ("correct", "exact_alias")


# -- correct -----------------------------------------------------------------------------

def test_contains_alias_on_token_boundaries():
    s = score_response(" The city of Paris", ["Paris", "Paname"])
    assert (s.label, s.scorer, s.matched_alias) == ("correct", "contains_alias", "Paris")
    assert label(" Parisian suburbs", ["Paris"]) != ("correct", "contains_alias")


def test_matched_alias_is_as_given():
    s = score_response(" zurich", ["Zürich"])
    assert s.matched_alias == "Zürich"


def test_short_aliases_match_only_exactly():
    assert label(" US", ["US"]) == ("correct", "exact_alias")
    assert label(" the US", ["US"]) == ("correct", "exact_alias")
    assert label(" USA", ["US"])[0] == "incorrect"
    assert label(" US government", ["US"])[0] != "correct"
    assert label(" U.K.", ["UK"]) == ("correct", "exact_alias")
    assert label(" UK companies", ["UK"])[0] != "correct"
    assert label(" 7", ["7"]) == ("correct", "exact_alias")
    assert label(" route 7", ["7"])[0] != "correct"
    assert label(" 7 days", ["7"])[0] != "correct"


def test_truncated_mid_sentence_output():
    raw = " Canada\nExplanation: Agriculture and Agri-Food Canada (AAFC) is a federal"
    s = score_response(raw, ["Canada"], finish_reason="length")
    assert (s.span, s.label, s.scorer, s.matched_alias) == ("Canada", "correct", "exact_alias", "Canada")
    assert s.flags == ["truncated"]
    assert score_response(raw, ["Canada"], finish_reason="stop").flags == []


# -- ambiguous ---------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [" Paris or Lyon", " either Paris or Lyon", " Paris/Lyon", " Paris / Lyon"])
def test_lists_are_ambiguous(raw):
    s = score_response(raw, ["Paris"])
    assert (s.label, s.scorer, s.needs_manual_review) == ("ambiguous", "ambiguous_list", True)
    assert s.matched_alias == "Paris"


def test_list_in_other_language_and_list_without_gold():
    assert label(" Paris ou Lyon", ["Paris"], language="fr") == ("ambiguous", "ambiguous_list")
    assert score_response(" Berlin or Munich", ["Paris"]).matched_alias is None


def test_alias_that_contains_or_is_still_exact():
    assert label(" AC/DC", ["AC/DC"]) == ("correct", "exact_alias")


def test_gold_and_distractor_is_ambiguous():
    s = score_response(" Paris, France and Lyon", ["Paris"], distractors=["Lyon"])
    assert (s.label, s.scorer, s.matched_alias, s.needs_manual_review) == \
        ("ambiguous", "ambiguous_distractor", "Paris", True)
    # a distractor inside the matched gold alias does not count
    assert label(" New York City, USA", ["New York City"], distractors=["New York"]) == \
        ("correct", "contains_alias")
    assert label(" Paris", ["Paris"], distractors=["Lyon"]) == ("correct", "exact_alias")


def test_partial_match_is_ambiguous():
    s = score_response(" New York", ["New York City"])
    assert (s.label, s.scorer, s.matched_alias, s.needs_manual_review) == \
        ("ambiguous", "partial_match", "New York City", True)
    assert label(" York", ["New York City"]) == ("ambiguous", "partial_match")   # F1 = 0.5
    assert label(" York", ["New York City Hall"]) == ("incorrect", "no_match")   # F1 = 0.4


# -- abstain, incorrect, unparseable -----------------------------------------------------

@pytest.mark.parametrize("raw, language", [
    (" I don't know.", "en"),
    (" I do not know", "en"),
    (" Unknown", "en"),
    (" I'm not sure", "en"),
    (" I cannot answer that", "en"),
    (" There is no information about this", "en"),
    (" Je ne sais pas.", "fr"),
    (" Ich weiß nicht", "de"),
    (" No lo sé", "es"),
    (" Non lo so", "it"),
    (" Não sei", "pt"),
    (" Ik weet het niet", "nl"),
    (" I don't know", "fr"),          # English phrases count whatever the language
])
def test_abstain(raw, language):
    s = score_response(raw, ["Paris"], language=language)
    assert (s.label, s.scorer, s.matched_alias, s.needs_manual_review) == \
        ("abstain", "abstain_phrase", None, False)


def test_incorrect():
    s = score_response(" Lyon", ["Paris"], distractors=["Lyon"])
    assert (s.label, s.scorer, s.matched_alias, s.needs_manual_review) == \
        ("incorrect", "no_match", None, False)


@pytest.mark.parametrize("raw", ["", "   ", " \nQuestion: x", " **", " .", " ****", " ?!"])
def test_unparseable(raw):
    s = score_response(raw, ["Paris"], finish_reason="length")
    assert (s.label, s.scorer, s.matched_alias) == ("unparseable", "unparseable_empty", None)
    assert s.flags == ["truncated"]


def test_labels_and_scorers_are_the_documented_ones():
    from proctor.factual import LABELS
    assert set(LABELS) == {"correct", "incorrect", "ambiguous", "abstain", "unparseable"}


# -- PopQA rule ---------------------------------------------------------------------------

def test_popqa_match():
    assert popqa_match(" The answer is Paris.", ["Paris"])
    assert popqa_match(" paris", ["Paris"])                 # lower-case form
    assert popqa_match(" Paris", ["paris"])                 # capitalised form
    assert popqa_match(" Parisian", ["Paris"])              # raw substring, no boundaries
    assert not popqa_match(" PARIS", ["Paris"])
    assert not popqa_match(" Zurich", ["Zürich"])
    assert not popqa_match(" Paris", [])


# -- summary ------------------------------------------------------------------------------

def test_summarise():
    rows = [
        (score_response(" Paris", ["Paris"]), True),
        (score_response(" the city of Paris", ["Paris"]), True),
        (score_response(" Lyon", ["Paris"]), False),
        (score_response(" Paris or Lyon", ["Paris"]), True),
        (score_response(" I don't know", ["Paris"]), False),
        (score_response("  ", ["Paris"]), False),
    ]
    out = summarise(rows)
    assert out["n"] == 6
    assert out["counts"] == {"correct": 2, "incorrect": 1, "ambiguous": 1, "abstain": 1, "unparseable": 1}
    assert out["accuracy"] == pytest.approx(2 / 6)
    assert out["abstain_rate"] == pytest.approx(1 / 6)
    assert out["attempted"] == 4
    assert out["accuracy_given_attempted"] == pytest.approx(2 / 4)
    assert out["popqa_accuracy"] == pytest.approx(3 / 6)


def test_summarise_plain_scores_and_empty():
    out = summarise([score_response(" Paris", ["Paris"]), score_response(" Unknown", ["Paris"])])
    assert out["accuracy"] == 0.5 and out["popqa_accuracy"] is None
    assert out["accuracy_given_attempted"] == 1.0
    empty = summarise([])
    assert empty["n"] == 0 and empty["accuracy"] is None and empty["accuracy_given_attempted"] is None


def test_score_is_frozen():
    s = score_response(" Paris", ["Paris"])
    assert isinstance(s, Score)
    with pytest.raises(AttributeError):
        s.label = "incorrect"
