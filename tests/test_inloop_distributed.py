"""C4Metric over 2 (and 3) gloo processes with DocumentSampler equals the 1-process run."""

import json

import pytest
import torch
from torch.utils.data import DataLoader

from distributed_runs import run_ranks
from proctor.inloop.distributed import DocumentSampler, rank_and_world
from proctor.inloop.lm import C4English
from proctor.inloop.lm_metric import C4Metric
from tinylm import build_tiny_model


def evaluate_c4(model_dir: str, data_dir, path, num_samples: int, ctx: int, batch_size: int) -> dict:
    """One rank's pass over its documents; the all-reduced totals and results."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    task = C4English(tokenizer, num_samples=num_samples, model_ctx_len=ctx, data_dir=data_dir, path=path)
    sampler = DocumentSampler(task)
    loader = DataLoader(task, batch_size=batch_size, sampler=sampler, collate_fn=task.collate_fn)
    metric = C4Metric()
    with torch.no_grad():
        for batch in loader:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            metric.update(batch, logits)
    local = {"nll": float(metric.nll), "tokens": int(metric.tokens), "bytes": int(metric.bytes),
             "items": len(sampler), "docs": sorted({task.documents[i] for i in sampler})}
    return {"rank_world": rank_and_world(), "local": local, "num_items": len(task),
            "num_docs": len(task.scored_documents), "totals": metric.totals(), "result": metric.compute()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_dist")))


@pytest.mark.slow  # heavy: gloo process groups, over 3 s
def test_two_gloo_processes_equal_one_process(model_dir, data_dir):
    args = (model_dir, str(data_dir), None, 20, 32, 4)
    single = evaluate_c4(*args)
    assert single["rank_world"] == (0, 1) and single["num_docs"] == 20
    assert single["num_items"] > 20  # multi-chunk documents
    ranks = run_ranks(evaluate_c4, 2, *args)
    assert [r["rank_world"] for r in ranks] == [(0, 2), (1, 2)]
    docs = [r["local"]["docs"] for r in ranks]
    assert docs[0] and docs[1] and not set(docs[0]) & set(docs[1])
    assert sorted(docs[0] + docs[1]) == list(range(20))
    assert sum(r["local"]["items"] for r in ranks) == single["num_items"]  # no padding, no repeats
    for r in ranks:
        assert r["totals"]["tokens"] == single["totals"]["tokens"]
        assert r["totals"]["bytes"] == single["totals"]["bytes"]
        assert r["totals"]["nll"] == sum(x["local"]["nll"] for x in ranks)  # the all-reduced sum
        assert r["totals"]["nll"] == pytest.approx(single["totals"]["nll"], rel=1e-6)
        assert r["result"]["ce_loss"] == pytest.approx(single["result"]["ce_loss"], rel=1e-6)
        assert r["result"]["bpb"] == pytest.approx(single["result"]["bpb"], rel=1e-6)
    assert ranks[0]["result"] == ranks[1]["result"]


@pytest.mark.slow  # heavy: gloo process groups, over 3 s
def test_a_rank_without_documents_still_reduces(model_dir, tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        "Paris is the capital of France. Berlin is the capital of Germany.",
        "The quick brown fox jumps over the lazy dog.",
    ]))
    args = (model_dir, None, str(path), 2, 8, 2)
    single = evaluate_c4(*args)
    ranks = run_ranks(evaluate_c4, 3, *args)
    assert [r["local"]["docs"] for r in ranks] == [[0], [1], []]
    assert ranks[2]["local"]["items"] == 0 and ranks[2]["local"]["tokens"] == 0
    for r in ranks:
        assert r["totals"]["tokens"] == single["totals"]["tokens"]
        assert r["totals"]["bytes"] == single["totals"]["bytes"]
        assert r["result"]["bpb"] == pytest.approx(single["result"]["bpb"], rel=1e-6)
