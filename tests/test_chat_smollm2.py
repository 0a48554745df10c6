"""Must-show: chat-format runs of the embedded SmolLM2-Instruct equal lm-eval 0.4.13's with
--apply_chat_template --fewshot_as_multiturn, request for request and score for score."""

from __future__ import annotations

import pytest

import proctor
from proctor.backends import load_backend
from proctor.data import load_split

from lm_eval_tasks import lm_eval_chat_template, lm_eval_requests, lm_eval_task

pytestmark = pytest.mark.slow  # the real model and lm-eval


@pytest.fixture(scope="module")
def smollm2():
    return load_backend("smollm2-135m", device="cpu", dtype="float32", max_length=None)


def lm_eval_lm(backend):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=8)


def test_mmlu_leaderboard_in_chat_format_equals_lm_eval(smollm2, data_dir):
    from lm_eval.api.instance import Instance

    subject, n = "astronomy", 8
    assert smollm2.max_length == 8192  # lm-eval's context length for SmolLM2 (its config)
    splits = {s: load_split("cais/mmlu", subject, s, data_dir) for s in ("test", "dev")}
    task = lm_eval_task(f"mmlu/default/mmlu_{subject}.yaml", splits, num_fewshot=5)
    theirs = lm_eval_requests(task, limit=n, apply_chat_template=True, fewshot_as_multiturn=True,
                              chat_template=lm_eval_chat_template(smollm2.tokenizer))
    run = proctor.evaluate(smollm2, tasks=[f"mmlu_{subject}::leaderboard"], limit=n, data_dir=data_dir,
                           chat_template=True, fewshot_as_multiturn=True, cache=False, progress=False)
    assert run.model.chat_template == "tokenizer" and run.tasks[f"mmlu_{subject}::leaderboard"].config.chat
    records = run.tasks[f"mmlu_{subject}::leaderboard"].records
    lm = lm_eval_lm(smollm2)
    args = [a for _, reqs in theirs for a in reqs]
    assert args[0][0].startswith("<|im_start|>system\nThe following are multiple choice questions")
    assert args[0][0].endswith("<|im_start|>assistant\n") and args[0][1] == "A"
    lls = lm.loglikelihood([Instance("loglikelihood", {}, a, i) for i, a in enumerate(args)], disable_tqdm=True)
    ours = [c.sum_logits for r in records for c in r.model_output]
    assert len(ours) == len(lls) == 4 * n
    assert max(abs(m - ll) for m, (ll, _) in zip(ours, lls)) <= 1e-4


def test_bbh_in_chat_format_generates_lm_evals_greedy_text(smollm2, data_dir):
    from lm_eval.api.instance import Instance

    from proctor.engine import Engine
    from proctor.engine.chat import ChatTemplate
    from test_tasks_bbh import lm_eval_task as bbh_task, local_rows

    name, n = "sports_understanding", 3
    task = bbh_task(name, local_rows(data_dir, name))
    task.set_fewshot_seed(1234)
    theirs = lm_eval_requests(task, limit=n, apply_chat_template=True, fewshot_as_multiturn=True,
                              chat_template=lm_eval_chat_template(smollm2.tokenizer))
    (ours,) = proctor.pipeline.plan([f"bbh_{name}:cot::lm_eval"], data_dir, n,
                                    proctor.pipeline.PromptOptions(chat=True)).tasks.values()
    engine = Engine(smollm2, progress=False, chat_template=ChatTemplate.of_tokenizer(smollm2.tokenizer))
    for inst, (_, (args,)) in zip(ours.instances, theirs, strict=True):
        assert engine.policy.text(inst.request.context, "lm_eval") == args[0]
    texts = [r.samples[0].text for r in engine.generate([inst.request for inst in ours.instances])]
    reference = lm_eval_lm(smollm2).generate_until(
        [Instance("generate_until", {}, a, i) for i, (_, (a,)) in enumerate(theirs)], disable_tqdm=True)
    assert texts == reference
