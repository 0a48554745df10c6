"""Factual-probe generation through the engine: output fields, EOS handling, left truncation,
resume from the result cache after a kill."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from proctor.backends.hf import HFBackend
from proctor.engine import Engine, ResultCache
from proctor.errors import UserError
from proctor.factual.generate import factual_request, generate, provenance_path
from proctor.factual.prompts import DECODING, build_prompt
from proctor.requests import Generate, Generation
from tinylm import build_tiny_model

REPO = Path(__file__).resolve().parents[1]
FIELDS = {"query_id": str, "fact_id": str, "condition_family": str, "model": str, "prompt": str,
          "raw_response": str, "generated_tokens": int, "finish_reason": str}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_rows(n: int) -> list[dict]:
    """Bank-like rows whose prompts differ in length, so the plan reorders them (some rows
    share a prompt: the engine generates it once)."""
    families = ("anchor", "paraphrase", "reverse", "crosslingual")
    return [{"query_id": f"query_{i:04d}", "fact_id": f"fact_{i // 2:04d}", "condition_family": families[i % 4],
             "query": "Which planet is closest to the sun?" + " Paris is the capital of France." * (i * 7 % 5),
             "use_for_main_forward": True} for i in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    return SimpleNamespace(dir=directory, model=model, tokenizer=AutoTokenizer.from_pretrained(str(directory)))


def engine_of(tiny, cache=None, **options) -> Engine:
    return Engine(HFBackend(tiny.model, tiny.tokenizer, identity="tiny"), cache=cache, progress=False, **options)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def greedy_alone(tiny, ids: list[int]) -> list[int]:
    """The new tokens of one unpadded transformers greedy run (the tiny model's EOS never comes up in 24 steps)."""
    with torch.inference_mode():
        out = tiny.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  do_sample=False, max_new_tokens=24, pad_token_id=tiny.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist()


def test_rows_match_transformers_greedy_runs_in_bank_order(tiny, tmp_path):
    rows = make_rows(9)
    out = tmp_path / "gen.jsonl"
    stats = generate(rows, engine_of(tiny, batch_size=4), out, model_name="tiny", provenance={"bank_version": "v"})
    got = read_jsonl(out)
    assert [g["query_id"] for g in got] == [r["query_id"] for r in rows]
    assert (stats.rows, stats.generated, stats.cached, stats.already_complete) == (9, 7, 0, False)  # 7 distinct
    for row, g in zip(rows, got):
        assert {k: type(v) for k, v in g.items()} == FIELDS
        assert g["prompt"] == build_prompt(row)
        assert (g["fact_id"], g["condition_family"], g["model"]) == (row["fact_id"], row["condition_family"], "tiny")
        new = greedy_alone(tiny, tiny.tokenizer(g["prompt"])["input_ids"])
        assert g["raw_response"] == tiny.tokenizer.decode(new, skip_special_tokens=True)
        assert (g["generated_tokens"], g["finish_reason"]) == (24, "length")
    assert stats.new_tokens == 7 * 24
    provenance = json.loads(provenance_path(out).read_text())
    assert provenance["dtype"] == "float32" and provenance["device"] == "cpu"
    assert provenance["fingerprint"].startswith("tiny|dtype=float32") and provenance["bank_version"] == "v"
    assert provenance["decoding"]["max_new_tokens"] == 24 and "dtype" not in provenance["decoding"]


def test_requests_follow_the_seeds_decoding_and_tokenization():
    row = make_rows(1)[0]
    request = factual_request(row, chat=False)
    assert request == Generate(build_prompt(row), max_gen_toks=24, max_prompt_tokens=192, policy="lm_eval")
    assert not request.do_sample and request.repeats == 1
    # a request without a prompt limit keeps the key it always had (earlier caches stay valid)
    assert "max_prompt_tokens" not in Generate("x").to_dict()
    assert Generate("x").key != Generate("x", max_prompt_tokens=5).key
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        Generate("x", max_prompt_tokens=0)


class ScriptedBackend:
    """Every backend's side of the contract, with fixed samples: how rows map engine samples."""

    shares_prefixes, max_length, fingerprint, dtype, device = False, 2048, "scripted", "float32", "cpu"

    def __init__(self, tokenizer, samples: dict[str, Generation]):
        self.tokenizer, self.samples = tokenizer, samples

    def config_record(self):
        return {}

    def token_budget(self):
        return 1024

    def score(self, rows, prefix=(), parents=()):
        raise AssertionError("nothing is scored")

    def generate(self, rows, on_done=None, slots=None):
        out = [(self.samples[self.tokenizer.decode(list(r.tokens))],) for r in rows]
        for i, samples in enumerate(out):
            if on_done:
                on_done(i, samples)
        return out


def test_an_ended_sample_is_a_stop_and_its_end_token_is_not_counted(tiny, tmp_path):
    rows = make_rows(3)
    prompts = [build_prompt(r) for r in rows]
    samples = {prompts[0]: Generation("  Paris \n", 5, "eos"),     # never stripped
               prompts[1]: Generation(" Mercury" * 12, 24, "length"),
               prompts[2]: Generation("", 1, "eos")}
    generate(rows, Engine(ScriptedBackend(tiny.tokenizer, samples), progress=False), tmp_path / "g.jsonl",
             model_name="m")
    got = read_jsonl(tmp_path / "g.jsonl")
    assert [(g["raw_response"], g["generated_tokens"], g["finish_reason"]) for g in got] == [
        ("  Paris \n", 4, "stop"), (" Mercury" * 12, 24, "length"), ("", 0, "stop")]


def test_a_stop_token_from_the_generation_config_ends_the_response(tiny, tmp_path):
    rows = make_rows(2)
    first = greedy_alone(tiny, tiny.tokenizer(build_prompt(rows[0]))["input_ids"])
    tiny.model.generation_config.eos_token_id = first[2]
    try:
        generate(rows, engine_of(tiny), tmp_path / "gen.jsonl", model_name="tiny")
    finally:
        tiny.model.generation_config.eos_token_id = tiny.tokenizer.eos_token_id
    got = read_jsonl(tmp_path / "gen.jsonl")[0]
    assert (got["generated_tokens"], got["finish_reason"]) == (2, "stop")
    assert got["raw_response"] == tiny.tokenizer.decode(first[:2])


def test_long_prompts_keep_their_last_192_tokens_whatever_the_window(tiny, tmp_path):
    long_row = {**make_rows(1)[0], "query": " ".join(f"Paris {i} is the capital." for i in range(80))}
    rows = [long_row, make_rows(2)[1]]
    full = tiny.tokenizer(build_prompt(long_row))["input_ids"]
    assert len(full) > DECODING.max_prompt_len
    engine = engine_of(tiny)
    (context, short) = engine.policy.request_generation_contexts([factual_request(r, chat=False) for r in rows])
    assert context.tokens == tuple(full[-DECODING.max_prompt_len:])
    assert context.dropped == len(full) - DECODING.max_prompt_len and short.dropped == 0

    generate(rows, engine, tmp_path / "gen.jsonl", model_name="tiny")
    got = read_jsonl(tmp_path / "gen.jsonl")[0]
    assert got["prompt"] == build_prompt(long_row)
    tail = greedy_alone(tiny, full[-DECODING.max_prompt_len:])
    assert got["raw_response"] == tiny.tokenizer.decode(tail, skip_special_tokens=True)


def test_bad_banks_and_files_are_user_errors(tiny, tmp_path):
    rows = make_rows(3)
    engine = engine_of(tiny)
    with pytest.raises(UserError, match="query_0001 occurs more than once"):
        generate(rows + rows[1:2], engine, tmp_path / "g.jsonl", model_name="t")
    (tmp_path / "g.jsonl").write_text("not json\n")
    with pytest.raises(UserError, match="exists but is not a generations file"):
        generate(rows, engine, tmp_path / "g.jsonl", model_name="t")
    assert (tmp_path / "g.jsonl").read_text() == "not json\n"


CHILD = """
import json, os, signal, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from proctor.backends.hf import HFBackend
from proctor.engine import Engine, ResultCache
from proctor.factual.generate import generate
model_dir, rows_path, out, cache, kill_at = sys.argv[1:]
backend = HFBackend(AutoModelForCausalLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir),
                    identity="tiny")
real = backend.generate
def dying(rows, on_done=None, slots=None):
    done = []
    def counted(i, samples):
        on_done(i, samples)  # stored in the cache first
        done.append(i)
        if len(done) == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
    return real(rows, counted, slots)
backend.generate = dying
engine = Engine(backend, batch_size=4, cache=ResultCache(cache), progress=False)
generate(json.loads(Path(rows_path).read_text()), engine, Path(out), model_name="tiny")
"""


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_a_killed_run_resumes_from_the_cache_to_the_same_bytes(tiny, tmp_path):
    rows = make_rows(18)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    whole = tmp_path / "whole.jsonl"
    generate(rows, engine_of(tiny, batch_size=4), whole, model_name="tiny")

    out, cache = tmp_path / "resumed.jsonl", tmp_path / "cache.sqlite"
    child = subprocess.run([sys.executable, "-c", CHILD, str(tiny.dir), str(tmp_path / "rows.json"), str(out),
                            str(cache), "7"], cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert not out.exists() and not provenance_path(out).exists()  # nothing half-written

    distinct = {build_prompt(r) for r in rows}
    stats = generate(rows, engine_of(tiny, ResultCache(cache), batch_size=4), out, model_name="tiny")
    assert (stats.cached, stats.generated) == (7, len(distinct) - 7)
    assert out.read_bytes() == whole.read_bytes()

    again = generate(rows, engine_of(tiny, ResultCache(cache), batch_size=4), out, model_name="tiny")
    assert again.already_complete and again.generated == 0
    assert out.read_bytes() == whole.read_bytes()
    with pytest.raises(UserError, match="other queries or another model"):
        generate(rows[:5], engine_of(tiny), out, model_name="tiny")
