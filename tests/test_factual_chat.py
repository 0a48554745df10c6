"""The factual probe with `--chat-template`: the seed's no-template protocol stays the default;
a chat run renders each prompt as one user turn, stops at the template's end of turn, reads
hidden states at the rendered prompt's last token, records the template everywhere, is
reported by validate as a protocol difference, and never resumes or mixes another format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from proctor.backends.hf import HFBackend
from proctor.cli import main
from proctor.engine import Engine, ResultCache
from proctor.engine.chat import ChatTemplate
from proctor.engine.tokens import TokenizationPolicy
from proctor.errors import UserError
from proctor.factual.bank import read_bank, write_bank
from proctor.factual.generate import factual_request, generate
from proctor.factual.hidden import extract_hidden, load_hidden
from proctor.factual.metrics import check_same_prompts
from proctor.factual.prompts import build_prompt, template_record
from proctor.factual.validate import validate_generations
from proctor.outputs.hidden_states import INDEX
from tinylm import build_tiny_model, build_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUERY = "Which planet is closest to the sun?"
SEED_ANCHOR = f"Question: {QUERY}\nAnswer with only the shortest correct answer.\nAnswer:"
CHAT_ANCHOR = f"<|im_start|>user\n{SEED_ANCHOR}<|im_end|>\n<|im_start|>assistant\n"
SEED_FIELDS = ["query_id", "fact_id", "condition_family", "model", "prompt", "raw_response", "generated_tokens",
               "finish_reason"]
# a template of another layout, as a user's Jinja file
INST = ("{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}"
        "{% if add_generation_prompt %} Answer briefly:{% endif %}")


def make_rows(n: int) -> list[dict]:
    families = ("anchor", "paraphrase", "reverse", "crosslingual")
    return [{"query_id": f"query_{i:04d}", "fact_id": f"fact_{i // 2:04d}", "condition_family": families[i % 4],
             "query": QUERY + " Paris is the capital of France." * (i * 7 % 5), "use_for_main_forward": True}
            for i in range(n)]


def load(directory: Path) -> SimpleNamespace:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    return SimpleNamespace(dir=directory, model=model, tokenizer=AutoTokenizer.from_pretrained(str(directory)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny Llama with a ChatML template and EOS <|im_end|>."""
    return load(build_tiny_model(tmp_path_factory.mktemp("chat") / "model", chat=True))


@pytest.fixture(scope="module")
def tiny_bos(tmp_path_factory):
    """The same with a BOS token its tokenizer prepends (which ChatML does not write)."""
    return load(build_tiny_model(tmp_path_factory.mktemp("chat_bos") / "model", chat=True, bos=True))


@pytest.fixture(scope="module")
def chatml(tiny) -> ChatTemplate:
    return ChatTemplate.resolve(None, tiny.tokenizer)


@pytest.fixture
def inst_file(tmp_path) -> Path:
    path = tmp_path / "inst.jinja"
    path.write_text(INST, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def result_cache_dir(tmp_path, monkeypatch):
    """The commands' result cache in the test's own directory: nothing leaks between tests."""
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "proctor-cache"))


def engine_of(lm, template: ChatTemplate | None = None, cache: ResultCache | None = None, **options) -> Engine:
    return Engine(HFBackend(lm.model, lm.tokenizer, identity="tiny"), cache=cache, progress=False,
                  chat_template=template, **options)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def recording(engine: Engine) -> list[tuple[int, ...]]:
    """The prompt tokens of every row the engine's backend generates from, as they come."""
    inputs: list[tuple[int, ...]] = []
    real = engine.backend.generate

    def generate_rows(rows, on_done=None, slots=None):
        inputs.extend(tuple(r.tokens) for r in rows)
        return real(rows, on_done, slots)

    engine.backend.generate = generate_rows
    return inputs


def dying(engine: Engine, after: int) -> Engine:
    """The engine's backend fails once `after` requests are done (each stored in the cache first)."""
    real = engine.backend.generate

    def generate_rows(rows, on_done=None, slots=None):
        done = []

        def counted(i, samples):
            on_done(i, samples)
            done.append(i)
            if len(done) == after:
                raise RuntimeError("killed")
        return real(rows, counted, slots)

    engine.backend.generate = generate_rows
    return engine


def greedy_alone(model: Any, ids: list[int], eos: list[int]) -> list[int]:
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=24, pad_token_id=eos[0], eos_token_id=eos)
    new = out[0, len(ids):].tolist()
    return new[:next((k for k, t in enumerate(new) if t in eos), len(new))]


# ---------------------------------------------------------------- prompts


def test_the_default_keeps_the_seeds_prompt_bytes(tiny):
    rows = make_rows(4)
    engine = engine_of(tiny)
    prompts = [engine.policy.text(factual_request(r, chat=False).context) for r in rows]
    assert prompts == [build_prompt(r) for r in rows] and prompts[0] == SEED_ANCHOR
    assert template_record(None) is None


def chat_prompt(row, template, tokenizer) -> str:
    """The text a chat-format query's generation reads, as the engine renders it."""
    policy = TokenizationPolicy(tokenizer, max_length=2048, chat_template=template)
    return policy.text(factual_request(row, chat=True).context)


def test_a_chat_prompt_is_one_user_turn_with_the_generation_prompt(tiny, chatml, inst_file):
    anchor, paraphrase = make_rows(2)
    assert chat_prompt(anchor, chatml, tiny.tokenizer) == CHAT_ANCHOR
    assert chat_prompt(paraphrase, chatml, tiny.tokenizer) == (
        f"<|im_start|>user\n{paraphrase['query']}\nAnswer:<|im_end|>\n<|im_start|>assistant\n")
    messages = [{"role": "user", "content": build_prompt(anchor)}]
    assert CHAT_ANCHOR == tiny.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inst = ChatTemplate.resolve(str(inst_file), tiny.tokenizer)
    assert chat_prompt(anchor, inst, tiny.tokenizer) == f"[INST] {SEED_ANCHOR} [/INST] Answer briefly:"
    assert template_record(chatml) == {"origin": "tokenizer", "digest": chatml.digest}
    assert template_record(inst) == {"origin": str(inst_file), "digest": inst.digest} != template_record(chatml)
    request = factual_request(anchor, chat=True)
    assert request.policy == "olmes" and request.max_prompt_tokens == 192 and request.max_gen_toks == 24


def test_the_end_of_turn_is_a_stop_string_of_chat_requests(tiny, chatml, inst_file):
    row = make_rows(1)[0]
    chat, seed = factual_request(row, chat=True), factual_request(row, chat=False)
    assert chat.stop == seed.stop == ()
    assert engine_of(tiny, chatml).policy.stop(chat) == ("<|im_end|>",)
    assert engine_of(tiny).policy.stop(seed) == ()  # the seed's protocol: the model's EOS only
    # a model whose EOS is not the template's end of turn still stops there
    tok = build_tokenizer(chat=True)
    tok.eos_token = "<|endoftext|>"
    assert TokenizationPolicy(tok, max_length=2048, chat_template=ChatTemplate.resolve(None, tok)).stop(chat) == (
        "<|im_end|>",)
    # a template that ends turns with no special token adds no stop
    inst = ChatTemplate.resolve(str(inst_file), tiny.tokenizer)
    assert engine_of(tiny, inst).policy.stop(chat) == ()


# ---------------------------------------------------------------- generation


def test_a_default_run_writes_the_seeds_rows_from_the_seeds_tokens(tiny_bos, tmp_path):
    rows = make_rows(5)
    engine = engine_of(tiny_bos, batch_size=2)
    inputs = recording(engine)
    generate(rows, engine, tmp_path / "gen.jsonl", model_name="tiny")
    got = read_jsonl(tmp_path / "gen.jsonl")
    assert [list(g) for g in got] == [SEED_FIELDS] * 5
    assert [g["prompt"] for g in got] == [build_prompt(r) for r in rows] and got[0]["prompt"] == SEED_ANCHOR
    bos = tiny_bos.tokenizer.bos_token_id
    assert sorted(inputs) == sorted(tuple(tiny_bos.tokenizer(g["prompt"])["input_ids"]) for g in got)
    assert all(ids[0] == bos for ids in inputs)  # the tokenizer's special tokens, as before
    assert json.loads((tmp_path / "gen.provenance.json").read_text())["chat_template"] is None


def test_a_chat_run_renders_records_and_generates_from_the_template_tokens(tiny_bos, tmp_path):
    tok = tiny_bos.tokenizer
    template = ChatTemplate.resolve(None, tok)
    rows = make_rows(5)
    engine = engine_of(tiny_bos, template, batch_size=2)
    inputs = recording(engine)
    stats = generate(rows, engine, tmp_path / "gen.jsonl", model_name="tiny")
    got = read_jsonl(tmp_path / "gen.jsonl")
    assert (stats.generated, stats.cached) == (5, 0) and got[0]["prompt"] == CHAT_ANCHOR
    record = {"origin": "tokenizer", "digest": template.digest}
    assert json.loads((tmp_path / "gen.provenance.json").read_text())["chat_template"] == record
    for row, g in zip(rows, got):
        assert list(g) == [*SEED_FIELDS, "chat_template"] and g["chat_template"] == record
        assert g["prompt"] == chat_prompt(row, template, tok)
        ids = tok(g["prompt"], add_special_tokens=False)["input_ids"]
        assert ids[0] != tok.bos_token_id and tuple(ids) in inputs  # no BOS the template does not write
        new = greedy_alone(tiny_bos.model, ids, [tok.eos_token_id])
        assert g["raw_response"] == tok.decode(new, skip_special_tokens=True)


def test_a_chat_reply_ends_at_the_templates_end_of_turn(tiny, tmp_path):
    """A model whose EOS is not the template's end of turn, made to say <|im_end|> mid-reply:
    transformers' own greedy run (EOS only) goes on after it; the probe's reply ends there."""
    lm = load(tiny.dir)  # a copy of its own: its head is changed below
    tok, model = lm.tokenizer, lm.model
    eot, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    tok.eos_token = "<|endoftext|>"
    model.generation_config.eos_token_id = eot
    template = ChatTemplate.resolve(None, tok)
    rows = make_rows(4)
    ids = [tok(chat_prompt(r, template, tok), add_special_tokens=False)["input_ids"] for r in rows]
    with torch.no_grad():  # <|im_end|> wins where the token row 0 says 4th would, and a little more often
        head = model.get_output_embeddings().weight
        head[im_end] = 1.05 * head[greedy_alone(model, ids[0], [eot])[3]]
    free = [greedy_alone(model, x, [eot]) for x in ids]
    at = free[0].index(im_end)
    assert 0 < at < 23  # transformers itself does not stop at the end of turn

    generate(rows, engine_of(lm, template), tmp_path / "gen.jsonl", model_name="m")
    got = read_jsonl(tmp_path / "gen.jsonl")
    assert (got[0]["generated_tokens"], got[0]["finish_reason"]) == (at, "stop")
    assert got[0]["raw_response"] == tok.decode(free[0][:at]) and "<|im_end|>" not in got[0]["raw_response"]
    for g, x, run in zip(got, ids, free):
        reply = greedy_alone(model, x, [eot, im_end])
        assert g["raw_response"] == tok.decode(reply, skip_special_tokens=True)
        ended = im_end in run[:24] or len(run) < 24
        assert (g["generated_tokens"], g["finish_reason"]) == (len(reply), "stop" if ended else "length")


# ---------------------------------------------------------------- resume and existing files


def test_a_killed_run_resumes_only_under_its_own_prompt_format(tiny, chatml, inst_file, tmp_path):
    rows = make_rows(6)  # 6 distinct prompts
    inst = ChatTemplate.resolve(str(inst_file), tiny.tokenizer)
    whole = tmp_path / "whole.jsonl"
    generate(rows, engine_of(tiny, chatml, batch_size=2), whole, model_name="tiny")

    path = tmp_path / "cache.sqlite"
    out = tmp_path / "gen.jsonl"
    with pytest.raises(RuntimeError, match="killed"):
        generate(rows, dying(engine_of(tiny, chatml, ResultCache(path), batch_size=2), 2), out, model_name="tiny")
    assert not out.exists()  # nothing half-written

    for other in (None, inst):  # the cache holds the chat run's replies under its template only
        elsewhere = tmp_path / f"other-{other is None}.jsonl"
        stats = generate(rows, engine_of(tiny, other, ResultCache(path), batch_size=2), elsewhere,
                         model_name="tiny")
        assert (stats.cached, stats.generated) == (0, 6)
        assert {json.dumps(g.get("chat_template")) for g in read_jsonl(elsewhere)} == {
            json.dumps(template_record(other))}

    stats = generate(rows, engine_of(tiny, chatml, ResultCache(path), batch_size=2), out, model_name="tiny")
    assert (stats.cached, stats.generated) == (2, 4)
    assert out.read_bytes() == whole.read_bytes()


def test_a_finished_file_of_another_format_is_refused(tiny, chatml, inst_file, tmp_path):
    rows = make_rows(4)
    inst = ChatTemplate.resolve(str(inst_file), tiny.tokenizer)
    seed, chat = tmp_path / "seed.jsonl", tmp_path / "chat.jsonl"
    generate(rows, engine_of(tiny), seed, model_name="tiny")
    generate(rows, engine_of(tiny, chatml), chat, model_name="tiny")
    before = seed.read_bytes(), chat.read_bytes()
    # seed rows carry no chat_template field (as files written before the field): the seed's protocol
    assert all("chat_template" not in g for g in read_jsonl(seed))
    with pytest.raises(UserError, match="holds generations made with no chat template .*not chat template "
                                        "tokenizer.*another --name"):
        generate(rows, engine_of(tiny, chatml), seed, model_name="tiny")
    with pytest.raises(UserError, match="made with chat template tokenizer .*, not no chat template"):
        generate(rows, engine_of(tiny), chat, model_name="tiny")
    with pytest.raises(UserError, match=f"made with chat template tokenizer .*, not chat template {inst_file}"):
        generate(rows, engine_of(tiny, inst), chat, model_name="tiny")
    assert (seed.read_bytes(), chat.read_bytes()) == before  # refused before touching them
    for path, template in ((seed, None), (chat, chatml)):
        engine = engine_of(tiny, template)
        inputs = recording(engine)
        again = generate(rows, engine, path, model_name="tiny")
        assert again.already_complete and again.generated == 0 and inputs == []


# ---------------------------------------------------------------- hidden states


def extract(engine: Engine, rows: list[dict], out: Path):
    return extract_hidden(rows, engine, out, model_name="tiny", bank_version="v")


def test_chat_states_are_read_at_the_rendered_prompts_last_token(tiny_bos, tmp_path):
    tok = tiny_bos.tokenizer
    template = ChatTemplate.resolve(None, tok)
    rows = make_rows(5)
    engine = engine_of(tiny_bos, template, batch_size=2)
    index = extract(engine, rows, tmp_path / "h")
    assert engine.stats.batches_run == 3  # padded batches
    assert index.chat_template == {"origin": "tokenizer", "digest": template.digest}
    assert json.loads((tmp_path / "h" / INDEX).read_text())["chat_template"] == index.chat_template
    states = load_hidden(tmp_path / "h")
    assert states.index.chat_template == index.chat_template
    seed = extract(engine_of(tiny_bos), rows, tmp_path / "seed")
    seed_states = load_hidden(tmp_path / "seed")
    with torch.inference_mode():
        for i, row in enumerate(rows):
            ids = tok(chat_prompt(row, template, tok), add_special_tokens=False)["input_ids"]
            assert ids[0] != tok.bos_token_id  # no BOS the template does not write
            assert ids[-3:] == tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"][-3:]
            out = tiny_bos.model(torch.tensor([ids]), output_hidden_states=True)
            for layer in index.layers:
                alone = out.hidden_states[layer + 1][0, -1].to(torch.float16).numpy()
                assert abs(states.layers[layer][i].astype("float32") - alone.astype("float32")).max() < 2e-3
                assert not np.array_equal(states.layers[layer][i], seed_states.layers[layer][i])
    assert seed.chat_template is None


def test_hidden_states_of_another_format_are_never_resumed(tiny, chatml, inst_file, tmp_path):
    rows = make_rows(4)
    out = tmp_path / "h"
    path = tmp_path / "cache.sqlite"
    seed = extract(engine_of(tiny, cache=ResultCache(path)), rows, out)
    assert seed.chat_template is None
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(UserError, match=r"holds a finished extraction made with no chat template \(the seed's "
                                        r"protocol\), not chat template tokenizer"):
        extract(engine_of(tiny, chatml), rows, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # the cache never hands one format's states to another
    chat = engine_of(tiny, chatml, ResultCache(path))
    extract(chat, rows, tmp_path / "chat")
    assert chat.stats.batches_run > 0
    inst = ChatTemplate.resolve(str(inst_file), tiny.tokenizer)
    with pytest.raises(UserError, match=f"holds a finished extraction made with chat template tokenizer .*not "
                                        f"chat template {inst_file}"):
        extract(engine_of(tiny, inst), rows, tmp_path / "chat")

    data = json.loads((out / INDEX).read_text())
    del data["chat_template"]  # an index written before the field: the seed's protocol
    (out / INDEX).write_text(json.dumps({**data, "complete": False}))
    with pytest.raises(UserError, match="holds an unfinished extraction made with no chat template"):
        extract(engine_of(tiny, chatml), rows, out)
    rerun = engine_of(tiny, cache=ResultCache(path))
    again = extract(rerun, rows, out)
    assert again.complete and again.chat_template is None and rerun.stats.batches_run == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != INDEX} == {
        k: v for k, v in before.items() if k != INDEX}


def test_metrics_refuse_scored_rows_and_states_of_two_formats(chatml):
    record = template_record(chatml)
    hidden: Any = SimpleNamespace(index=SimpleNamespace(chat_template=None))
    check_same_prompts([{"query_id": "q", "label": "correct"}], hidden, "scored")
    with pytest.raises(UserError, match="scored holds rows generated with chat template tokenizer .*hidden states "
                                        "were extracted with no chat template"):
        check_same_prompts([{"query_id": "q", "label": "correct", "chat_template": record}], hidden, "scored")
    hidden.index.chat_template = record
    check_same_prompts([{"query_id": "q", "label": "correct", "chat_template": record}], hidden, "scored")


# ---------------------------------------------------------------- validate


def generation(row: dict, record: Any = None, prompt: str | None = None) -> dict:
    out = {"query_id": row["query_id"], "fact_id": row["fact_id"], "condition_family": row["condition_family"],
           "model": "m", "prompt": prompt or build_prompt(row), "raw_response": " Paris", "generated_tokens": 2,
           "finish_reason": "stop"}
    return out if record is None else {**out, "chat_template": record}


def test_validate_reports_a_chat_run_as_a_protocol_difference(tiny, chatml):
    rows = make_rows(6)
    seed = validate_generations(rows, [generation(r) for r in rows])
    assert seed.ok and seed.lines() == [] and seed.protocol_differences() == [] and seed.chat_template is None
    record = template_record(chatml)
    chat = validate_generations(rows, [generation(r, record, chat_prompt(r, chatml, tiny.tokenizer))
                                       for r in rows])
    assert chat.ok and chat.lines() == [] and chat.chat_template == record
    assert chat.protocol_differences() == [
        f"protocol difference: prompts were rendered with chat template tokenizer (digest {chatml.digest}) "
        "instead of the seed's no-template prompt; numbers are not comparable with the seed's protocol"]


def test_validate_refuses_mixed_formats_and_chat_prompts_without_the_query(tiny, chatml, inst_file):
    rows = make_rows(6)
    record = template_record(chatml)
    chats = [generation(r, record, chat_prompt(r, chatml, tiny.tokenizer)) for r in rows]
    mixed = validate_generations(rows, chats[:4] + [generation(r) for r in rows[4:]])
    assert not mixed.ok and mixed.chat_template is None
    assert mixed.lines() == [f"mixed prompt formats: 4 with chat template tokenizer (digest {chatml.digest}); "
                             "2 with no chat template (the seed's protocol); every row must be generated "
                             "under one protocol (regenerate the file)"]
    inst = template_record(ChatTemplate.resolve(str(inst_file), tiny.tokenizer))
    two = validate_generations(rows, chats[:5] + [{**chats[5], "chat_template": inst}])
    assert not two.ok and two.lines()[0].startswith("mixed prompt formats: 5 with chat template tokenizer")

    damaged = [dict(g) for g in chats]
    damaged[0]["prompt"] = "<|im_start|>user\nSomething else<|im_end|>\n<|im_start|>assistant\n"
    damaged[1]["chat_template"] = "tokenizer"
    damaged[2]["chat_template"] = {"origin": "tokenizer"}
    del damaged[3]["chat_template"]  # a rendered prompt that does not say so
    report = validate_generations(rows, damaged)
    assert not report.ok
    assert report.prompt_mismatch == ["query_0000", "query_0001", "query_0002", "query_0003"]  # 1, 2: unreadable
    assert report.bad_types == ["line 2: field 'chat_template' is str, expected dict or null",
                                "line 3: field 'chat_template' must hold the template's 'origin' and 'digest' "
                                "as strings"]


# ---------------------------------------------------------------- the command line


def bank_rows(facts: int) -> list[dict]:
    """A small valid bank: each fact's anchor and paraphrase."""
    rows = []
    for f in range(facts):
        for family, query in (("anchor", f"Which city is capital {f}?"), ("paraphrase", f"Capital {f} is where?")):
            rows.append({
                "query_id": f"query_{f:03d}_{family}", "fact_id": f"fact_{f:03d}", "relation": "capital",
                "relation_id": "P36", "condition_family": family, "language": "en", "target_slot": "object",
                "answer_type": "place", "answer_granularity": "entity", "answer_in_subject_surface": False,
                "query": query, "aliases": ["Paris"], "distractors": ["Berlin"], "use_for_main_forward": True,
                "use_for_reverse_analysis": False, "use_for_recognition_analysis": False,
                "subject": f"Country {f}"})
    return rows


def cli(*args: Any) -> int:
    return main(["factual", *map(str, args)])


def test_the_commands_take_a_chat_template_and_record_it(tiny, chatml, tmp_path, capsys):
    write_bank(tmp_path / "bank.jsonl", bank_rows(6))
    bank = read_bank(tmp_path / "bank.jsonl")
    out = tmp_path / "out"
    common = ["--bank", tmp_path / "bank.jsonl", "--output-dir", out, "--no-progress"]
    model = ["--model", tiny.dir, "--name", "chat", "--device", "cpu", "--dtype", "float32"]
    assert cli("generate", *common, *model, "--chat-template") == 0
    assert "protocol difference: prompts were rendered with chat template tokenizer" in capsys.readouterr().err
    gens = read_jsonl(out / "generations" / "chat.jsonl")
    record = {"origin": "tokenizer", "digest": chatml.digest}
    assert [g["chat_template"] for g in gens] == [record] * len(bank.rows)
    assert gens[0]["prompt"] == ("<|im_start|>user\nQuestion: Which city is capital 0?\nAnswer with only the "
                                 "shortest correct answer.\nAnswer:<|im_end|>\n<|im_start|>assistant\n")

    assert cli("validate", "--bank", tmp_path / "bank.jsonl", "--generations", out / "generations" / "chat.jsonl") == 0
    said = capsys.readouterr().out
    assert "ready to score" in said and "not comparable with the seed's protocol" in said

    assert cli("score", *common, "--generations", out / "generations" / "chat.jsonl") == 0
    assert "not comparable with the seed's protocol" in capsys.readouterr().out
    scored = read_jsonl(out / "scored" / "chat.scored.jsonl")
    assert {json.dumps(s["chat_template"]) for s in scored} == {json.dumps(record)}
    assert json.loads((out / "scored" / "chat.summary.json").read_text())["chat_template"] == record

    assert cli("hidden", *common, *model, "--chat-template") == 0
    assert json.loads((out / "hidden" / "chat" / INDEX).read_text())["chat_template"] == record
    assert cli("metrics", *common, "--name", "chat", "--bootstrap", 5) == 0
    assert "not comparable with the seed's protocol" in capsys.readouterr().out
    assert json.loads((out / "metrics" / "chat.json").read_text())["chat_template"] == record

    (out / "metrics" / "chat.json").unlink()
    shutil.rmtree(out / "hidden" / "chat")
    assert cli("hidden", *common, *model) == 0  # without the template: another format under the same name
    assert cli("metrics", *common, "--name", "chat", "--bootstrap", 5) == 2
    assert "hidden states were extracted with no chat template" in capsys.readouterr().err


def test_run_with_a_template_file_records_it_in_every_file(tiny, inst_file, tmp_path, capsys):
    write_bank(tmp_path / "bank.jsonl", bank_rows(6))
    out = tmp_path / "out"
    assert cli("run", "--bank", tmp_path / "bank.jsonl", "--output-dir", out, "--no-progress", "--model", tiny.dir,
               "--name", "inst", "--device", "cpu", "--dtype", "float32", "--bootstrap", 5,
               "--chat-template", inst_file) == 0
    record = template_record(ChatTemplate.from_file(inst_file))
    gens = read_jsonl(out / "generations" / "inst.jsonl")
    assert {json.dumps(g["chat_template"]) for g in gens} == {json.dumps(record)}
    assert gens[1]["prompt"] == "[INST] Capital 0 is where?\nAnswer: [/INST] Answer briefly:"
    assert json.loads((out / "scored" / "inst.summary.json").read_text())["chat_template"] == record
    assert load_hidden(out / "hidden" / "inst").index.chat_template == record
    assert json.loads((out / "metrics" / "inst.json").read_text())["chat_template"] == record


def test_a_seed_run_and_a_chat_run_under_one_name_are_refused(tiny, tmp_path, capsys):
    write_bank(tmp_path / "bank.jsonl", bank_rows(3))
    common = ["--bank", tmp_path / "bank.jsonl", "--output-dir", tmp_path / "out", "--no-progress",
              "--model", tiny.dir, "--name", "t", "--device", "cpu", "--dtype", "float32"]
    assert cli("generate", *common) == 0
    gens = read_jsonl(tmp_path / "out" / "generations" / "t.jsonl")
    assert [list(g) for g in gens] == [SEED_FIELDS] * 6
    assert "protocol difference" not in capsys.readouterr().err
    assert cli("validate", "--bank", tmp_path / "bank.jsonl",
               "--generations", tmp_path / "out" / "generations" / "t.jsonl") == 0
    assert "protocol difference" not in capsys.readouterr().out
    assert cli("generate", *common, "--chat-template") == 2
    assert "already holds generations made with no chat template" in capsys.readouterr().err
    assert cli("hidden", *common) == 0
    assert cli("hidden", *common, "--chat-template") == 2
    assert "made with no chat template (the seed's protocol), not chat template tokenizer" in capsys.readouterr().err
    assert cli("run", *common, "--chat-template", tmp_path / "missing.jinja") == 2
    assert f"chat template file {tmp_path / 'missing.jinja'} does not exist" in capsys.readouterr().err


def test_a_tokenizer_without_a_template_needs_a_file(tmp_path, inst_file, capsys):
    plain = build_tiny_model(tmp_path / "plain")
    write_bank(tmp_path / "bank.jsonl", bank_rows(2))
    common = ["--bank", tmp_path / "bank.jsonl", "--output-dir", tmp_path / "out", "--no-progress",
              "--model", plain, "--name", "p", "--device", "cpu", "--dtype", "float32"]
    assert cli("generate", *common, "--chat-template") == 2
    assert "tokenizer has no chat template; pass --chat-template FILE" in capsys.readouterr().err
    assert not (tmp_path / "out" / "generations").exists()
    assert cli("generate", *common, "--chat-template", inst_file) == 0
    assert read_jsonl(tmp_path / "out" / "generations" / "p.jsonl")[0]["chat_template"]["origin"] == str(inst_file)


# ---------------------------------------------------------------- the real model


@pytest.mark.slow  # loads the real SmolLM2
def test_smollm2_chat_generations_equal_transformers_own_chat_generation(tmp_path):
    from proctor.backends.models import load_model
    from proctor.backends.sources import resolve_source

    loaded = load_model(resolve_source("smollm2-135m"), dtype=torch.float32, device=torch.device("cpu"))
    tok = loaded.tokenizer
    template = ChatTemplate.resolve(None, tok)
    rows = [{"query_id": "q1", "fact_id": "f1", "condition_family": "anchor",
             "query": "What is the capital of France?"},
            {"query_id": "q2", "fact_id": "f2", "condition_family": "paraphrase",
             "query": "The capital city of Germany is called what?"}]
    engine = Engine(HFBackend(loaded.model, tok, identity=loaded.identity), progress=False, chat_template=template)
    assert engine.policy.stop(factual_request(rows[0], chat=True)) == ("<|im_end|>",)
    generate(rows, engine, tmp_path / "gen.jsonl", model_name="smollm2")
    got = read_jsonl(tmp_path / "gen.jsonl")
    for row, g in zip(rows, got):
        messages = [{"role": "user", "content": build_prompt(row)}]
        assert g["prompt"] == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert g["prompt"].startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
        assert g["prompt"].endswith(f"{build_prompt(row)}<|im_end|>\n<|im_start|>assistant\n")
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        ids = list(ids if isinstance(ids, list) else ids["input_ids"])  # a BatchEncoding in newer transformers
        new = greedy_alone(loaded.model, ids, [tok.convert_tokens_to_ids("<|im_end|>")])
        assert g["raw_response"] == tok.decode(new, skip_special_tokens=True)
        assert "<|im_end|>" not in g["raw_response"]
    assert "stop" in {g["finish_reason"] for g in got}
    assert validate_generations(rows, got).protocol_differences()


def test_chat_replies_without_a_leading_space_are_not_taken_for_stripped_ones():
    """A chat reply opens its own turn, so the seed's "no response starts with whitespace"
    check (for prompts ending in "Answer:") does not apply to rows rendered with a template."""
    from proctor.factual.validate import validate_generations

    bank = [{"query_id": f"q{i}", "fact_id": f"f{i}", "condition_family": "anchor"} for i in range(25)]
    rows = [{"query_id": f"q{i}", "raw_response": "Paris", "chat_template": {"origin": "tokenizer", "digest": "d"}}
            for i in range(25)]
    assert not validate_generations(bank, rows).stripped
    assert validate_generations(bank, [{k: v for k, v in r.items() if k != "chat_template"} for r in rows]).stripped
