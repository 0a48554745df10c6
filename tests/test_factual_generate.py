"""Factual-probe generation: output fields, EOS handling, left truncation, resume after a kill."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from proctor.errors import UserError
from proctor.factual.generate import batch_plan, encode_prompts, generate
from proctor.factual.prompts import DECODING, build_prompt
from tinylm import build_tiny_model

REPO = Path(__file__).resolve().parents[1]
FIELDS = {"query_id": str, "fact_id": str, "condition_family": str, "model": str, "prompt": str,
          "raw_response": str, "generated_tokens": int, "finish_reason": str}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_rows(n: int) -> list[dict]:
    """Bank-like rows whose prompts differ in length, so the plan reorders them."""
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


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def greedy_alone(tiny, ids: list[int]) -> list[int]:
    """The new tokens of one unpadded greedy run (the tiny model's EOS never comes up in 24 steps)."""
    with torch.inference_mode():
        out = tiny.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  do_sample=False, max_new_tokens=24, pad_token_id=tiny.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist()


def test_rows_match_unpadded_single_runs_in_bank_order(tiny, tmp_path):
    rows = make_rows(9)
    stats = generate(rows, tiny.model, tiny.tokenizer, tmp_path / "gen.jsonl", model_name="tiny",
                     batch_size=4, progress=False)
    got = read_jsonl(tmp_path / "gen.jsonl")
    assert [g["query_id"] for g in got] == [r["query_id"] for r in rows]
    assert (stats.rows, stats.batches, stats.generated_rows, stats.already_complete) == (9, 3, 9, False)
    assert not (tmp_path / "gen.jsonl.partial").exists()
    for row, g in zip(rows, got):
        assert {k: type(v) for k, v in g.items()} == FIELDS
        assert g["prompt"] == build_prompt(row)
        assert (g["fact_id"], g["condition_family"], g["model"]) == (row["fact_id"], row["condition_family"], "tiny")
        new = greedy_alone(tiny, tiny.tokenizer(g["prompt"])["input_ids"])
        assert g["raw_response"] == tiny.tokenizer.decode(new, skip_special_tokens=True)
        assert (g["generated_tokens"], g["finish_reason"]) == (24, "length")
    assert stats.new_tokens == 9 * 24


class ScriptedModel:
    """Answers each prompt with a fixed token script, padding after EOS as HF generate does."""

    dtype = torch.float32
    device = torch.device("cpu")

    def __init__(self, tokenizer, scripts: dict[str, list[int]]):
        self.tokenizer, self.scripts = tokenizer, scripts
        self.generation_config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id)

    def generate(self, *, input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id, **_):
        new = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            script = self.scripts[self.tokenizer.decode([t for t, m in zip(ids, mask) if m])][:max_new_tokens]
            stop = next((k for k, t in enumerate(script) if t in eos_token_id), None)
            if stop is not None:
                script = script[:stop + 1] + [pad_token_id] * (len(script) - stop - 1)
            new.append(script)
        width = max(len(s) for s in new)
        new = [s + [pad_token_id] * (width - len(s)) for s in new]
        return torch.cat([input_ids, torch.tensor(new)], dim=1)


def test_eos_cuts_the_response_which_is_never_stripped(tiny, tmp_path):
    tok = tiny.tokenizer
    eos = tok.eos_token_id
    rows = make_rows(3)
    prompts = [build_prompt(r) for r in rows]
    answer = tok.encode("  Paris \n", add_special_tokens=False)
    scripts = {prompts[0]: answer + [eos] + tok.encode(" more", add_special_tokens=False),
               prompts[1]: (tok.encode(" Mercury", add_special_tokens=False) * 30)[:24],
               prompts[2]: [eos] * 24}
    generate(rows, ScriptedModel(tok, scripts), tok, tmp_path / "gen.jsonl", model_name="m", progress=False)
    got = read_jsonl(tmp_path / "gen.jsonl")
    assert [(g["raw_response"], g["generated_tokens"], g["finish_reason"]) for g in got] == [
        ("  Paris \n", len(answer), "stop"),
        (tok.decode(scripts[prompts[1]]), 24, "length"),
        ("", 0, "stop"),
    ]


def test_a_stop_token_from_the_generation_config_ends_the_response(tiny, tmp_path):
    rows = make_rows(2)
    first = greedy_alone(tiny, tiny.tokenizer(build_prompt(rows[0]))["input_ids"])
    tiny.model.generation_config.eos_token_id = first[2]
    try:
        generate(rows, tiny.model, tiny.tokenizer, tmp_path / "gen.jsonl", model_name="tiny", progress=False)
    finally:
        tiny.model.generation_config.eos_token_id = tiny.tokenizer.eos_token_id
    got = read_jsonl(tmp_path / "gen.jsonl")[0]
    assert (got["generated_tokens"], got["finish_reason"]) == (2, "stop")
    assert got["raw_response"] == tiny.tokenizer.decode(first[:2])


def test_long_prompts_keep_their_end(tiny, tmp_path):
    long_row = {**make_rows(1)[0], "query": " ".join(f"Paris {i} is the capital." for i in range(80))}
    rows = [long_row, make_rows(2)[1]]
    full = tiny.tokenizer(build_prompt(long_row))["input_ids"]
    assert len(full) > DECODING.max_prompt_len
    enc = encode_prompts(tiny.tokenizer, [build_prompt(r) for r in rows], DECODING.max_prompt_len)
    assert enc["input_ids"].shape[1] == DECODING.max_prompt_len
    assert enc["input_ids"][0].tolist() == full[-DECODING.max_prompt_len:]
    assert enc["attention_mask"][1, 0] == 0 and enc["attention_mask"][1, -1] == 1  # left padding
    assert tiny.tokenizer.padding_side == "right"  # the caller's tokenizer is left as it was

    generate(rows, tiny.model, tiny.tokenizer, tmp_path / "gen.jsonl", model_name="tiny", progress=False)
    got = read_jsonl(tmp_path / "gen.jsonl")[0]
    assert got["prompt"] == build_prompt(long_row)
    tail = greedy_alone(tiny, full[-DECODING.max_prompt_len:])
    assert got["raw_response"] == tiny.tokenizer.decode(tail, skip_special_tokens=True)


def test_plan_sorts_longest_first_in_fixed_batches():
    assert batch_plan([3, 5, 5, 1, 4], 2) == [[1, 2], [4, 0], [3]]


def test_bad_banks_and_options_are_user_errors(tiny, tmp_path):
    rows = make_rows(3)
    with pytest.raises(UserError, match="query_0001 occurs more than once"):
        generate(rows + rows[1:2], tiny.model, tiny.tokenizer, tmp_path / "g.jsonl", model_name="t", progress=False)
    with pytest.raises(UserError, match="batch size must be a positive integer"):
        generate(rows, tiny.model, tiny.tokenizer, tmp_path / "g.jsonl", model_name="t", batch_size=0,
                 progress=False)
    (tmp_path / "g.jsonl").write_text("not json\n")
    with pytest.raises(UserError, match="exists but is not a generations file"):
        generate(rows, tiny.model, tiny.tokenizer, tmp_path / "g.jsonl", model_name="t", progress=False)


CHILD = """
import json, os, signal, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from proctor.factual.generate import generate
model_dir, rows_path, out, kill_at = sys.argv[1:]
model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
calls = []
real = model.generate
def dying(**kw):
    calls.append(1)
    if len(calls) > int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(**kw)
model.generate = dying
generate(json.loads(Path(rows_path).read_text()), model, AutoTokenizer.from_pretrained(model_dir), Path(out),
         model_name="tiny", batch_size=4, progress=False)
"""


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_a_killed_run_resumes_to_the_same_bytes(tiny, tmp_path):
    rows = make_rows(18)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    whole = tmp_path / "whole.jsonl"
    generate(rows, tiny.model, tiny.tokenizer, whole, model_name="tiny", batch_size=4, progress=False)

    out = tmp_path / "resumed.jsonl"
    child = subprocess.run([sys.executable, "-c", CHILD, str(tiny.dir), str(tmp_path / "rows.json"), str(out), "3"],
                           cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    partial = Path(f"{out}.partial")
    assert not out.exists() and len(partial.read_text().splitlines()) == 1 + 3 * 4
    # a torn batch: one whole line of the fourth batch, then half a line
    fourth = [rows[i]["query_id"] for i in batch_plan(
        [len(tiny.tokenizer(build_prompt(r))["input_ids"]) for r in rows], 4)[3]]
    lines = {json.loads(line)["query_id"]: line for line in whole.read_text().splitlines()}
    with open(partial, "a") as f:
        f.write(lines[fourth[0]] + "\n" + lines[fourth[1]][:30])

    stats = generate(rows, tiny.model, tiny.tokenizer, out, model_name="tiny", batch_size=4, progress=False)
    assert (stats.resumed_rows, stats.generated_rows) == (12, 6)
    assert out.read_bytes() == whole.read_bytes()
    assert not partial.exists()

    partial.write_text("left by a run killed right after its final write")
    again = generate(rows, tiny.model, tiny.tokenizer, out, model_name="tiny", batch_size=4, progress=False)
    assert again.already_complete and again.generated_rows == 0
    assert out.read_bytes() == whole.read_bytes() and not partial.exists()
    with pytest.raises(UserError, match="other queries or another model"):
        generate(rows[:5], tiny.model, tiny.tokenizer, out, model_name="tiny", progress=False)


class Interrupted(Exception):
    pass


def test_a_partial_file_of_another_model_or_bank_is_refused(tiny, tmp_path):
    rows = make_rows(8)
    out = tmp_path / "gen.jsonl"
    real = tiny.model.generate
    calls = []

    def interrupted(**kw):
        calls.append(1)
        if len(calls) > 1:
            raise Interrupted
        return real(**kw)

    tiny.model.generate = interrupted
    try:
        with pytest.raises(Interrupted):
            generate(rows, tiny.model, tiny.tokenizer, out, model_name="tiny", model_identity="a",
                     batch_size=4, progress=False)
    finally:
        del tiny.model.generate
    for kwargs, what in [(dict(model_identity="b"), "model identity"), (dict(batch_size=2), "batch size"),
                         (dict(rows=rows[:7]), "bank digest"), (dict(decoding=DECODING.__class__(seed=1)), "decoding")]:
        args = dict(rows=rows, model_identity="a", batch_size=4) | kwargs
        with pytest.raises(UserError, match=f"different {what}.*delete it"):
            generate(args.pop("rows"), tiny.model, tiny.tokenizer, out, model_name="tiny", progress=False, **args)
    stats = generate(rows, tiny.model, tiny.tokenizer, out, model_name="tiny", model_identity="a",
                     batch_size=4, progress=False)
    assert (stats.resumed_rows, stats.generated_rows) == (4, 4)
