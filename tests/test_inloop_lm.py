"""In-loop C4 / Paloma: chunking, the batch contract, and CE/BPB against hand computation."""

import json
import logging
import math
import pickle

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from proctor.data.corpora import PALOMA_SOURCES, Document
from proctor.inloop.lm import C4English, LMChunkDataset, Paloma
from proctor.inloop.lm_metric import C4Metric, PalomaMetric
from seed_loop import seed_loop
from tinylm import build_tiny_model, build_tokenizer

TINY_DOCS = [
    "Paris is the capital of France.",
    # several times longer than the chunks below: more than three chunks
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "Question: Which planet is closest to the sun? Answer: Mercury. Berlin is the capital of Germany.",
    "",
    "Caf\u00e9 \u00fcber na\u00efve \u2713 \u2014 multi-byte text.",
    "x",
]
CTX = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    return model, AutoTokenizer.from_pretrained(directory)


def text_tokens(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def hand_chunks(tokens, prefix, ctx):
    """The seed's rule written out: targets in blocks of ctx, context = the token before."""
    return [([prefix if k == 0 else tokens[k - 1]] + tokens[k : k + ctx][:-1], tokens[k : k + ctx])
            for k in range(0, len(tokens), ctx)]


def hand_totals(model, tokenizer, texts, ctx):
    """NLL (plain forward per chunk, log_softmax, pick targets), scored tokens, bytes."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    nll, tokens, n_bytes = 0.0, 0, 0
    with torch.no_grad():
        for text in texts:
            ids = text_tokens(tokenizer, text)
            for inputs, targets in hand_chunks(ids, prefix, ctx):
                logits = model(input_ids=torch.tensor([inputs])).logits[0]
                logp = torch.log_softmax(logits.double(), dim=-1)
                nll -= float(logp[torch.arange(len(targets)), torch.tensor(targets)].sum())
            tokens += len(ids)
            n_bytes += len(text.encode("utf-8"))
    return nll, tokens, n_bytes


def run_metric(model, task, metric, batch_size=3, indices=None):
    loader = DataLoader(task, batch_size=batch_size, sampler=indices, collate_fn=task.collate_fn)
    with torch.no_grad():
        for batch in loader:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            metric.update(batch, logits)
    return metric


def items_by_doc(task):
    by_doc = {}
    for i in range(len(task)):
        by_doc.setdefault(task[i]["doc_id"], []).append(task[i])
    return by_doc


# ---- chunking --------------------------------------------------------------------------------

def test_chunks_score_every_text_token_once_from_eos(tiny):
    _, tokenizer = tiny
    assert tokenizer.bos_token_id is None  # the tiny tokenizer has only EOS
    task = LMChunkDataset([Document(t, str(i), "t") for i, t in enumerate(TINY_DOCS)], tokenizer, CTX)
    scored = [t for t in TINY_DOCS if t]
    assert task.num_documents_read == 5 and [d.text for d in task.scored_documents] == scored
    assert sorted(set(task.documents)) == [0, 1, 2, 3]  # the empty document has no items
    by_doc = items_by_doc(task)
    assert len(by_doc[1]) > 3  # the long document spans more than three chunks
    for doc_id, text in enumerate(scored):
        ids = text_tokens(tokenizer, text)
        chunks = by_doc[doc_id]  # items of one document stay in chunk order (stable sort)
        assert [(c["input_ids"], c["labels"]) for c in chunks] == hand_chunks(ids, tokenizer.eos_token_id, CTX)
        assert [t for c in chunks for t in c["labels"]] == ids  # every token once, no EOS target
        assert chunks[0]["input_ids"][0] == tokenizer.eos_token_id
        for prev, nxt in zip(chunks, chunks[1:]):
            assert nxt["input_ids"][0] == prev["labels"][-1]  # one shared context token
        for c in chunks:
            assert len(c["labels"]) <= CTX and c["input_ids"][1:] == c["labels"][:-1]
        assert [c["bytes"] for c in chunks] == [0] * (len(chunks) - 1) + [len(text.encode("utf-8"))]
    assert task.total_bytes == sum(len(t.encode("utf-8")) for t in TINY_DOCS)
    assert task.num_tokens == sum(len(text_tokens(tokenizer, t)) for t in TINY_DOCS)


def test_bos_tokenizer_starts_documents_with_bos():
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"bos_token": "<s>"})
    bos = tokenizer.bos_token_id
    assert bos is not None and bos != tokenizer.eos_token_id
    task = LMChunkDataset([Document(t, "", "t") for t in TINY_DOCS], tokenizer, CTX)
    firsts = {}
    for i in range(len(task)):
        firsts.setdefault(task[i]["doc_id"], task[i])
    assert all(item["input_ids"][0] == bos for item in firsts.values())
    assert all(bos not in task[i]["labels"] and tokenizer.eos_token_id not in task[i]["labels"]
               for i in range(len(task)))


def test_items_are_longest_first_and_collate_per_the_batch_contract(tiny):
    _, tokenizer = tiny
    task = LMChunkDataset([Document(t, "", "t") for t in TINY_DOCS], tokenizer, CTX)
    lengths = [len(task[i]["input_ids"]) for i in range(len(task))]
    assert lengths == sorted(lengths, reverse=True)
    items = [task[i] for i in (0, len(task) - 1, len(task) - 2)]
    batch = task.collate_fn(items)
    assert set(batch) == {"input_ids", "attention_mask", "labels", "item_id", "num_items", "doc_id", "bytes"}
    assert all(v.dtype == torch.long for v in batch.values())
    width = max(len(i["input_ids"]) for i in items)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape == (3, width)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        assert batch["input_ids"][row, :n].tolist() == item["input_ids"]
        assert batch["input_ids"][row, n:].eq(task.pad_token_id).all()
        assert batch["labels"][row, :n].tolist() == item["labels"]
        assert batch["labels"][row, n:].eq(-100).all()
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (width - n)
    assert batch["item_id"].tolist() == [0, len(task) - 1, len(task) - 2]
    assert batch["num_items"].tolist() == [len(task)] * 3
    assert batch["doc_id"].tolist() == [i["doc_id"] for i in items]
    assert batch["bytes"].tolist() == [i["bytes"] for i in items]


def test_model_ctx_len_must_be_positive(tiny):
    with pytest.raises(ValueError, match="model_ctx_len"):
        LMChunkDataset([Document("a", "", "t")], tiny[1], 0)


# ---- CE / BPB ---------------------------------------------------------------------------------

def test_metric_equals_hand_computation_on_tiny_documents(tiny):
    model, tokenizer = tiny
    task = LMChunkDataset([Document(t, "", "t") for t in TINY_DOCS], tokenizer, CTX)
    metric = run_metric(model, task, C4Metric())
    nll, tokens, n_bytes = hand_totals(model, tokenizer, TINY_DOCS, CTX)
    totals = metric.totals()
    assert totals["tokens"] == tokens and totals["bytes"] == n_bytes
    assert totals["nll"] == pytest.approx(nll, rel=1e-5)
    result = metric.compute()
    assert set(result) == {"ce_loss", "bpb"}
    assert result["ce_loss"] == pytest.approx(nll / tokens, rel=1e-5)
    assert result["bpb"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-5)
    assert metric.compute() == result  # compute does not consume the sums
    assert metric.nll.dtype == torch.float64


@pytest.mark.slow  # heavy: over 3 s
def test_seed_c4_example_loop_runs_unchanged(tiny, data_dir):
    model, tokenizer = tiny
    device = "cpu"
    task = C4English(tokenizer, num_samples=12, model_ctx_len=256, data_dir=data_dir)
    results = seed_loop(model, task, C4Metric(), device)
    texts = [d.text for d in task.scored_documents]
    assert len(texts) == 12 and max(task.documents) == 11
    assert len(task) > 12  # some documents span several chunks
    nll, tokens, n_bytes = hand_totals(model, tokenizer, texts, 256)
    assert results["ce_loss"] == pytest.approx(nll / tokens, rel=1e-5)
    assert results["bpb"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-5)


@pytest.mark.slow  # heavy: over 3 s
def test_partial_pass_and_repeated_chunks_are_refused(tiny):
    model, tokenizer = tiny
    task = LMChunkDataset([Document(t, "", "t") for t in TINY_DOCS], tokenizer, CTX)
    with pytest.raises(ValueError, match="no chunks were scored"):
        C4Metric().compute()
    partial = run_metric(model, task, C4Metric(), indices=list(range(len(task) - 1)))
    with pytest.raises(ValueError, match="1 of .* chunks were never scored"):
        partial.compute()
    world = next(w for w in (3, 4, 5, 7) if len(task) % w)  # DistributedSampler must pad
    padded = C4Metric()
    for rank in range(world):
        sampler = DistributedSampler(task, num_replicas=world, rank=rank, shuffle=False)
        run_metric(model, task, padded, indices=list(sampler))
    with pytest.raises(ValueError, match="scored more than once.*DocumentSampler"):
        padded.compute()
    padded.reset()
    run_metric(model, task, padded)
    assert padded.compute() == run_metric(model, task, C4Metric()).compute()


def test_metric_checks_its_inputs_and_keeps_float64(tiny):
    model, tokenizer = tiny
    task = LMChunkDataset([Document("Paris is the capital.", "", "t")], tokenizer, CTX)
    batch = task.collate_fn([task[0]])
    metric = C4Metric().to("cpu").to(torch.float32)
    assert metric.nll.dtype == torch.float64 and metric.tokens.dtype == torch.int64
    with pytest.raises(ValueError, match="do not match labels"):
        metric.update(batch, torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match="missing bytes"):
        metric.update({k: v for k, v in batch.items() if k != "bytes"}, torch.zeros(1, 1, 5))
    assert {"nll", "tokens", "bytes"} <= set(dict(metric.named_buffers()))


@pytest.mark.slow
def test_real_c4_documents_with_smollm2(data_dir, tmp_path):
    """8 real C4 validation documents (the first 12 less those over 1,800 characters, to keep
    the CPU time down), the real model, chunks of 64 so documents span several chunks."""
    from proctor.backends.hf import load_backend
    from proctor.data.corpora import c4_documents

    docs = [d for d in c4_documents(data_dir, 12) if len(d.text) < 1800]
    assert len(docs) == 8
    path = tmp_path / "c4.jsonl"
    path.write_text("".join(json.dumps({"text": d.text, "url": d.native_id}) + "\n" for d in docs))
    backend = load_backend("smollm2-135m", device="cpu", dtype="float32")
    model, tokenizer = backend.model, backend.tokenizer
    ctx = 64
    task = C4English(tokenizer, num_samples=8, model_ctx_len=ctx, path=path)
    texts = [d.text for d in task.scored_documents]
    assert texts == [d.text for d in docs]
    assert max(task.documents.count(d) for d in range(8)) >= 3  # several chunks per document
    first = min(i for i in range(len(task)) if task[i]["doc_id"] == 0)
    assert task[first]["input_ids"][0] == tokenizer.bos_token_id
    metric = run_metric(model, task, C4Metric(), batch_size=8)
    nll, tokens, n_bytes = hand_totals(model, tokenizer, texts, ctx)
    totals = metric.totals()
    assert totals["tokens"] == tokens and totals["bytes"] == n_bytes
    assert totals["nll"] == pytest.approx(nll, rel=1e-4)
    result = metric.compute()
    assert result["bpb"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-4)
    assert 0.5 < result["bpb"] < 1.5 and 2.0 < result["ce_loss"] < 4.5  # a trained small model on web text


# ---- Paloma -----------------------------------------------------------------------------------

class FakePalomaHub:
    def __init__(self):
        self.tokens = []
        self.configs = []

    def __call__(self, path, name=None, split=None, streaming=False, token=None):
        assert path == "allenai/paloma" and streaming
        self.tokens.append(token)
        self.configs.append((name, split))
        return ({"text": "" if i == 1 else f"{name} {split} text number {i}.", "id": f"{name}-{i}"}
                for i in range(50))


@pytest.fixture
def paloma_hub(monkeypatch, tmp_path):
    import datasets

    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    hub = FakePalomaHub()
    monkeypatch.setattr(datasets, "load_dataset", hub)
    return hub


def test_paloma_defaults_to_all_16_sources_first_n_each(tiny, paloma_hub):
    task = Paloma(tiny[1], num_samples=3, model_ctx_len=16)
    assert paloma_hub.configs == [(s, "val") for s in PALOMA_SOURCES]
    assert task.num_documents_read == 48
    assert [d.source for d in task.scored_documents] == [s for s in PALOMA_SOURCES for _ in range(2)]
    assert [d.native_id for d in task.scored_documents[:2]] == ["4chan_meta_sep-0", "4chan_meta_sep-2"]


def test_paloma_token_goes_to_the_hub_and_nowhere_else(tiny, paloma_hub, caplog):
    secret = "hf_SECRET_token_123"
    with caplog.at_level(logging.DEBUG):
        task = Paloma(tiny[1], dataset_name=["ptb", "wikitext_103"], split="test", num_samples=4,
                      model_ctx_len=16, token=secret)
    assert paloma_hub.tokens == [secret, secret]
    assert paloma_hub.configs == [("ptb", "test"), ("wikitext_103", "test")]
    assert secret not in caplog.text
    assert secret not in repr(task) and secret not in str(vars(task))
    assert secret.encode() not in pickle.dumps(task)
    assert secret not in json.dumps(task.config())
    assert "token" not in task.config()
    clone = pickle.loads(pickle.dumps(task))
    assert len(clone) == len(task) and clone[0] == task[0]


def test_paloma_rejects_bad_selections_before_downloading(tiny, paloma_hub):
    from proctor.errors import UserError

    with pytest.raises(UserError, match="unknown Paloma source 'nope'"):
        Paloma(tiny[1], dataset_name=["ptb", "nope"])
    with pytest.raises(UserError, match="unknown Paloma split"):
        Paloma(tiny[1], dataset_name="ptb", split="validation")
    with pytest.raises(ValueError, match="repeats"):
        Paloma(tiny[1], dataset_name=["ptb", "ptb"])
    assert paloma_hub.configs == []


@pytest.mark.slow  # heavy: over 3 s
def test_paloma_local_fixture_metric_equals_hand_computation(tiny, data_dir):
    model, tokenizer = tiny
    task = Paloma(tokenizer, dataset_name="c4_100_domains", num_samples=4, model_ctx_len=512,
                  data_dir=data_dir)
    texts = [d.text for d in task.scored_documents]
    assert len(texts) == 4 and task.split == "val" and len(task) > 4
    metric = run_metric(model, task, PalomaMetric(), batch_size=4)
    nll, tokens, n_bytes = hand_totals(model, tokenizer, texts, 512)
    result = metric.compute()
    assert result["ce_loss"] == pytest.approx(nll / tokens, rel=1e-5)
    assert result["bpb"] == pytest.approx(nll / math.log(2) / n_bytes, rel=1e-5)


def test_paloma_metric_is_byte_weighted_over_sources_not_averaged(tiny, paloma_hub):
    model, tokenizer = tiny
    both = run_metric(model, Paloma(tokenizer, dataset_name=["ptb", "gab"], num_samples=6, model_ctx_len=8),
                      PalomaMetric()).totals()
    parts = [run_metric(model, Paloma(tokenizer, dataset_name=s, num_samples=6, model_ctx_len=8),
                        PalomaMetric()).totals() for s in ("ptb", "gab")]
    assert both["bytes"] == sum(p["bytes"] for p in parts) and both["tokens"] == sum(p["tokens"] for p in parts)
    assert both["nll"] == pytest.approx(sum(p["nll"] for p in parts), rel=1e-9)


@pytest.mark.slow  # heavy: over 3 s
def test_c4_english_defaults_and_document_limit(tiny, data_dir):
    tokenizer = tiny[1]
    task = C4English(tokenizer, data_dir=data_dir)  # seed defaults: 1,000 documents, 2,048 predictions
    assert task.num_samples == 1000 and task.model_ctx_len == 2048
    assert task.num_documents_read == len(task.scored_documents) == 1000
    assert max(len(task[i]["labels"]) for i in range(len(task))) == 2048
    small = C4English(tokenizer, num_samples=100, model_ctx_len=2048, data_dir=data_dir)
    assert [d.text for d in small.scored_documents] == [d.text for d in task.scored_documents[:100]]
