import gzip
import json
import re

import pytest

from proctor.errors import UserError
from proctor.factual.bank import (
    build_bank,
    canonical_row,
    read_bank,
    validate_rows,
    write_bank,
)
from proctor.factual.prompts import CONDITION_FAMILIES, condition_of
from proctor.factual.relations import EQ_RELATIONS, RELATIONS
from proctor.factual.scorer import normalise_forms
from proctor.factual.sources import bmlama_relation_finder, factual_dir, read_pararel

SMALL = dict(facts_per_relation=5, languages=("fr", "es"))


@pytest.fixture(scope="module")
def small(data_dir):
    return build_bank(data_dir, **SMALL)


@pytest.fixture(scope="module")
def smaller(data_dir):
    return build_bank(data_dir, facts_per_relation=3, languages=("fr", "es"))


def _by_fact(rows):
    out = {}
    for row in rows:
        out.setdefault(row["fact_id"], []).append(row)
    return out


def test_all_five_families_and_sources(small):
    families = {r["condition_family"] for r in small.rows}
    assert families == set(CONDITION_FAMILIES)
    assert {r["source"] for r in small.rows} == set(small.options["sources"])
    languages = {r["language"] for r in small.rows if r["condition_family"] == "crosslingual"}
    assert languages == {"fr", "es"}
    assert small.report["rows"] == len(small.rows)
    assert sum(small.report["families"].values()) == len(small.rows)
    assert small.report["skipped"]["bmlama17: template not among ParaRel's patterns"] > 0


def test_ids_stable_and_independent_of_the_cap(small, smaller, data_dir):
    again = build_bank(data_dir, **SMALL)
    assert [canonical_row(r) for r in again.rows] == [canonical_row(r) for r in small.rows]
    big = {r["query_id"]: r for r in small.rows}
    kept = {r["fact_id"] for r in smaller.rows}
    assert kept < {r["fact_id"] for r in small.rows}   # a cap keeps a prefix of the hash order
    for row in smaller.rows:
        assert big[row["query_id"]] == row
    assert len([r for r in small.rows if r["fact_id"] in kept]) == len(smaller.rows)


def test_invariants(small):
    assert validate_rows(small.rows) == []
    for row in small.rows:
        assert re.fullmatch(r"query_[0-9a-f]{12}", row["query_id"])
        assert re.fullmatch(r"fact_[0-9a-f]{12}", row["fact_id"])
        assert row["relation"] == RELATIONS[row["relation_id"]].name
        assert row["use_for_main_forward"] == (row["condition_family"] != "recognition")
        assert row["aliases"] and row["query"]
        assert (row["target_slot"] == "subject") == (row["condition_family"] == "reverse")
        assert (row["language"] != "en") == (row["condition_family"] == "crosslingual")
    for rows in _by_fact(small.rows).values():
        families = [r["condition_family"] for r in rows]
        assert families[0] == "anchor" and families.count("anchor") == 1
        assert families == sorted(families, key=CONDITION_FAMILIES.index)
        anchor = rows[0]
        assert anchor["use_for_reverse_analysis"] == ("reverse" in families)
        assert anchor["use_for_recognition_analysis"] == ("recognition" in families)
        conditions = [condition_of(r) for r in rows if r["use_for_main_forward"]]
        assert len(conditions) == len(set(conditions))
        for row in rows:
            if row["condition_family"] == "paraphrase":
                assert row["query"] != anchor["query"]
                assert row["template_id"] != anchor["template_id"]


def test_distractors_never_equal_a_gold_alias(small):
    for row in small.rows:
        lang = row["language"]
        gold = [normalise_forms(a, lang) for a in row["aliases"]]
        assert len(row["distractors"]) <= 10
        for d in row["distractors"]:
            forms = normalise_forms(d, lang)
            assert not any(x == y for g in gold for x, y in zip(forms, g)), (row["query_id"], d)


def test_entityquestions_anchor_is_the_dataset_question(small, data_dir):
    root = factual_dir(data_dir)
    with gzip.open(root / "entityquestions" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        questions = {json.loads(line)["question"] for line in f}
    anchors = [r for r in small.rows if r["source"] == "entityquestions"
               and r["condition_family"] == "anchor"]
    assert len(anchors) == 5 * len(EQ_RELATIONS)
    assert all(r["query"] in questions for r in anchors)
    templates = json.loads((root / "entityquestions" / "relation_query_templates.json").read_text())
    for pid in EQ_RELATIONS:
        assert RELATIONS[pid].question.text == templates[pid]
        assert RELATIONS[pid].question.template_id == f"eq:{pid}"


def test_recognition_reverse_and_crosslingual_rows(small):
    facts = _by_fact(small.rows)
    recognition = [r for r in small.rows if r["condition_family"] == "recognition"]
    assert recognition
    for row in recognition:
        anchor = facts[row["fact_id"]][0]
        letter = row["aliases"][-1]
        options = dict(line.split(". ", 1) for line in row["query"].split("\n")[1:])
        assert row["query"].startswith(anchor["query"] + "\nA. ")
        assert list(options) == ["A", "B", "C", "D"]
        assert options[letter] in anchor["aliases"]
        assert sorted(row["distractors"]) == sorted(
            [o for k, o in options.items() if k != letter] + [k for k in options if k != letter])
    reverse = [r for r in small.rows if r["condition_family"] == "reverse"]
    assert reverse
    for row in reverse:
        assert row["aliases"][0] == row["subject"]
        assert row["use_for_reverse_analysis"]
        assert facts[row["fact_id"]][0]["use_for_reverse_analysis"]
        assert RELATIONS[row["relation_id"]].reverse is not None
    cross = [r for r in small.rows if r["condition_family"] == "crosslingual"]
    assert all(r["source"] == "bmlama17" and "___" in r["query"] and "<mask>" not in r["query"]
               for r in cross)
    reversal = [r for r in reverse if r["source"] == "reversal_curse"]
    assert reversal and all(r["query"].endswith("'s child?") for r in reversal)


def test_popqa_anchor_uses_popqa_template(small):
    anchors = [r for r in small.rows
               if r["source"] == "popqa" and r["condition_family"] == "anchor"]
    assert anchors and all(r["template_id"].startswith("popqa:") for r in anchors)
    birth = [r for r in anchors if r["relation_id"] == "P19"]
    assert birth and all(r["query"] == f"In what city was {r['subject']} born?" for r in birth)


def test_bmlama_templates_map_to_relations(data_dir):
    find = bmlama_relation_finder(read_pararel(factual_dir(data_dir), {}))
    assert find("[X] plays [Y].", "piano") == ("P1303", "")
    assert find("[X] is developed by [Y].", "Microsoft") == ("P178", "")
    assert find("[X] is located in [Y].", "Europe") == ("P30", "")
    assert find("[X] is located in [Y].", "France")[0] is None
    assert find("[X] consists of [Y].", "carbon")[0] is None


def test_round_trip_and_header(small, tmp_path):
    path = tmp_path / "bank.jsonl"
    version = write_bank(path, small.rows, small.header_extra)
    bank = read_bank(path)
    assert bank.rows == small.rows and bank.version == version
    assert bank.header["rows"] == len(small.rows) and bank.header["proctor_factual_bank"] == 1
    assert bank.header["options"]["languages"] == ["fr", "es"]
    assert "pararel/patterns.jsonl" in bank.header["sources"]
    assert [r["query_id"] for r in bank.main_forward_rows()] == [
        r["query_id"] for r in small.rows if r["use_for_main_forward"]]


def test_edited_bank_is_refused_and_a_headerless_bank_accepted(small, tmp_path):
    path = tmp_path / "bank.jsonl"
    version = write_bank(path, small.rows, small.header_extra)
    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    row["query"] += " (edited)"
    path.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="edited after it was built.*delete the header line"):
        read_bank(path)
    path.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")   # a user's bank, no header
    bank = read_bank(path)
    assert bank.header == {} and bank.version == version


def _write_rows(path, rows, extra_lines=()):
    path.write_text("\n".join([*(json.dumps(r) for r in rows), *extra_lines]) + "\n",
                    encoding="utf-8")
    return path


@pytest.fixture
def two_facts(small):
    """Every row of two facts: a small valid bank to break."""
    by_fact = _by_fact(small.rows)
    ids = list(by_fact)[:2]
    return [dict(r) for f in ids for r in by_fact[f]]


def test_bad_banks(two_facts, tmp_path):
    path = tmp_path / "bank.jsonl"
    rows = two_facts

    def refused(bad_rows, pattern, extra_lines=()):
        _write_rows(path, bad_rows, extra_lines)
        with pytest.raises(UserError, match=pattern) as info:
            read_bank(path)
        return str(info.value)

    assert read_bank(_write_rows(path, rows)).rows == rows
    refused(rows, r"not JSON: 1 \(line %d\)" % (len(rows) + 1), ["{not json"])
    dup = [*rows, dict(rows[1])]
    msg = refused(dup, "duplicate query_id: 1")
    assert rows[1]["query_id"] in msg
    missing = [dict(rows[0]), *rows[1:]]
    del missing[0]["aliases"]
    refused(missing, r"missing or wrong-typed fields: 1 \(line 1: missing 'aliases'")
    typed = [dict(rows[0], use_for_main_forward="yes"), *rows[1:]]
    refused(typed, "'use_for_main_forward' is str, expected bool")
    family = [dict(rows[0], condition_family="cloze"), *rows[1:]]
    refused(family, "unknown condition_family")
    no_anchor = [r for r in rows
                 if r["condition_family"] != "anchor" or r["fact_id"] != rows[0]["fact_id"]]
    msg = refused(no_anchor, "facts without exactly one anchor row: 1")
    assert rows[0]["fact_id"] in msg
    para = next(r for r in rows if r["condition_family"] == "paraphrase")
    twice = [*rows, dict(para, query_id="query_000000000000")]
    refused(twice, "several main-forward rows for one fact and condition: "
                   f"1 \\({para['fact_id']} paraphrase")
    empty = [dict(rows[0], aliases=[" "]), *rows[1:]]
    refused(empty, f"rows with no aliases: 1 \\({rows[0]['query_id']}\\)")
    with pytest.raises(UserError, match="query bank not found"):
        read_bank(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="refusing to write an invalid query bank"):
        write_bank(tmp_path / "out.jsonl", dup)


def test_missing_sources_and_bad_options(data_dir, tmp_path, monkeypatch):
    (tmp_path / "factual" / "pararel").mkdir(parents=True)
    (tmp_path / "factual" / "pararel" / "patterns.jsonl").write_bytes(
        (data_dir / "factual" / "pararel" / "patterns.jsonl").read_bytes())
    with pytest.raises(UserError,
                       match=r"source file not found: .*known_1000.json.*PROCTOR_DATA_DIR"):
        build_bank(tmp_path, sources=("rome",))
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    with pytest.raises(UserError, match="PROCTOR_DATA_DIR"):
        build_bank(None)
    with pytest.raises(UserError, match="unknown BMLAMA-17 language"):
        build_bank(data_dir, languages=("xx",), sources=("bmlama17",))
    with pytest.raises(UserError, match="unknown or no factual sources"):
        build_bank(data_dir, sources=("wikipedia",))
    with pytest.raises(UserError, match="facts_per_relation"):
        build_bank(data_dir, facts_per_relation=0)
