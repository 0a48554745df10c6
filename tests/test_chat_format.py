"""Chat-format evaluation: lm-eval's --apply_chat_template layouts, OLMES's use_chat_format,
the lm-eval tokenization policy (BOS, context window) and the chat settings in every key.

Reference renders come from lm-eval's own task objects (tests/lm_eval_tasks.py) with lm-eval's
own `HFLM.apply_chat_template`, and from OLMES's code as quoted in the docstrings.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from proctor.data import load_split
from proctor.engine import Engine
from proctor.engine.chat import ChatTemplate, end_of_turn, render
from proctor.engine.tokens import TokenizationPolicy
from proctor.errors import UserError
from proctor.pipeline import PromptOptions
from proctor.requests import Chat, Generate, Loglikelihood, Message
from proctor.tasks.config import ChatFormat
from proctor.tasks.lm_eval.context import fewshot_context
from proctor.tasks.registry import resolve

from lm_eval_tasks import lm_eval_chat_template, lm_eval_requests, lm_eval_task
from tinylm import CHATML, build_tiny_model, build_tokenizer

LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def task_of(spec, **options):
    (task,) = resolve(spec)
    return PromptOptions(**options).apply(task)


@pytest.fixture(scope="module")
def chat_tokenizer():
    return build_tokenizer(chat=True)


def rendered(policy, inst):
    return [(policy.text(r.context, r.policy), r.continuation) for r in inst.requests]


# ---- lm-eval's layouts, against lm-eval's own fewshot_context ----------------------------

@pytest.mark.slow  # lm-eval
@pytest.mark.parametrize("options", [
    {"chat": True},
    {"chat": True, "fewshot_as_multiturn": False},
    {"chat": True, "system_instruction": "Answer with one letter."},
    {"system_instruction": "Answer with one letter."},            # no template: plain text
])
def test_mmlu_leaderboard_chat_contexts_equal_lm_evals(data_dir, chat_tokenizer, options):
    subject = "high_school_geography"
    splits = {s: load_split("cais/mmlu", subject, s, data_dir) for s in ("test", "dev")}
    lm = lm_eval_task(f"mmlu/default/mmlu_{subject}.yaml", splits, num_fewshot=5)
    chat = options.get("chat", False)
    theirs = lm_eval_requests(
        lm, limit=12, apply_chat_template=chat, fewshot_as_multiturn=options.get("fewshot_as_multiturn", chat),
        system_instruction=options.get("system_instruction"),
        chat_template=lm_eval_chat_template(chat_tokenizer) if chat else None)
    ours = task_of(f"mmlu_{subject}::leaderboard", **options).instances(data_dir, 12)
    policy = TokenizationPolicy(chat_tokenizer, max_length=2048,
                                chat_template=ChatTemplate.of_tokenizer(chat_tokenizer))
    for inst, (_, reqs) in zip(ours, theirs, strict=True):
        assert rendered(policy, inst) == reqs, inst.query_id
    if chat:
        assert theirs[0][1][0][1] == "A"  # no target delimiter before a chat's choices


@pytest.mark.slow  # lm-eval
def test_bbh_chat_contexts_and_settings_equal_lm_evals(data_dir, chat_tokenizer):
    from test_tasks_bbh import local_rows
    from test_tasks_bbh import lm_eval_task as bbh_lm_eval_task

    task = "date_understanding"
    lm = bbh_lm_eval_task(task, local_rows(data_dir, task))
    lm.set_fewshot_seed(1234)
    theirs = lm_eval_requests(lm, limit=4, apply_chat_template=True, fewshot_as_multiturn=True,
                              chat_template=lm_eval_chat_template(chat_tokenizer))
    ours = task_of(f"bbh_{task}:cot::lm_eval", chat=True).instances(data_dir, 4)
    policy = TokenizationPolicy(chat_tokenizer, max_length=2048,
                                chat_template=ChatTemplate.of_tokenizer(chat_tokenizer))
    for inst, (_, (args,)) in zip(ours, theirs, strict=True):
        context, kwargs = args
        assert policy.text(inst.request.context, "lm_eval") == context
        assert inst.request.stop == tuple(kwargs["until"])
    first = ours[0].request.context
    assert [m.role for m in first.messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]


def test_lm_eval_single_turn_and_gen_prefix_layouts():
    """lm-eval's multiturn_to_singleturn and build_qa_turn, by hand: one user message holding
    the shots with their delimiters; a gen_prefix as an assistant turn to continue."""
    shots = [("Q1", "a1"), ("Q2", "a2")]
    single = fewshot_context("Desc\n\n", shots, "Q3", chat=ChatFormat(fewshot_as_multiturn=False))
    assert single == Chat((Message("system", "Desc\n\n"), Message("user", "Q1 a1\n\nQ2 a2\n\nQ3")))
    prefixed = fewshot_context("", shots, "Q3", gen_prefix="Answer:", chat=ChatFormat())
    assert prefixed.messages[-2:] == (Message("user", "Q3"), Message("assistant", "Answer:"))
    assert prefixed.messages[1] == Message("assistant", "Answer: a1") and prefixed.continue_final
    assert fewshot_context("", shots, "Q3", gen_prefix="Answer:") == "Q1 Answer: a1\n\nQ2 Answer: a2\n\nQ3 Answer:"
    assert fewshot_context("D", [], "Q", system_instruction="Be brief.") == "Be brief.\n\nDQ"


# ---- rendering ----------------------------------------------------------------------------

def test_render_is_apply_chat_template_and_continues_a_final_assistant_turn(chat_tokenizer):
    template = ChatTemplate.of_tokenizer(chat_tokenizer)
    chat = Chat((Message("user", "Q"), Message("assistant", "Answer:")), continue_final=True)
    expected = chat_tokenizer.apply_chat_template([m.to_dict() for m in chat.messages], tokenize=False,
                                                  add_generation_prompt=False, continue_final_message=True)
    assert render(chat, template, chat_tokenizer, drop_system_on_error=False) == expected
    assert expected == "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nAnswer:"
    olmes = Chat((Message("user", "Q"),), suffix="Answer:")
    assert render(olmes, template, chat_tokenizer, drop_system_on_error=False) == \
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nAnswer:"


def test_a_template_refusing_the_system_role_is_retried_without_it_only_for_lm_eval(chat_tokenizer):
    strict = ChatTemplate("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
                          + CHATML, "strict.jinja")
    chat = Chat((Message("system", "S"), Message("user", "Q")))
    assert render(chat, strict, chat_tokenizer, drop_system_on_error=True) == \
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(UserError, match="strict.jinja.*refused the prompt"):
        render(chat, strict, chat_tokenizer, drop_system_on_error=False)


def test_end_of_turn_is_read_off_the_template(chat_tokenizer):
    assert end_of_turn(ChatTemplate(CHATML, "t"), chat_tokenizer) == ("<|im_end|>",)
    llama = build_tokenizer()
    llama.add_special_tokens({"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>",
                                                            "<|eot_id|>"]})
    assert end_of_turn(ChatTemplate(LLAMA3, "llama3"), llama) == ("<|eot_id|>",)
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    assert end_of_turn(ChatTemplate(plain, "plain"), chat_tokenizer) == ()


def test_a_chat_generation_stops_at_the_end_of_turn(chat_tokenizer):
    policy = TokenizationPolicy(chat_tokenizer, max_length=64, chat_template=ChatTemplate.of_tokenizer(chat_tokenizer))
    chat = Generate(Chat((Message("user", "Q"),)), stop=("\n\n",))
    assert policy.stop(chat) == ("\n\n", "<|im_end|>")
    assert policy.stop(Generate("Q", stop=("\n\n",))) == ("\n\n",)


def test_a_chat_without_a_template_is_one_clear_error(chat_tokenizer):
    policy = TokenizationPolicy(chat_tokenizer, max_length=64)
    with pytest.raises(UserError, match="no chat template; pass --chat-template"):
        policy.request_windows([Loglikelihood(Chat((Message("user", "Q"),)), "A")])
    with pytest.raises(UserError, match="tokenizer has no chat template"):
        ChatTemplate.resolve(None, build_tokenizer())


# ---- the lm-eval tokenization policy -------------------------------------------------------

def test_bos_follows_lm_eval_for_leaderboard_specs_and_olmes_for_olmes_specs(data_dir):
    """lm-eval 0.4.13's HFLM encodes with the tokenizer's special tokens (BOS for Llama-style
    tokenizers) unless the text starts with the BOS; OLMES never adds special tokens."""
    tok = build_tokenizer(bos=True)
    policy = TokenizationPolicy(tok, max_length=4096)
    (lm_inst,) = task_of("mmlu_astronomy::leaderboard").instances(data_dir, 1)
    (olmes_inst,) = task_of("mmlu_astronomy:mc::olmes").instances(data_dir, 1)
    lm_window, olmes_window = policy.request_windows([lm_inst.requests[0], olmes_inst.requests[0]])
    assert lm_window.inputs[0] == tok.bos_token_id
    assert lm_window.inputs[1:] == tuple(tok(lm_inst.prompt, add_special_tokens=False)["input_ids"])
    assert olmes_window.inputs == tuple(tok(olmes_inst.prompt, add_special_tokens=False)["input_ids"])
    # a text that already starts with the BOS gets no second one; an empty context none either
    starts, empty = policy.request_windows([Loglikelihood("<s>Q:", " A", "lm_eval"), Loglikelihood("", " A", "lm_eval")])
    assert starts.inputs.count(tok.bos_token_id) == 1 and empty.inputs == (tok.bos_token_id,)
    gen = policy.request_generation_contexts([Generate("Q:", policy="lm_eval"), Generate("Q:")])
    assert gen[0].tokens == (tok.bos_token_id, *gen[1].tokens)


def test_each_policy_has_its_own_window():
    tok = build_tokenizer()
    policy = TokenizationPolicy(tok, max_length=8, lm_eval_max_length=256)
    long = "The quick brown fox jumps over the lazy dog. " * 3
    olmes, lm = policy.request_windows([Loglikelihood(long, " A"), Loglikelihood(long, " A", "lm_eval")])
    assert len(olmes.inputs) == 8 and olmes.dropped > 0
    assert lm.dropped == 0 and len(lm.inputs) > 8


@pytest.mark.slow  # lm-eval
def test_token_ids_and_loglikelihoods_equal_lm_evals_with_a_bos_tokenizer(tmp_path, data_dir):
    from lm_eval.api.instance import Instance as LmInstance
    from lm_eval.models.huggingface import HFLM

    from proctor.backends import load_backend

    backend = load_backend(str(build_tiny_model(tmp_path / "bos", bos=True)), device="cpu", max_length=None)
    assert backend.max_length == 4096  # the config's positions, as lm-eval resolves it
    docs = task_of("mmlu_astronomy::leaderboard").instances(data_dir, 3)
    requests = [r for d in docs for r in d.requests]
    lm = HFLM(pretrained=backend.model, tokenizer=backend.tokenizer, batch_size=4)
    assert lm.max_length == backend.max_length
    windows = Engine(backend, progress=False).policy.request_windows(requests)
    for r, w in zip(requests, windows):
        context, continuation = lm._encode_pair(r.context, r.continuation)
        assert w.inputs + w.targets[-1:] == tuple(context + continuation) and w.targets == tuple(continuation)
    ours = Engine(backend, batch_size=4, progress=False).run(requests)
    theirs = lm.loglikelihood([LmInstance("loglikelihood", {}, (r.context, r.continuation), i)
                               for i, r in enumerate(requests)], disable_tqdm=True)
    for mine, (ll, greedy) in zip(ours, theirs):
        assert mine.sum_logits == pytest.approx(ll, abs=1e-5) and mine.is_greedy == greedy


# ---- OLMES chat variants, against renders derived from OLMES's code ------------------------

def test_mmlu_tulu_is_olmes_multiturn_chat(data_dir):
    """allenai/olmes oe_eval/tasks/base_task.py `fewshot_context` (use_chat_format, multiturn)
    and run_eval.py `convert_chat_instance`: the description opens the first user turn, each
    shot's assistant turn is its gold letter, the doc's turn ends "Answer:", continuations lose
    their leading space (no assistant prefix)."""
    (inst,) = task_of("mmlu_abstract_algebra:mc::tulu").instances(data_dir, 1)
    dev = load_split("cais/mmlu", "abstract_algebra", "dev", data_dir)
    (plain,) = task_of("mmlu_abstract_algebra:mc::olmes").instances(data_dir, 1)
    blocks = plain.prompt.split("\n\n")
    description, shot_texts, doc_text = blocks[0] + "\n\n", blocks[1:-1], blocks[-1]
    expected = []
    for i, (shot, row) in enumerate(zip(shot_texts, dev)):
        text, letter = shot.rsplit(" ", 1)
        assert letter == "ABCD"[row["answer"]]
        expected += [Message("user", (description if i == 0 else "") + text), Message("assistant", letter)]
    expected.append(Message("user", doc_text))
    assert inst.prompt == Chat(tuple(expected))
    assert inst.continuations == ("A", "B", "C", "D") and inst.policy == "olmes"


def test_gsm8k_tulu_has_olmes_chat_overrides(data_dir):
    """allenai/olmes oe_eval/tasks/oe_eval_tasks/gsm8k.py chat_overrides: assistant_prefix
    "Answer:" (cut from the user turns, the assistant turns start with it, it follows the
    template), multiturn, stop ["Question:", "</s>", "<|im_end|>"]."""
    (inst,) = task_of("gsm8k::tulu").instances(data_dir, 1)
    chat = inst.request.context
    assert chat.suffix == "Answer:" and not chat.continue_final
    assert [m.role for m in chat.messages] == ["user", "assistant"] * 8 + ["user"]
    assert all(m.content.startswith("Question: ") and "Answer:" not in m.content
               for m in chat.messages if m.role == "user")
    assert all(m.content.startswith("Answer: ") and m.content == m.content.strip()
               for m in chat.messages if m.role == "assistant")
    assert chat.messages[-1].content == "Question: " + load_split("openai/gsm8k", "main", "test", data_dir)[0]["question"]
    assert inst.request.stop == ("Question:", "</s>", "<|im_end|>")
    (olmes_chat,) = task_of("gsm8k::olmes", chat=True).instances(data_dir, 1)
    assert olmes_chat.request.context == chat  # --chat-template on gsm8k::olmes: the class's chat_overrides


def test_olmes_rc_chat_keeps_plain_unconditioned_requests(data_dir):
    """OLMES converts only requests whose context is a chat: the "Answer:" ones keep " text"."""
    (inst,) = task_of("arc_easy:rc::olmes", chat=True).instances(data_dir, 1)
    assert inst.prompt.messages[0].role == "user" and len(inst.prompt.messages) == 1  # OLMES: single turn
    assert all(not c.startswith(" ") for c in inst.continuations)
    assert [r.continuation for r in inst.uncond_requests] == [" " + c for c in inst.continuations]
    assert all(r.context == "Answer:" for r in inst.uncond_requests)


# ---- the chat settings everywhere ----------------------------------------------------------

def test_chat_settings_change_every_key_and_the_fingerprint(tmp_path, data_dir):
    plain = task_of("mmlu_astronomy::leaderboard").instances(data_dir, 1)[0].requests
    multi = task_of("mmlu_astronomy::leaderboard", chat=True).instances(data_dir, 1)[0].requests
    single = task_of("mmlu_astronomy::leaderboard", chat=True, fewshot_as_multiturn=False).instances(data_dir, 1)[0].requests
    system = task_of("mmlu_astronomy::leaderboard", chat=True, system_instruction="Hi").instances(data_dir, 1)[0].requests
    keys = [r[0].key for r in (plain, multi, single, system)]
    assert len(set(keys)) == 4
    assert json.loads(json.dumps(multi[0].to_dict()))["context"]["messages"][0]["role"] == "system"
    from proctor.backends import load_backend

    backend = load_backend(str(build_tiny_model(tmp_path / "chat", chat=True)), device="cpu", max_length=256)
    template = ChatTemplate.of_tokenizer(backend.tokenizer)
    other = dataclasses.replace(template, source=template.source + " ")
    prints = {Engine(backend, progress=False).fingerprint,
              Engine(backend, progress=False, chat_template=template).fingerprint,
              Engine(backend, progress=False, chat_template=other).fingerprint,
              Engine(backend, progress=False, olmes_max_length=128).fingerprint}
    assert len(prints) == 4


def test_prompt_options_are_refused_where_a_protocol_has_none():
    with pytest.raises(UserError, match="system prompt in chat format only"):
        task_of("mmlu_astronomy:mc::olmes", system_instruction="Hi")
    with pytest.raises(UserError, match="has no system instruction"):
        task_of("c4_en::bpb", system_instruction="Hi")
    (ppl,) = resolve("c4_en::bpb")
    assert PromptOptions(chat=True).apply(ppl).config.chat is None  # a document has no prompt to chat


# ---- reasoning spans, options and records --------------------------------------------------

def test_reasoning_spans_go_before_the_answer_is_read():
    from proctor.tasks.generation import without_reasoning

    tags = ("<think>", "</think>")
    assert without_reasoning("<think>7 + 11 = 18? no, 20</think>\nThe answer is 18.", tags) == "The answer is 18."
    assert without_reasoning("just 18", tags) == "just 18"
    assert without_reasoning("a</think>b</think> c", tags) == "c"        # lm-eval: after the last one
    assert without_reasoning("So <think>never closed", tags) == "So "     # unfinished reasoning: no answer
    assert without_reasoning("prompt opened it</think>18", tags) == "18"  # the template wrote <think>


def test_think_tags_read_the_answer_without_reasoning_and_keep_the_raw_text(data_dir):
    from proctor.requests import GenerateResult, Generation

    (task,) = resolve("gsm8k::olmes")
    tagged = PromptOptions(think_tags=("<think>", "</think>")).apply(task)
    assert tagged.config.think_tags == ("<think>", "</think>")
    (inst,) = tagged.instances(data_dir, 1)
    raw = "<think>16 - 3 - 4 = 9 and 9 * 2 = 18</think> I cannot tell."
    result = {inst.request.key: GenerateResult((Generation(raw, 30, "eos"),))}
    scored = tagged.score_docs([inst], result)
    (output,) = scored.records[0].model_output
    assert scored.records[0].metrics["exact_match"] == 0.0 and output.text == raw  # no answer after it
    assert output.details["answer_text"] == "I cannot tell." and output.details["extracted"] != "18"
    assert task.score_docs([inst], result).records[0].metrics["exact_match"] == 1.0  # the reasoning's 18
    (choice,) = resolve("mmlu_astronomy:mc::olmes")
    assert PromptOptions(think_tags=("<think>", "</think>")).apply(choice) is choice  # not a generation task


def test_chat_settings_round_trip_through_the_run_directory(tmp_path, data_dir):
    import proctor

    model = build_tiny_model(tmp_path / "chat", chat=True)
    run = proctor.evaluate(str(model), tasks=["mmlu_astronomy::leaderboard", "gsm8k::tulu"], limit=2,
                           data_dir=data_dir, chat_template=True, fewshot_as_multiturn=False,
                           system_instruction="Be brief.", max_length=1024, cache=False, progress=False,
                           save_requests=True, output=tmp_path / "run")
    config = run.tasks["mmlu_astronomy::leaderboard"].config
    assert config.chat == ChatFormat(fewshot_as_multiturn=False) and config.system_instruction == "Be brief."
    assert run.tasks["gsm8k::tulu"].config.chat == ChatFormat(True, "Answer:")  # its own layout
    first = run.tasks["gsm8k::tulu"]
    assert first.config.system_instruction == "Be brief."
    assert run.model.chat_template == "tokenizer" and len(run.model.chat_template_sha256) == 16
    assert proctor.read_run(tmp_path / "run") == run
    row = json.loads((tmp_path / "run" / "gsm8k-tulu" / "requests.jsonl").read_text().splitlines()[0])
    assert row["request"]["context"]["suffix"] == "Answer:"
    assert row["request"]["rendered_context"].endswith("<|im_start|>assistant\nAnswer:")
    assert row["request"]["stop"] == ["Question:", "</s>", "<|im_end|>"]


def test_chat_options_errors_are_one_clear_line(tmp_path):
    from test_cli_errors import assert_user_error, proctor as run_cli

    out = str(tmp_path / "out")
    assert_user_error(run_cli("run", "--tasks", "mmlu_astronomy::leaderboard", "--fewshot-as-multiturn",
                              "--output", out), "needs a chat template")
    assert_user_error(run_cli("run", "--tasks", "mmlu_astronomy::leaderboard", "--chat-template",
                              str(tmp_path / "none.jinja"), "--output", out), "none.jinja does not exist")
    assert_user_error(run_cli("run", "--tasks", "mmlu_astronomy:mc::olmes", "--system-instruction", "Hi",
                              "--output", out), "system prompt in chat format only")
    done = run_cli("run", "--tasks", "gsm8k::olmes", "--think-tags", "<think>", "--output", out)
    assert done.returncode == 2 and "expected OPEN,CLOSE" in done.stderr
    assert not (tmp_path / "out").exists()


def test_each_spec_gets_its_protocols_context_window(tmp_path, data_dir):
    """Without --max-length: lm-eval-format specs the model's context length (lm-eval's
    resolve_max_length: the tiny Llama's 4096 positions), OLMES specs 2048 (OLMES's default)."""
    import proctor

    model = str(build_tiny_model(tmp_path / "m"))
    both = proctor.evaluate(model, tasks=["mmlu_astronomy::leaderboard", "mmlu_astronomy:mc::olmes"], limit=1,
                            data_dir=data_dir, cache=False, progress=False)
    assert (both.model.max_length, both.model.olmes_max_length) == (4096, 2048)
    olmes = proctor.evaluate(model, tasks=["mmlu_astronomy:mc::olmes"], limit=1, data_dir=data_dir,
                             cache=False, progress=False)
    assert (olmes.model.max_length, olmes.model.olmes_max_length) == (2048, None)
    alone, beside = (run.tasks["mmlu_astronomy:mc::olmes"].records[0] for run in (olmes, both))
    assert [c.sum_logits for c in alone.model_output] == pytest.approx(  # batched with other rows: float noise
        [c.sum_logits for c in beside.model_output], abs=1e-5)
    given = proctor.evaluate(model, tasks=["mmlu_astronomy::leaderboard"], limit=1, data_dir=data_dir,
                             max_length=64, cache=False, progress=False)
    assert given.model.max_length == 64 and any("did not fit in --max-length 64" in w for w in given.warnings)


def test_proctor_prompts_writes_each_chats_rendered_prompt(tmp_path, data_dir, monkeypatch):
    from proctor.cli import main

    model = build_tiny_model(tmp_path / "chat", chat=True)
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(data_dir))
    out = tmp_path / "prompts"
    assert main(["prompts", "--tasks", "mmlu_astronomy::leaderboard", "--limit", "1", "--chat-template",
                 "--no-fewshot-as-multiturn", "--model", str(model), "--output", str(out)]) == 0
    row = json.loads((out / "mmlu_astronomy-leaderboard" / "requests.jsonl").read_text().splitlines()[0])
    messages = row["request"]["context"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]   # single turn
    assert row["request"]["rendered_context"] == (
        f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n<|im_start|>user\n{messages[1]['content']}"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert row["request"]["continuation"] == "A" and row["request"]["policy"] == "lm_eval"
