"""Parity with EleutherAI lm-evaluation-harness (HFLM.loglikelihood) on the same model object."""

import pytest

from proctor.backends import load_backend
from proctor.engine import Engine
from proctor.requests import Loglikelihood

from tinylm import build_tiny_model

pytestmark = pytest.mark.slow  # lm-eval (and, for MMLU, the real SmolLM2)

MMLU_SUBJECTS = ("abstract_algebra", "high_school_geography", "philosophy", "anatomy")
ITEMS_PER_SUBJECT = 15


def lm_eval_loglikelihood(backend, requests, *, batch_size, max_length):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=batch_size,
              max_length=max_length)
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation), idx=i)
                 for i, r in enumerate(requests)]
    return lm.loglikelihood(instances, disable_tqdm=True)


def test_tokenization_and_truncation_match_lm_eval_on_a_tiny_model(tmp_path):
    backend = load_backend(str(build_tiny_model(tmp_path / "tiny")), device="cpu", max_length=24)
    question = "Question: Which planet is closest to the sun?\n A. Mercury\n B. Venus\nAnswer:"
    requests = [
        *(Loglikelihood(question, c) for c in (" A", " B", " C", " D")),
        Loglikelihood("Answer: ", "Mercury"),                     # trailing space moves
        Loglikelihood("The quick bro", "wn fox jumps"),           # BPE merge across the boundary
        Loglikelihood("", " Paris is the capital of France"),     # empty context: prefix token
        Loglikelihood("The quick brown fox jumps over the lazy dog. " * 3, "A stitch in time"),  # truncated
        Loglikelihood(question * 2, " Mercury"),                  # truncated, multi-token
    ]
    ours = Engine(backend, batch_size=3, progress=False).run(requests)
    theirs = lm_eval_loglikelihood(backend, requests, batch_size=3, max_length=24)
    for r, mine, (ll, greedy) in zip(requests, ours, theirs):
        assert mine.sum_logits == pytest.approx(ll, abs=1e-5), r
        assert mine.is_greedy == greedy, r


def mmlu_requests(data_dir):
    from proctor.tasks.registry import resolve

    docs = []
    for subject in MMLU_SUBJECTS:
        (task,) = resolve(f"mmlu_{subject}:mc::olmes", num_shots=0)
        docs += task.instances(data_dir, ITEMS_PER_SUBJECT)
    return docs


def test_mmlu_parity_with_lm_eval_on_smollm2(data_dir):
    backend = load_backend("smollm2-135m", device="cpu", dtype="float32", max_length=2048)
    docs = mmlu_requests(data_dir)
    assert len(docs) == 4 * ITEMS_PER_SUBJECT
    requests = [r for d in docs for r in d.requests]
    assert requests[0].continuation == " A" and requests[0].context.endswith("\nAnswer:")

    ours = Engine(backend, batch_size="auto", progress=False).run(requests)
    theirs = lm_eval_loglikelihood(backend, requests, batch_size=16, max_length=2048)

    worst = max(abs(m.sum_logits - ll) for m, (ll, _) in zip(ours, theirs))
    assert worst <= 1e-4
    assert [m.is_greedy for m in ours] == [g for _, g in theirs]
    at = 0
    for doc in docs:
        n = len(doc.continuations)
        mine = [r.sum_logits for r in ours[at:at + n]]
        ref = [ll for ll, _ in theirs[at:at + n]]
        assert mine.index(max(mine)) == ref.index(max(ref)), doc.query_id
        at += n
