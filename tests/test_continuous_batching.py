"""Continuous batching over shared prefixes (proctor/backends/hf_generate.py) on tiny Llama and GPT-2 models."""

import functools
from dataclasses import replace

import pytest
import torch

from proctor.backends import hf_generate, load_backend
from proctor.backends.decoding import model_eos_token_ids
from proctor.backends.hf_generate import ContinuousBatch, prefix_groups
from proctor.backends.hf_generate_static import generate_static
from proctor.engine.gen_plan import GenRow

from tinylm import build_tiny_gpt2, build_tiny_model

SHOTS = ("Question: Which planet is closest to the sun?\nAnswer: Mercury\n\n"
         "Question: What is the boiling point of water at sea level?\nAnswer: 100 degrees Celsius\n\n")
QUESTIONS = ["Question: The quick brown fox jumps over which animal?\nAnswer:",
             "Question: Paris is the capital of which country?\nAnswer:",
             "Question: A stitch in time saves how many?\nAnswer:",
             "Question: Berlin is the capital of?\nAnswer:",
             "Question: Which planet is red?\nAnswer:"]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def backend(request, tmp_path_factory):
    build = build_tiny_model if request.param == "llama" else build_tiny_gpt2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    backend = load_backend(str(build(tmp_path_factory.mktemp(request.param))), device="cpu", max_length=512)
    assert backend.shares_prefixes
    yield backend
    torch.set_num_threads(threads)


def encode(backend, text):
    return tuple(backend.tokenizer(text, add_special_tokens=False)["input_ids"])


def rows_for(backend, *, repeats=3, max_new=10, shared=True, top_p=0.95):
    """Greedy and sampled rows; with `shared`, all start with the few-shot block."""
    rows = []
    for i, q in enumerate(QUESTIONS):
        tokens = encode(backend, (SHOTS if shared else "") + q)
        if i % 2:
            rows.append(GenRow(tokens, max_new + i, (), False, 1.0, 1.0, (0,)))
        else:
            seeds = tuple(100 * i + k for k in range(repeats))
            rows.append(GenRow(tokens, max_new + i, ("\n\n",), True, 0.9, top_p, seeds))
    return rows


def continuous(backend, rows, slots, on_done=None, cls=ContinuousBatch):
    head = backend.model.get_output_embeddings()
    eos = model_eos_token_ids(backend.model, backend.tokenizer)
    return cls(backend.model.get_decoder(), head, backend.tokenizer, eos, rows, slots, on_done)


@pytest.mark.parametrize("slots", [1, 2, 5, 64])
def test_slot_refill_keeps_samples_identical_to_the_static_loop(backend, slots):
    # No nucleus cut: a random model's near-uniform distribution puts many tokens within float noise
    # of the top-p boundary, and batches of other shapes differ by ~1e-6 in their logits (AVX-512
    # kernels), which moves a token across it; each sample's random stream is what is checked here.
    rows = rows_for(backend, top_p=1.0)
    eos = model_eos_token_ids(backend.model, backend.tokenizer)
    static = generate_static(backend.model, backend.tokenizer, eos, rows, 64)
    done = []
    assert continuous(backend, rows, slots, on_done=lambda i, s: done.append(i)).run() == static
    assert sorted(done) == list(range(len(rows)))
    assert len({s.text for s in static[0]}) > 1  # the samples of a prompt differ


def test_samples_do_not_depend_on_queue_order(backend):
    rows = rows_for(backend)
    forward = continuous(backend, rows, 3).run()
    backward = continuous(backend, rows[::-1], 3).run()
    assert backward[::-1] == forward


class Recording(ContinuousBatch):
    """Keeps the logits every sample's tokens were chosen from, per (row, sample index)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logits = {}

    def _advance(self, samples, logits, drafts):
        before = [len(sample.tokens) for sample in samples]
        super()._advance(samples, logits, drafts)
        for sample, known, row_logits in zip(samples, before, logits):
            # the logits of each token it took: at its last token, then at each kept drafted token
            for k in range(len(sample.tokens) - known):
                self.logits.setdefault((sample.row, sample.index), []).append(row_logits[k].clone())


def test_shared_prefix_decode_equals_unshared_decode_and_a_full_forward(backend, monkeypatch):
    rows = [replace(r, max_new_tokens=12, stop=()) for r in rows_for(backend, repeats=2)]
    shared = continuous(backend, rows, 4, cls=Recording)
    shared_out = shared.run()
    assert shared.prefixes[0] and len(shared.prefixes) == 1  # one group, the few-shot block shared
    monkeypatch.setattr(hf_generate, "prefix_groups", lambda token_rows: [(0, [i]) for i in range(len(token_rows))])
    unshared = continuous(backend, rows, 4, cls=Recording)
    assert unshared.run() == shared_out
    assert shared.logits.keys() == unshared.logits.keys()
    for key, steps in shared.logits.items():
        torch.testing.assert_close(torch.stack(steps), torch.stack(unshared.logits[key]), atol=1e-5, rtol=0)
    # and equal a forward pass over the whole sequence with no cache (a greedy row: its tokens are the argmaxes)
    row = 1
    assert not rows[row].do_sample
    steps = shared.logits[(row, 0)]
    tokens = list(rows[row].tokens)
    with torch.inference_mode():
        for logits in steps:
            full = backend.model(input_ids=torch.tensor([tokens])).logits[0, -1]
            torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
            tokens.append(int(logits.argmax()))


def test_the_shared_prefix_is_prefilled_once_and_each_prompt_once(backend, monkeypatch):
    calls = []
    real = hf_generate.run_prefix
    monkeypatch.setattr(hf_generate, "run_prefix", lambda d, p, dev: calls.append(len(p)) or real(d, p, dev))
    decoder = backend.model.get_decoder()
    lengths = []
    original = decoder.forward

    @functools.wraps(original)  # keeps the signature the cache keyword is read from
    def spy(*args, **kwargs):
        lengths.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    monkeypatch.setattr(decoder, "forward", spy)
    rows = rows_for(backend, repeats=4)
    batch = continuous(backend, rows, 2)
    batch.run()
    (prefix,) = batch.prefixes
    assert calls == [len(prefix)] and len(prefix) >= 32
    prefilled = sum(t for b, t in lengths if b == 1 and t > 1)
    assert prefilled == sum(len(r.tokens) - len(prefix) for r in rows) + len(prefix)


def test_sample_memory_does_not_grow_with_samples_per_prompt(backend):
    sizes = {}
    for n in (1, 8, 32):
        rows = [replace(r, do_sample=True, temperature=1.0, top_p=1.0, seeds=tuple(range(n)))
                for r in rows_for(backend, max_new=8)[:2]]
        batch = continuous(backend, rows, 4)
        batch.run()
        sizes[n] = sum(k.numel() + v.numel() for k, v in batch.cache.sample + batch.cache.prompt)
    assert sizes[8] == sizes[32] and sizes[1] <= sizes[8]


def test_prefix_groups():
    shot = tuple(range(100, 140))  # 40 tokens
    rows = [shot + (1, 2), (7, 8, 9), shot + (3,), shot + (1, 5, 6), (7, 8)]
    groups = {tuple(sorted(members)): shared for shared, members in prefix_groups(rows)}
    assert groups == {(0, 2, 3): 40, (4,): 0, (1,): 0}
    # a row that IS the prefix keeps its last token to itself
    groups = prefix_groups([shot, shot + (1,), shot + (2,)])
    assert groups == [(39, [0, 1, 2])]
    assert prefix_groups([(1, 2, 3)]) == [(0, [0])]


@pytest.mark.parametrize("sampled", [False, True])
def test_drafted_decoding_gives_the_same_tokens_in_fewer_steps(backend, monkeypatch, sampled):
    """Prompt-lookup drafts (a random model's text soon repeats itself): kept only where the token
    chosen before is the guess, a sample drawing once per token kept, so the texts (and a sampled
    row's draws) are those of one token per step."""
    if sampled:  # a low temperature: the text repeats, and the draws still decide it
        rows = [GenRow(encode(backend, SHOTS + q), 60, (), True, 0.05, 0.9, (0, 1)) for q in QUESTIONS[:3]]
    else:
        rows = [GenRow(encode(backend, SHOTS + q), 60, (), False, 1.0, 1.0, (0,)) for q in QUESTIONS[:3]]
    steps = []
    original = ContinuousBatch._step

    def counted(self, live, drafts):
        steps.append(1 + max(len(d) for d in drafts))
        return original(self, live, drafts)

    monkeypatch.setattr(ContinuousBatch, "_step", counted)
    drafted = continuous(backend, rows, 3).run()
    drafted_steps, steps[:] = list(steps), []
    monkeypatch.setattr(hf_generate, "MAX_DRAFT", 0)
    plain = continuous(backend, rows, 3).run()
    assert drafted == plain
    if backend.model.config.model_type == "llama":  # drafts are checked on the direct Llama step
        assert max(drafted_steps) > 1 and len(drafted_steps) < len(steps)
    else:
        assert drafted_steps == steps


class Oracle(ContinuousBatch):
    """Records each sample's tokens; drafts the tokens a known run gave next (`shift`: each one off)."""

    def __init__(self, *args, known=None, shift=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.known, self.shift, self.tokens, self.steps = known, shift, {}, 0

    def _finish(self, sample, reason):
        self.tokens[(sample.row, sample.index)] = list(sample.tokens)
        super()._finish(sample, reason)

    def _drafts(self, samples):
        self.steps += 1
        if self.known is None:
            return [[] for _ in samples]
        vocab = self.decoder.embed_tokens.num_embeddings
        ahead = [self.known[(s.row, s.index)][len(s.tokens):len(s.tokens) + 3] for s in samples]
        return [[(t + self.shift) % vocab for t in tokens] for tokens in ahead]


def test_a_sampled_row_draws_as_it_would_token_by_token_whatever_is_drafted(backend):
    """At temperature 1 every draw decides the text: drafting the very tokens a plain run drew keeps
    them all, in fewer steps; drafting wrong ones keeps none and draws nothing more."""
    if backend.model.config.model_type != "llama":
        pytest.skip("drafts are checked on the direct Llama step")
    # no nucleus cut: a random model puts many tokens within float noise of it
    rows = [GenRow(encode(backend, SHOTS + q), 30, (), True, 1.0, 1.0, (0, 1)) for q in QUESTIONS[:2]]
    plain = continuous(backend, rows, 4, cls=Oracle)
    texts = plain.run()
    right = continuous(backend, rows, 4, cls=functools.partial(Oracle, known=plain.tokens))
    wrong = continuous(backend, rows, 4, cls=functools.partial(Oracle, known=plain.tokens, shift=1))
    assert right.run() == texts and right.tokens == plain.tokens
    assert wrong.run() == texts and wrong.tokens == plain.tokens
    assert right.steps < plain.steps / 2 and wrong.steps == plain.steps
