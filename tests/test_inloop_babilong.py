"""BABILong zero-shot BPB tasks, on files generated here with the hub dataset's schema.

No BABILong data is available offline, so each test writes RMT-team/babilong's layout
(data/qa{N}/{length}.json; rows {"input", "question", "target"}) into tmp_path.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from proctor.engine.tokens import TokenizationPolicy
from proctor.errors import UserError
from proctor.inloop import babilong
from proctor.inloop.babilong import (HUB_DATASET, LENGTHS, QA_SETS, TASKS, Babilong,
                                     prompt_of, qa_sets)
from proctor.inloop.icl_metric import ICLMetric
from tinylm import build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _rows(length: str, qa: str, n: int) -> list[dict]:
    return [{"input": f"Mary moved to the bathroom. John went to the hallway. ({length} {qa} #{i})",
             "question": f"Where is Mary? ({i})", "target": "bathroom" if i % 2 else "hallway"}
            for i in range(n)]


def write_babilong(root, length: str, n: int = 2, jsonl_qa: str = "qa2") -> dict:
    """Files for every QA set of `length` under root/babilong/data; one QA set as JSON lines."""
    rows = {}
    for qa in qa_sets(length):
        rows[qa] = _rows(length, qa, n)
        path = root / "babilong" / "data" / qa / f"{length}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        if qa == jsonl_qa:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows[qa]), encoding="utf-8")
        else:
            path.write_text(json.dumps(rows[qa]), encoding="utf-8")
    return rows


def test_thirteen_task_names_and_their_qa_sets():
    assert LENGTHS == ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k",
                       "1M", "10M")
    assert sorted(TASKS) == sorted(f"babilong_{x}_bpb_0shot" for x in LENGTHS)
    assert len(TASKS) == 13 and TASKS["babilong_1M_bpb_0shot"] == "1M"
    assert QA_SETS["0k"] == tuple(f"qa{i}" for i in range(1, 21))
    for length in LENGTHS[1:-1]:
        assert QA_SETS[length] == tuple(f"qa{i}" for i in range(1, 11))
    assert QA_SETS["10M"] == ("qa1", "qa2", "qa3", "qa4", "qa5")


@pytest.mark.parametrize("bad", ["4K", "1m", "10m", "3k", "0K", "babilong_4k"])
def test_lengths_are_case_sensitive(bad, tokenizer, tmp_path):
    with pytest.raises(UserError, match="unknown BABILong length"):
        Babilong(tokenizer, bad, data_dir=tmp_path)
    with pytest.raises(UserError, match="unknown BABILong length"):
        qa_sets(bad)


def test_prompt_and_continuation_strings():
    row = {"input": "Daniel went back to the office.", "question": "Where is Daniel?", "target": "office"}
    assert prompt_of(row) == ("Daniel went back to the office.\nQuestion: Where is Daniel?\nAnswer:",
                              " office")


@pytest.mark.parametrize("length", ["0k", "1k", "10M"])
def test_local_files_in_hub_layout(length, tokenizer, tmp_path):
    rows = write_babilong(tmp_path, length, n=3)
    task = Babilong(tokenizer, length, model_ctx_len=4096, data_dir=tmp_path)
    assert task.metric_type == "bpb"
    assert task.qa_sets == QA_SETS[length]
    expected = [r for qa in QA_SETS[length] for r in rows[qa]]  # QA sets in order, never mixed lengths
    assert task.sources == [qa for qa in QA_SETS[length] for _ in range(3)]
    assert len(task) == task.num_documents == len(expected) == 3 * len(QA_SETS[length])
    pairs = [(r["input"] + "\nQuestion: " + r["question"] + "\nAnswer:", " " + r["target"]) for r in expected]
    windows = TokenizationPolicy(tokenizer, max_length=4096).windows(pairs)
    for i, (w, (_, cont)) in enumerate(zip(windows, pairs)):
        item = task[i]
        assert item["input_ids"] == list(w.inputs)
        expected_labels = [-100] * len(w.inputs)
        expected_labels[w.start :] = w.targets
        assert item["labels"] == expected_labels  # only the gold " " + target is scored
        assert (item["doc_id"], item["cont_id"], item["label_id"], item["num_choices"]) == (i, 0, 0, 1)
        assert item["cont_byte_len"] == len(cont.encode()) and item["cont_str_len"] == len(cont)
        assert item["cont_byte_len_no_leading_space"] == len(cont.encode()) - 1


def test_num_samples_takes_the_first_rows_of_each_qa_set(tokenizer, tmp_path):
    write_babilong(tmp_path, "2k", n=4)
    task = Babilong(tokenizer, "2k", model_ctx_len=4096, data_dir=tmp_path, num_samples=2)
    assert task.sources == [qa for qa in QA_SETS["2k"] for _ in range(2)]
    with pytest.raises(UserError, match="num_samples"):
        Babilong(tokenizer, "2k", data_dir=tmp_path, num_samples=0)


def test_left_truncation_keeps_the_answer(tokenizer, tmp_path):
    write_babilong(tmp_path, "1k", n=1)
    full = Babilong(tokenizer, "1k", model_ctx_len=4096, data_dir=tmp_path)
    short = Babilong(tokenizer, "1k", model_ctx_len=12, data_dir=tmp_path)
    for i in range(len(full)):
        a, b = full[i], short[i]
        assert len(a["input_ids"]) > 12 and len(b["input_ids"]) == 12
        assert b["input_ids"] == a["input_ids"][-12:]  # cut from the left
        assert [t for t in b["labels"] if t != -100] == [t for t in a["labels"] if t != -100]


def test_missing_and_malformed_data_are_user_errors(tokenizer, tmp_path):
    with pytest.raises(UserError, match=r"BABILong file not found: .*babilong/data/qa1/4k\.json"):
        Babilong(tokenizer, "4k", data_dir=tmp_path)
    write_babilong(tmp_path, "4k")
    (tmp_path / "babilong" / "data" / "qa7" / "4k.json").unlink()
    with pytest.raises(UserError, match="qa7/4k.json"):
        Babilong(tokenizer, "4k", data_dir=tmp_path)
    write_babilong(tmp_path, "4k")
    (tmp_path / "babilong" / "data" / "qa3" / "4k.json").write_text(json.dumps([{"input": "x", "question": "y"}]))
    with pytest.raises(UserError, match="row 0 must have string fields input, question, target"):
        Babilong(tokenizer, "4k", data_dir=tmp_path)
    (tmp_path / "babilong" / "data" / "qa3" / "4k.json").write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        Babilong(tokenizer, "4k", data_dir=tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        Babilong(tokenizer, "4k", data_dir=tmp_path / "nowhere")


def test_hub_config_is_the_length_and_split_the_qa_set(tokenizer, monkeypatch):
    calls = []

    def fake_hub(dataset, name, split):
        calls.append((dataset, name, split))
        return _rows(name, split, 1)

    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    monkeypatch.setattr("proctor.data.hub.load_hub_split", fake_hub)
    task = Babilong(tokenizer, "10M", model_ctx_len=4096)
    assert calls == [(HUB_DATASET, "10M", f"qa{i}") for i in range(1, 6)]
    assert HUB_DATASET == "RMT-team/babilong" and task.num_documents == 5
    assert babilong.LENGTHS is LENGTHS


def test_bpb_v2_hand_computed_with_a_tiny_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(directory))
    write_babilong(tmp_path / "data", "1k", n=2)
    task = Babilong(tok, "1k", model_ctx_len=64, data_dir=tmp_path / "data")
    metric = ICLMetric(metric_type=task.metric_type)
    v1, v2 = [], []
    with torch.no_grad():
        for s in range(0, len(task), 6):
            batch = task.collate_fn([task[i] for i in range(s, min(s + 6, len(task)))])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            metric.update(batch, logits)
        for i in range(len(task)):  # by hand: each example alone
            item = task[i]
            logp = torch.log_softmax(model(input_ids=torch.tensor([item["input_ids"]])).logits[0].double(), -1)
            nll = -sum(logp[p, t].item() for p, t in enumerate(item["labels"]) if t != -100)
            v2.append(nll / math.log(2) / item["cont_byte_len"])
            v1.append(nll / math.log(2) / item["cont_byte_len_no_leading_space"])
    result = metric.compute()
    assert set(result) == {"bpb_v1", "bpb_v2", "ce_loss", "ce_loss_v1", "ce_loss_v2"}
    assert result["bpb_v2"] == pytest.approx(sum(v2) / len(v2), rel=1e-5)  # mean over examples
    assert result["bpb_v1"] == pytest.approx(sum(v1) / len(v1), rel=1e-5)
    assert result["bpb_v1"] > result["bpb_v2"]  # the leading space adds a byte to each denominator
