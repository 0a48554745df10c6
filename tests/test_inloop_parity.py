"""In-loop numbers equal `proctor run`'s offline numbers: same model, data, tokenization, metric.

One `proctor run` (C4 BPB + a 5-shot MMLU subject) and the seed's in-loop loop over the
same documents with the same model: corpus BPB/CE agree to float32 round-off (the offline
engine packs rows and shares prefixes; the in-loop loop is a plain padded forward), and
every MMLU prediction is the same, so accuracy is equal.
"""

from __future__ import annotations

import json
import math

import pytest

from proctor.cli import main
from proctor.inloop import C4Metric, ICLMetric, build_task
from seed_loop import seed_loop

DOCS = 6
CTX = 512  # three of the first 6 C4 documents span 2+ chunks at this length (9 chunks)
MMLU = "mmlu_abstract_algebra:mc::olmes"


@pytest.mark.slow
def test_inloop_c4_bpb_and_mmlu_accuracy_equal_proctor_run(data_dir, tmp_path):
    import torch

    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source

    out = tmp_path / "run"
    code = main(["run", "--model", "smollm2-135m", "--tasks", "c4_en::bpb", MMLU,
                 "--limit", str(DOCS), "--max-length", str(CTX), "--dtype", "float32",
                 "--data-dir", str(data_dir), "--output", str(out), "--no-progress"])
    assert code == 0
    offline = json.loads((out / "metrics.json").read_text())["tasks"]

    # the model as a training loop holds it: plain transformers, SDPA attention
    loaded = load_model(resolve_source("smollm2-135m"), dtype=torch.float32, device=torch.device("cpu"))
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    assert model.config._attn_implementation == "sdpa"

    c4 = build_task("c4_en", tokenizer, model_ctx_len=CTX, num_samples=DOCS, data_dir=data_dir)
    assert len(c4) > DOCS  # some documents really are chunked
    lm = seed_loop(model, c4, C4Metric())
    print(f"c4_en {DOCS} docs, ctx {CTX}: in-loop bpb {lm['bpb']:.7f} ce {lm['ce_loss']:.7f}; "
          f"proctor run bpb {offline['c4_en::bpb']['metrics']['bpb']['mean']:.7f}")
    c4_offline = offline["c4_en::bpb"]["metrics"]
    assert math.isclose(lm["bpb"], c4_offline["bpb"]["mean"], rel_tol=2e-6)
    assert math.isclose(lm["ce_loss"], c4_offline["ce_loss"]["mean"], rel_tol=2e-6)

    mmlu = build_task(MMLU, tokenizer, model_ctx_len=CTX, limit=DOCS, data_dir=data_dir)
    assert mmlu.metric_type == "acc"
    metric = ICLMetric(metric_type=mmlu.metric_type)
    icl = seed_loop(model, mmlu, metric)
    assert icl["acc"] == offline[MMLU]["metrics"]["acc_raw"]["mean"]
    assert icl["len_norm"] == offline[MMLU]["metrics"]["acc_per_char"]["mean"]
    # the gold answer's bits per byte, a continuous figure, agrees doc for doc on average
    preds = [json.loads(line) for line in (out / "mmlu_abstract_algebra-mc-olmes" / "predictions.jsonl").open()]
    gold_bpb = [p["metrics"]["bits_per_byte_corr"] for p in preds]
    assert len(gold_bpb) == DOCS
    docs = metric.doc_results()
    assert [d.predicted for d in docs] == [p["metrics"]["predicted_index_raw"] for p in preds]
    assert [d.predicted_len_norm for d in docs] == [p["metrics"]["predicted_index_per_char"] for p in preds]
    for doc, pred in zip(docs, preds):
        offline_ll = [choice["sum_logits"] for choice in pred["model_output"]]
        assert doc.loglikelihoods == pytest.approx(offline_ll, abs=1e-4)
    assert math.isclose(icl["bpb_v2"], sum(gold_bpb) / DOCS, rel_tol=1e-5)
