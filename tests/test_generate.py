"""Generation on a tiny random Llama: exactness, batch invariance, seeded sampling, stops, truncation."""


import pytest
import torch

from proctor.backends.hf_generate import ContinuousBatch
from proctor.engine import Engine
from proctor.engine.gen_plan import plan_generation, sample_seed
from proctor.engine.tokens import GenerationContext, TokenizationPolicy
from proctor.errors import UserError
from proctor.requests import Generate

from tinylm import build_tiny_model

PROMPTS = [
    "Question: Which planet is closest to the sun?\nAnswer:",
    "The quick brown fox",
    "Paris is the capital of France. Berlin is the capital of",
    "A stitch in time",
    "Question: What is the boiling point of water at sea level?\nAnswer: 100 degrees",
    "The fox. The fox. The fox. Which planet is red?",
    "Berlin",
    "Question: The quick brown fox jumps over which animal?\nAnswer: the lazy",
    "Mercury, Venus, Earth, Mars",
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from proctor.backends import load_backend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add synchronisation
    yield load_backend(str(build_tiny_model(tmp_path_factory.mktemp("tiny"))), device="cpu", max_length=256)
    torch.set_num_threads(threads)


def greedy(context, n=12, stop=()):
    return Generate(context=context, max_gen_toks=n, stop=stop)


def sampled(context, n=12, repeats=4, temperature=0.8, top_p=0.9):
    return Generate(context=context, max_gen_toks=n, do_sample=True, temperature=temperature, top_p=top_p,
                    repeats=repeats)


def texts(results):
    return [[s.text for s in r.samples] for r in results]


def reference_greedy(backend, context, n):
    """Token by token argmax with a full forward pass over everything each step (no cache, no padding)."""
    tokens = list(TokenizationPolicy(backend.tokenizer, max_length=backend.max_length)
                  .generation_contexts([(context, n)])[0].tokens)
    out = []
    with torch.inference_mode():
        for _ in range(n):
            logits = backend.model(input_ids=torch.tensor([tokens + out])).logits[0, -1]
            out.append(int(logits.float().argmax()))
            if out[-1] == backend.tokenizer.eos_token_id:
                break
    return out


def test_greedy_equals_a_full_recompute_argmax_loop(backend):
    requests = [greedy(p, 16) for p in PROMPTS[:4]]
    results = Engine(backend, batch_size=4, progress=False).generate(requests)
    for req, res in zip(requests, results):
        ref = reference_greedy(backend, req.context, 16)
        (sample,) = res.samples
        assert sample.num_tokens == len(ref)
        assert sample.text == backend.tokenizer.decode(
            ref[:-1] if sample.finish_reason == "eos" else ref, skip_special_tokens=True)
        assert sample.finish_reason == ("eos" if ref[-1] == backend.tokenizer.eos_token_id else "length")


def test_greedy_texts_are_batch_invariant(backend):
    requests = [greedy(p, 20) for p in PROMPTS]
    by_size = {bs: texts(Engine(backend, batch_size=bs, progress=False).generate(requests)) for bs in (1, 3, 8)}
    assert by_size[1] == by_size[3] == by_size[8]
    assert len({t[0] for t in by_size[1]}) > 1


def test_greedy_repeats_are_one_generation_copied(backend):
    engine = Engine(backend, batch_size=8, progress=False)
    (res,) = engine.generate([Generate(context=PROMPTS[0], max_gen_toks=10, repeats=3)])
    assert len(res.samples) == 3 and len(set(res.samples)) == 1
    assert engine.stats.gen_samples == 1


def test_sampling_is_reproducible_across_batch_sizes_and_orders(backend):
    requests = [sampled(p) for p in PROMPTS[:5]]
    runs = [
        texts(Engine(backend, batch_size=bs, progress=False).generate(requests)) for bs in (1, 3, 8)
    ]
    reordered = Engine(backend, batch_size=5, progress=False).generate(requests[::-1])
    assert runs[0] == runs[1] == runs[2] == texts(reordered)[::-1]
    # each sample index draws its own text; another run seed draws others
    assert all(len(set(samples)) > 1 for samples in runs[0])
    other = texts(Engine(backend, batch_size=8, progress=False, seed=7).generate(requests))
    assert other != runs[0]


def test_seeds_depend_only_on_run_seed_key_and_index():
    assert sample_seed(1, "k", 0) == sample_seed(1, "k", 0)
    assert len({sample_seed(1, "k", 0), sample_seed(1, "k", 1), sample_seed(2, "k", 0), sample_seed(1, "j", 0)}) == 4
    (planned,) = plan_generation([("k", sampled("x", repeats=5), (1, 2, 3))], run_seed=3)
    assert planned.row.seeds == tuple(sample_seed(3, "k", i) for i in range(5))


def test_samples_split_across_batches_equal_samples_together(backend):
    req = sampled(PROMPTS[2], repeats=6)
    together = Engine(backend, batch_size=8, progress=False).generate([req])
    split = Engine(backend, batch_size=4, progress=False).generate([req])
    assert texts(together) == texts(split)


def first_ascii_pair(backend, tokens):
    """A position k where tokens k and k+1 each decode to printable ASCII."""
    for k in range(1, len(tokens) - 1):
        a, b = (backend.tokenizer.decode([t]) for t in tokens[k:k + 2])
        if a and b and all(c.isascii() and c.isprintable() for c in a + b):
            return k, a, b
    pytest.skip("no two adjacent printable tokens in this generation")


def test_stop_string_spanning_two_tokens_cuts_before_it(backend):
    for prompt in PROMPTS:
        tokens = reference_greedy(backend, prompt, 30)
        if len(tokens) == 30:
            break
    k, a, b = first_ascii_pair(backend, tokens)
    stop = a[-1] + b[0]                       # ends inside token k+1, starts inside token k
    full = backend.tokenizer.decode(tokens)
    first = next(n for n in range(1, 31) if stop in backend.tokenizer.decode(tokens[:n]))
    (res,) = Engine(backend, batch_size=1, progress=False).generate([greedy(prompt, 30, stop=("@@never@@", stop))])
    (sample,) = res.samples
    assert sample.finish_reason == "stop"
    assert sample.num_tokens == first
    assert sample.text == full[: full.index(stop)]
    assert stop not in sample.text


def test_eos_and_length(backend):
    tokens = reference_greedy(backend, PROMPTS[1], 10)
    eos = tokens[3]
    first = tokens.index(eos)
    old = backend.model.generation_config.eos_token_id
    backend.model.generation_config.eos_token_id = [old, eos]   # the model's own end token(s)
    try:
        (res,) = Engine(backend, batch_size=2, progress=False).generate([greedy(PROMPTS[1], 10)])
    finally:
        backend.model.generation_config.eos_token_id = old
    (sample,) = res.samples
    assert (sample.finish_reason, sample.num_tokens) == ("eos", first + 1)
    assert sample.text == backend.tokenizer.decode(tokens[:first])   # the EOS token is not in the text

    (res,) = Engine(backend, batch_size=2, progress=False).generate([greedy(PROMPTS[1], 5)])
    assert (res.samples[0].finish_reason, res.samples[0].num_tokens) == ("length", 5)


def test_context_is_left_truncated_to_leave_room(backend):
    policy = TokenizationPolicy(backend.tokenizer, max_length=backend.max_length)
    long_context = " ".join(PROMPTS * 6)
    full = tuple(backend.tokenizer.encode(long_context, add_special_tokens=False))
    assert len(full) > backend.max_length
    (kept,) = policy.generation_contexts([(long_context, 56)])
    assert kept.tokens == full[-(backend.max_length - 56):]
    assert kept.dropped == len(full) - (backend.max_length - 56)
    assert policy.generation_contexts([("", 8)]) == [GenerationContext((backend.tokenizer.eos_token_id,), 0)]
    with pytest.raises(UserError, match="max_length=256"):
        policy.generation_contexts([("x", 256)])

    # the model sees exactly the kept tokens: the same text as a prompt that is only those tokens
    truncated_text = backend.tokenizer.decode(kept.tokens)
    assert tuple(backend.tokenizer.encode(truncated_text, add_special_tokens=False)) == kept.tokens
    engine = Engine(backend, batch_size=2, progress=False)
    a, b = engine.generate([greedy(long_context, 56), greedy(truncated_text, 56)])
    assert a.samples == b.samples


def test_bad_sampling_settings_are_user_errors(backend):
    engine = Engine(backend, batch_size=2, progress=False)
    with pytest.raises(UserError, match="temperature"):
        engine.generate([Generate(context="x", max_gen_toks=4, do_sample=True, temperature=0.0)])
    with pytest.raises(UserError, match="top_p"):
        engine.generate([Generate(context="x", max_gen_toks=4, do_sample=True, temperature=1.0, top_p=0.0)])


def test_finished_rows_leave_the_batch(backend, monkeypatch):
    """Rows of very different lengths in one batch: once nothing is queued, the short ones stop
    costing decode rows."""
    decode_rows = []
    original = ContinuousBatch._step

    def spy(self, live, drafts):
        decode_rows.append(len(self.slots))  # a step decodes every slot, live or not
        return original(self, live, drafts)

    monkeypatch.setattr(ContinuousBatch, "_step", spy)
    Engine(backend, batch_size=8, progress=False).generate([greedy(PROMPTS[0], 2), greedy(PROMPTS[1], 12)])
    assert decode_rows[0] == 2 and decode_rows[-1] == 1 and len(decode_rows) == 11
