"""The factual probe's terminal tables: every label's share, and why an ISS or KTS is undefined."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from proctor.factual.iss import compute_iss
from proctor.factual.metrics import factual_metrics
from proctor.factual.report import print_metrics, print_summary
from proctor.factual.score import summaries
from proctor.factual.scorer import LABELS, score_response

#: a raw reply per label, for a question whose gold answer is "Paris"
REPLIES = {"correct": "Paris", "incorrect": "London", "ambiguous": "Paris or Lyon", "abstain": "I don't know",
           "unparseable": ""}


def scored(condition: str, counts: dict[str, int], language: str = "en") -> list[dict]:
    """Scored rows (the fields `summaries` reads) with `counts[label]` rows of each label."""
    rows = []
    for label, k in counts.items():
        score = score_response(REPLIES[label], ["Paris"], (), "en")
        assert score.label == label
        rows += [{"span": score.span, "label": score.label, "scorer": score.scorer,
                  "matched_alias": score.matched_alias, "flags": list(score.flags),
                  "needs_manual_review": score.needs_manual_review, "popqa_match": label == "correct",
                  "condition_family": condition, "language": language, "relation": "capital"}] * k
    return rows


def render(printer, data, width: int = 200) -> str:
    console = Console(record=True, width=width)
    printer(data, console)
    return console.export_text()


def line_of(text: str, name: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.split("│")[0].strip() == name]
    return line


def test_summary_shows_every_label_with_its_share_and_count():
    rows = (scored("anchor", {"unparseable": 81, "correct": 9, "incorrect": 8, "abstain": 3, "ambiguous": 1})
            + scored("crosslingual", {"correct": 2, "incorrect": 5}, language="de"))
    text = render(print_summary, {"model": "tiny", **summaries(rows)})
    header = next(ln for ln in text.splitlines() if "condition" in ln)
    assert [label for label in LABELS if label in header] == list(LABELS)
    assert header.index("correct") < header.index("incorrect") < header.index("unparseable")
    anchor = line_of(text, "anchor")
    # label columns in LABELS order: correct, incorrect, ambiguous, abstain, unparseable
    assert [cell.strip() for cell in anchor.split("│")[1:7]] == [
        "102", "0.088   (9)", "0.078   (8)", "0.010   (1)", "0.029   (3)", "0.794  (81)"]
    assert "0.000   (0)" in line_of(text, "crosslingual:de")   # an empty label still shows
    assert "0.743  (81)" in line_of(text, "all")                  # 81 of 109


def test_summary_of_a_full_bank_fits_the_wide_console():
    counts = {label: 1200 if label == "unparseable" else 400 for label in LABELS}
    rows = scored("crosslingual", counts, language="de") + scored("anchor", {"correct": 7})
    text = render(print_summary, {"model": "tiny", **summaries(rows)}, width=120)
    assert "…" not in text and max(len(ln.rstrip()) for ln in text.splitlines()) <= 120
    assert line_of(text, "crosslingual:de").split("│")[2:7] == [" 0.143  (400) "] * 4 + [" 0.429 (1200) "]
    assert "1.000    (7)" in line_of(text, "anchor")


def fact_rows(n_para: int, n_rev: int) -> list[dict]:
    """Main-forward rows of one relation: anchor and paraphrase for n_para facts, reverse for n_rev."""
    rows = []
    for i in range(max(n_para, n_rev)):
        for condition, n in (("anchor", n_para), ("paraphrase", n_para), ("reverse", n_rev)):
            if i < n:
                rows.append({"query_id": f"q{i}_{condition}", "fact_id": f"f{i}", "relation": "capital",
                             "subject": f"s{i}", "condition_family": condition, "language": "en"})
    return rows


@pytest.fixture()
def metrics() -> dict:
    """factual_metrics on 8 facts with 3 reverse rows: ISS defined for paraphrase only, KTS for neither."""
    rows = fact_rows(8, 3)
    states = {0: np.random.default_rng(0).normal(size=(len(rows), 8)).astype(np.float32)}
    bank = SimpleNamespace(version="v1", main_forward_rows=lambda: rows)
    index = SimpleNamespace(bank_version="v1", query_ids=[r["query_id"] for r in rows], layers=[0],
                            chat_template=None)
    scored_rows = [{"query_id": r["query_id"], "label": "correct" if int(r["fact_id"][1:]) % 2 else "incorrect"}
                   for r in rows]
    return factual_metrics(bank, scored_rows, SimpleNamespace(index=index, layers=states), model="tiny",
                           bootstrap=50)


def tables(result: dict) -> tuple[str, str]:
    text = render(print_metrics, result)
    iss, kts = text.split("KTS: tiny")
    return iss, kts


def test_undefined_iss_and_kts_rows_say_why(metrics):
    iss, kts = tables(metrics)
    reverse = line_of(iss, "reverse")
    assert reverse.split("│")[1:4] == ["     0 ", "      — ", "          [—, —] "]
    assert reverse.rstrip().endswith(
        "every relation has fewer than 5 facts with both an anchor and a reverse row (most: 3)")
    paraphrase = line_of(iss, "paraphrase")
    assert paraphrase.split("│")[-1].strip() == "" and "—" not in paraphrase
    assert line_of(kts, "reverse").rstrip().endswith(
        "too few facts per class: anchor_correct=1, anchor_incorrect=2, cond_correct=1, cond_incorrect=2 "
        "(need at least 20 each)")
    assert "too few facts per class" in line_of(kts, "paraphrase")


def test_a_defined_kts_has_no_reason_and_a_missing_one_says_so(metrics):
    result = copy.deepcopy(metrics)
    result["conditions"]["paraphrase"]["kts"].update(kts=0.8, a0=0.9, a0_to_c=0.82, ac=0.85, kts_gap=0.03,
                                                     reason=None)
    result["conditions"]["reverse"]["kts"] = None
    _, kts = tables(result)
    assert [c.strip() for c in line_of(kts, "paraphrase").split("│")[1:]] == [
        "8", "0.800", "0.900", "0.820", "0.850", "0.030", "1.000", ""]
    assert line_of(kts, "reverse").rstrip().endswith("KTS was not computed for this condition")


def test_iss_reason_when_no_fact_has_an_anchor_and_none_when_defined():
    # reverse rows only for facts without an anchor row: not a single pair to compare
    rows = [r for r in fact_rows(6, 0)] + [{**r, "fact_id": f"g{i}", "query_id": f"g{i}"}
                                           for i, r in enumerate(fact_rows(0, 3))]
    rng = np.random.default_rng(1)
    report = compute_iss(rows, {0: rng.normal(size=(len(rows), 4))}, n_boot=20).conditions
    assert report["reverse"].n_pairs == 0
    assert report["reverse"].to_dict()["reason"] == "no fact has both an anchor and a reverse row"
    assert report["paraphrase"].n_facts == 6 and report["paraphrase"].to_dict()["reason"] is None
