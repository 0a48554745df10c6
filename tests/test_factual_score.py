import json

import pytest

from proctor.errors import UserError
from proctor.factual.prompts import build_prompt
from proctor.factual.score import CARRIED, score_generations, summaries
from proctor.factual.validate import read_jsonl

SEED_SCORED_FIELDS = [
    "query_id", "model", "fact_id", "relation", "condition_family", "language", "target_slot",
    "answer_type", "answer_granularity", "answer_in_subject_surface", "use_for_main_forward",
    "use_for_reverse_analysis", "use_for_recognition_analysis", "raw_response", "span", "flags",
    "label", "matched_alias", "scorer", "needs_manual_review",
]


def bank_row(i: int, family: str = "anchor", language: str = "en", relation: str = "capital") -> dict:
    return {
        "query_id": f"query_{i:04d}", "fact_id": f"fact_{i:04d}", "relation": relation,
        "relation_id": "P36", "condition_family": family, "language": language,
        "target_slot": "object", "answer_type": "place", "answer_granularity": "entity",
        "answer_in_subject_surface": False, "query": f"What is the capital of country {i}?",
        "aliases": ["Paris", "City of Light"], "distractors": ["Lyon", "Berlin"],
        "use_for_main_forward": family != "recognition", "use_for_reverse_analysis": False,
        "use_for_recognition_analysis": False, "subject": f"country {i}",
    }


def generation(row: dict, response: str, finish: str = "length") -> dict:
    return {"query_id": row["query_id"], "fact_id": row["fact_id"], "condition_family": row["condition_family"],
            "model": "m", "prompt": build_prompt(row), "raw_response": response,
            "generated_tokens": 24, "finish_reason": finish}


RESPONSES = [" Paris\nQuestion: next", " I don't know.", " Lyon or Paris", " Berlin", "", " Paris."]


def test_scored_rows_carry_every_seed_field_in_order():
    bank = [bank_row(i, family) for i, family in enumerate(
        ["anchor", "paraphrase", "reverse", "recognition", "crosslingual", "anchor"])]
    bank[4]["language"] = "fr"
    gens = [generation(row, text) for row, text in zip(bank, RESPONSES)][::-1]  # order does not matter
    scored = score_generations(bank, gens)
    assert [r["query_id"] for r in scored] == [r["query_id"] for r in bank]
    assert list(scored[0])[:len(SEED_SCORED_FIELDS)] == SEED_SCORED_FIELDS
    assert [r["label"] for r in scored] == ["correct", "abstain", "ambiguous", "incorrect", "unparseable", "correct"]
    assert scored[0]["span"] == "Paris" and scored[0]["matched_alias"] == "Paris"
    assert scored[0]["raw_response"] == RESPONSES[0] and scored[0]["model"] == "m"
    assert scored[0]["flags"] == ["truncated"] and scored[2]["needs_manual_review"]
    assert all(r[name] == b[name] for r, b in zip(scored, bank) for name in CARRIED)


def test_summaries_per_family_condition_relation_and_language():
    bank = [bank_row(0), bank_row(1, "paraphrase"), bank_row(2, "crosslingual", "fr", relation="capital_of"),
            bank_row(3)]
    gens = [generation(r, t) for r, t in zip(bank, [" Paris", " I don't know", " paris", " Rome"])]
    out = summaries(score_generations(bank, gens))
    assert out["overall"]["n"] == 4 and out["overall"]["accuracy"] == 0.5
    assert out["condition_family"]["anchor"]["accuracy"] == 0.5
    assert out["condition_family"]["paraphrase"]["abstain_rate"] == 1.0
    assert out["condition_family"]["paraphrase"]["accuracy_given_attempted"] is None
    assert set(out["condition"]) == {"anchor", "paraphrase", "crosslingual:fr"}
    assert out["language"]["fr"]["accuracy"] == 1.0
    assert out["relation"]["capital"]["n"] == 3
    assert out["overall"]["popqa_accuracy"] == 0.5  # " paris" (lower-case alias) and " Paris"


def test_three_missing_and_two_unknown_ids_are_named_and_nothing_is_scored(tmp_path):
    bank = [bank_row(i) for i in range(10)]
    gens = [generation(row, " Paris") for row in bank[3:]]
    gens += [dict(gens[0], query_id="query_9998"), dict(gens[0], query_id="query_9999")]
    with pytest.raises(UserError) as err:
        score_generations(bank, gens, source="gens.jsonl")
    message = str(err.value)
    assert "gens.jsonl cannot be scored" in message
    assert "missing: 3 query ids of the bank with no generation: query_0000, query_0001, query_0002" in message
    assert "unknown: 2 query ids that are not in the bank: query_9998, query_9999" in message


def test_invalid_json_lines_are_reported_by_line_number(tmp_path):
    bank = [bank_row(i) for i in range(2)]
    path = tmp_path / "gens.jsonl"
    lines = [json.dumps(generation(bank[0], " Paris")), '{"query_id": "query_0001", "raw_', ""]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        score_generations(bank, list(read_jsonl(path)))
    assert "line 2: not valid JSON" in str(err.value) and "line 3: not valid JSON (empty line)" in str(err.value)


def test_a_file_that_is_not_text_is_a_clear_error(tmp_path):
    path = tmp_path / "gens.jsonl"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(UserError, match="not valid UTF-8 text"):
        list(read_jsonl(path))
