"""proctor's ICLMetric returns ai2-olmo-eval's `ICLMetric.compute` keys with its values, row for row.

The reference is ai2-olmo-eval 0.9.0's own metric (imported here only: it needs torchmetrics,
`bash scripts/install --for-tests` installs both). Both metrics get the same logits for the
same rows: random documents of 2 to 5 continuations, each 1 to 4 tokens, contexts of
different lengths, continuations with and without a leading space, in batches of 3.
ai2-olmo-eval's batch names where a continuation starts (`ctx_len`) and its tokens
(`continuation`); proctor's pre-shifted `labels` hold the same tokens at the same logits.
"""

from __future__ import annotations

import random

import pytest
import torch

from proctor.inloop.batching import collate_items
from proctor.inloop.icl_metric import ICLMetric

olmo_eval_metrics = pytest.importorskip("olmo_eval.metrics", reason="ai2-olmo-eval (with torchmetrics) is not "
                                        "installed: bash scripts/install --for-tests")
VOCAB = 11
# some with no leading space ("éé", "zz"); none of one character alone, whose length without it is 0
WORDS = (" A", " B", " yes", " no", " Bumblebee", " é", "éé", " xy", "zz", " the cat sat")


def random_rows(seed: int, documents: int) -> list[dict]:
    """Rows of `documents` documents: (context length, continuation tokens and text, ids), in document order."""
    rng = random.Random(seed)
    rows = []
    for doc_id in range(documents):
        n = rng.randint(2, 5)
        label = rng.randrange(n)
        for cont_id in range(n):
            text = rng.choice(WORDS)
            rows.append({"doc_id": doc_id, "cont_id": cont_id, "label_id": label, "num_choices": n, "text": text,
                         "context": rng.randint(1, 6), "targets": [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))]})
    return rows


def proctor_item(r: dict, item_id: int, num_items: int) -> dict:
    """A row in proctor's batch contract: its tokens as pre-shifted labels after `context` inputs."""
    length = r["context"] + len(r["targets"]) - 1
    labels = [-100] * length
    labels[r["context"] - 1:] = r["targets"]
    text = r["text"]
    return {"input_ids": [1] * length, "labels": labels, "item_id": item_id, "num_items": num_items,
            "doc_id": r["doc_id"], "cont_id": r["cont_id"], "label_id": r["label_id"],
            "num_choices": r["num_choices"], "cont_str_len": len(text), "cont_byte_len": len(text.encode()),
            "cont_byte_len_no_leading_space": len(text[1:].encode())}


def reference_batch(r: dict, bpb: bool) -> dict:
    """A row in ai2-olmo-eval's batch contract; its bpb datasets keep the gold alone, as continuation 0."""
    text = r["text"]
    cont_id, label_id = (0, 0) if bpb else (r["cont_id"], r["label_id"])
    return {"doc_id": torch.tensor([r["doc_id"]]), "cont_id": torch.tensor([cont_id]),
            "label_id": torch.tensor([label_id]), "ctx_len": torch.tensor([r["context"]]),
            "cont_len": torch.tensor([len(r["targets"])]), "continuation": torch.tensor([r["targets"]]),
            "cont_str_len": torch.tensor([len(text)]), "cont_byte_len": torch.tensor([len(text.encode())]),
            "cont_str_len_no_leading_space": torch.tensor([len(text) - 1]),
            "cont_byte_len_no_leading_space": torch.tensor([len(text[1:].encode())])}


def feed(rows: list[dict], metric_type: str, seed: int) -> tuple[dict, dict]:
    """Run both metrics over the rows with the same random logits (proctor's 3 rows a batch); return both results."""
    gen = torch.Generator().manual_seed(seed)
    mine, theirs = ICLMetric(metric_type), olmo_eval_metrics.ICLMetric(metric_type)
    row_logits = []
    for start in range(0, len(rows), 3):
        items = [proctor_item(r, start + i, len(rows)) for i, r in enumerate(rows[start:start + 3])]
        batch = collate_items(items, pad_token_id=0)
        logits = torch.randn(len(items), batch["input_ids"].shape[1], VOCAB, generator=gen) * 3
        mine.update(batch, logits)
        row_logits.extend(logits)
    bpb = metric_type in ("bpb", "ce_loss")   # the gold continuation alone
    for r, logits in zip(rows, row_logits):
        if not bpb or r["cont_id"] == r["label_id"]:
            theirs.update(reference_batch(r, bpb), logits.unsqueeze(0))
    return mine.compute(), {k: float(v) for k, v in theirs.compute().items()}


@pytest.mark.parametrize("metric_type", ["acc", "len_norm", "bpb", "ce_loss", "f1"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_key_ai2_olmo_eval_returns_is_returned_with_its_value(metric_type, seed):
    # some continuations begin with no space ("é", "z"): "no leading space" drops the first character all the same
    rows = random_rows(seed, 40)
    mine, theirs = feed(rows, metric_type, seed)
    assert set(theirs) <= set(mine), set(theirs) - set(mine)
    for key, value in theirs.items():
        assert mine[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
