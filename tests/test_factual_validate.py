"""The factual probe's prompt protocol and the check of externally produced generations."""

from __future__ import annotations

from proctor.factual.prompts import DECODING, build_prompt
from proctor.factual.validate import validate_generations

SEED_QUERY = "Which jurisdiction does Agriculture and Agri-Food Canada have legal force in?"


def test_build_prompt_is_the_seeds():
    anchor = {"condition_family": "anchor", "query": SEED_QUERY}
    assert build_prompt(anchor) == (
        "Question: Which jurisdiction does Agriculture and Agri-Food Canada have legal force in?"
        "\nAnswer with only the shortest correct answer.\nAnswer:")
    for family in ("paraphrase", "reverse", "recognition", "crosslingual"):
        assert build_prompt({"condition_family": family, "query": "Q?"}) == "Q?\nAnswer:"
    assert (DECODING.max_new_tokens, DECODING.max_prompt_len, DECODING.seed) == (24, 192, 20260101)


def bank(n: int = 30) -> list[dict]:
    return [{"query_id": f"query_{i:08d}", "fact_id": f"fact_{i // 2:06d}",
             "condition_family": "anchor" if i % 2 == 0 else "paraphrase", "query": f"Question {i}?"}
            for i in range(n)]


def generation(row: dict, response: str = " Paris") -> dict:
    return {"query_id": row["query_id"], "fact_id": row["fact_id"], "condition_family": row["condition_family"],
            "model": "m", "prompt": build_prompt(row), "raw_response": response, "generated_tokens": 2,
            "finish_reason": "stop"}


def test_a_faithful_file_passes():
    rows = bank()
    report = validate_generations(rows, reversed([generation(r) for r in rows]))  # order does not matter
    assert report.ok and report.lines() == [] and report.rows == 30


def test_three_missing_and_two_unknown_ids_are_named():
    rows = bank()
    gens = [generation(r) for r in rows[3:]]
    gens += [generation({**rows[0], "query_id": "query_x1"}), generation({**rows[1], "query_id": "query_x2"})]
    report = validate_generations(rows, gens)
    assert not report.ok
    assert report.missing == ["query_00000000", "query_00000001", "query_00000002"]
    assert report.unknown == ["query_x1", "query_x2"]
    lines = report.lines()
    assert lines[0] == ("missing: 3 query ids of the bank with no generation: "
                        "query_00000000, query_00000001, query_00000002")
    assert lines[1] == "unknown: 2 query ids that are not in the bank: query_x1, query_x2"


def test_duplicates_types_and_protocol_mismatches_are_reported():
    rows = bank()
    gens = [generation(r) for r in rows]
    gens.append(generation(rows[4]))
    gens[5] = {**gens[5], "raw_response": None, "generated_tokens": "2"}
    gens[6] = {k: v for k, v in gens[6].items() if k != "raw_response"}
    gens[0] = {**gens[0], "prompt": rows[0]["query"] + "\nAnswer:"}  # anchor without its wrapper
    gens[7] = {**gens[7], "condition_family": "anchor"}
    gens.append(["not", "an", "object"])
    report = validate_generations(rows, gens)
    assert report.duplicate == ["query_00000004"]
    assert report.prompt_mismatch == ["query_00000000"]
    assert report.family_mismatch == ["query_00000007"]
    assert report.bad_types == [
        "line 6: field 'raw_response' is NoneType, expected str",
        "line 6: field 'generated_tokens' is str, expected int",
        "line 7: required field 'raw_response' is absent",
        "line 32: not a JSON object",
    ]
    assert any(line.startswith("prompt mismatch: 1 prompts that differ") for line in report.lines())


def test_a_stripped_file_is_caught():
    rows = bank()
    report = validate_generations(rows, [generation(r, "Paris") for r in rows])
    assert report.stripped and not report.ok
    assert report.lines() == ["stripped responses: no raw_response starts with whitespace; write the raw "
                              "continuation (not stripped, lowercased or truncated)"]


def test_responses_cut_before_the_protocols_24_tokens_are_caught():
    rows = bank()
    full = [dict(generation(r, " Paris\nExplanation: the capital"), finish_reason="length", generated_tokens=24)
            for r in rows]
    assert validate_generations(rows, full).ok
    short = [dict(g, generated_tokens=16) if i < 2 else g for i, g in enumerate(full)]
    report = validate_generations(rows, short)
    assert report.cut_short == ["query_00000000", "query_00000001"] and not report.ok
    assert report.lines() == ["cut short: 2 responses that hit the length limit before 24 new tokens (protocol "
                              "mismatch: max_new_tokens=24): query_00000000, query_00000001"]
