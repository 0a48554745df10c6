"""Shared-prefix scoring: prefix clustering by hand, and shared == unshared scores on two
tiny architectures (with left truncation and multi-token continuations) and on real items."""

import random

import pytest

from proctor.engine import Engine
from proctor.engine.plan import BatchLimits, PlannedRow, Readout, Row, find_prefix_groups, plan_batches
from proctor.engine.prefix import MIN_PREFIX
from proctor.requests import Loglikelihood

from tinylm import build_tiny_gpt2, build_tiny_model

FEWSHOT = (
    "The following are multiple choice questions (with answers) about astronomy.\n\n"
    "Question: Which planet is closest to the sun?\n A. Mercury\n B. Venus\n C. Earth\n D. Mars\nAnswer: A\n\n"
    "Question: What is the boiling point of water at sea level?\n A. 90\n B. 100\n C. 110\n D. 120\nAnswer: B\n\n"
)
QUESTIONS = [
    "Paris is the capital of which country?",
    "Berlin is the capital of which country?",
    "The quick brown fox jumps over which animal?",
    "A stitch in time saves how many?",
    "Which planet is red?",
]


def planned(key: str, tokens: tuple[int, ...], start: int, n: int = 1) -> PlannedRow:
    return PlannedRow(Row(tokens, (Readout(start, tokens[start + 1:start + 1 + n] or (0,)),)), (key,))


def test_rows_sharing_a_long_prefix_form_one_group():
    shot = tuple(range(100, 140))  # 40 shared tokens
    rows = [planned(f"q{i}", shot + (i, i + 1, i + 2), 42) for i in range(5)]
    groups, rest = find_prefix_groups(rows)
    assert rest == []
    (group,) = groups
    assert group.prefix == shot and len(group.rows) == 5


def test_rc_items_split_into_one_group_per_question():
    rows = []
    for q in range(3):
        question = (1, 2, 3) + tuple(range(10 * q + 50, 10 * q + 50 + 20))  # share only 3 tokens across items
        for c in range(4):
            rows.append(planned(f"q{q}c{c}", question + (200 + c, 201 + c), len(question) - 1, 2))
    groups, rest = find_prefix_groups(rows)
    assert rest == [] and len(groups) == 3
    for group in groups:
        assert len(group.rows) == 4
        assert len(group.prefix) == 22  # the question minus its last token, whose state is read


def test_rc_items_that_each_fit_a_batch_pack_together_as_segments():
    rows = []
    for q in range(3):
        question = (1, 2, 3) + tuple(range(10 * q + 50, 10 * q + 50 + 20))
        rows += [planned(f"q{q}c{c}", question + (200 + c, 201 + c), len(question) - 1, 2) for c in range(4)]
    (batch,) = plan_batches(rows, BatchLimits(max_tokens=200), share_prefixes=True)
    assert batch.prefix == () and sum(1 for p in batch.parents if p < 0) == 3  # one segment per question
    assert sorted(batch.keys) == sorted(k for r in rows for k in r.keys)
    assert sum(b.full_tokens for b in [batch]) == sum(len(r.row.tokens) for r in rows)
    # a budget one question's rows fill: each group keeps its prefix, one batch each
    assert [bool(b.prefix) for b in plan_batches(rows, BatchLimits(max_tokens=20), share_prefixes=True)] == [True] * 3


def test_short_or_unique_prefixes_are_not_shared():
    rows = [planned("a", tuple(range(MIN_PREFIX - 1)) + (7, 8), MIN_PREFIX),
            planned("b", tuple(range(MIN_PREFIX - 1)) + (9, 8), MIN_PREFIX),
            planned("c", (5,) * 40, 38)]
    groups, rest = find_prefix_groups(rows)
    assert groups == [] and len(rest) == 3


def test_prefix_stops_before_the_first_read_position():
    shot = tuple(range(100, 130))
    rows = [planned("early", shot + (1, 2, 3), 20), planned("late", shot + (4, 5, 6), 31)]
    (group,) = find_prefix_groups(rows)[0]
    assert group.prefix == shot[:20]


def test_prefixed_plan_is_order_independent_and_keeps_prefix_batches_together():
    shot = tuple(range(100, 140))
    rows = [planned(f"s{i}", shot + tuple(range(i + 1)) + (9,), 40 + i) for i in range(7)]
    rows += [planned(f"u{i}", (i,) * (5 + i), 3 + i) for i in range(3)]
    limits = BatchLimits(max_rows=2)
    batches = plan_batches(rows, limits, share_prefixes=True)
    shuffled = list(rows)
    random.Random(0).shuffle(shuffled)
    assert plan_batches(shuffled, limits, share_prefixes=True) == batches
    prefixed = [i for i, b in enumerate(batches) if b.prefix]
    assert len(prefixed) == 4 and prefixed == list(range(prefixed[0], prefixed[0] + 4))
    assert sorted(k for b in batches for k in b.keys) == sorted(k for r in rows for k in r.keys)
    for b in batches:
        for r in b.rows:
            full = next(x for x in rows if x.keys == r.keys)
            assert b.prefix + r.row.tokens == full.row.tokens


def requests_for(tokenizer) -> list[Loglikelihood]:
    """5-shot MC items (single-token choices) and RC items (multi-token choices), long and short."""
    out = []
    for q in QUESTIONS:
        out += [Loglikelihood(FEWSHOT + "Question: " + q + "\nAnswer:", c) for c in (" A", " B", " C", " D")]
        out += [Loglikelihood("Question: " + q + "\nAnswer:", c) for c in (" France", " the lazy dog", " nine")]
        # RC after a shared few-shot block: the choices of one item nest inside the block's group
        out += [Loglikelihood(FEWSHOT + "Question: " + q + "\nAnswer:", c) for c in (" France", " the lazy dog")]
    out.append(Loglikelihood("", " Paris is the capital of France"))
    return out


def compare(backend, requests, batch_size, rel=0.0):
    assert backend.shares_prefixes
    shared = Engine(backend, batch_size=batch_size, progress=False)
    got = shared.run(requests)
    backend.shares_prefixes = False
    try:
        plain = Engine(backend, batch_size=batch_size, progress=False)
        want = plain.run(requests)
    finally:
        backend.shares_prefixes = True
    for r, a, b in zip(requests, got, want):
        assert a.sum_logits == pytest.approx(b.sum_logits, abs=1e-5, rel=rel), r
        assert (a.num_tokens, a.is_greedy) == (b.num_tokens, b.is_greedy), r
    assert plain.stats.prefixes_run == 0 and plain.stats.tokens_run == plain.stats.tokens_total
    return shared.stats, got, want


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("max_length", [2048, 48])
@pytest.mark.parametrize("batch_size", [3, "auto"])
def test_shared_prefix_scores_equal_unshared(tmp_path_factory, arch, max_length, batch_size):
    from proctor.backends import load_backend

    build = build_tiny_model if arch == "llama" else build_tiny_gpt2
    directory = build(tmp_path_factory.mktemp(arch))
    backend = load_backend(str(directory), device="cpu", max_length=max_length)
    requests = requests_for(backend.tokenizer)
    if max_length < 2048:  # the 5-shot contexts are cut from the left, so items share less
        assert len(backend.tokenizer.encode(requests[0].context)) > max_length
    stats, _, _ = compare(backend, requests, batch_size)
    assert stats.tokens_run < stats.tokens_total
    if max_length == 2048:  # cut to 48 tokens, each group fits one batch: segments, no prefix pass
        assert stats.prefixes_run > 0
        assert any(b.parents for b in Engine(backend, batch_size=batch_size, progress=False).plan(requests))


def test_rc_items_after_a_shared_fewshot_block_nest():
    shot = tuple(range(100, 140))
    rows = []
    for q in range(3):
        question = shot + tuple(range(10 * q + 200, 10 * q + 220))
        rows += [planned(f"q{q}c{c}", question + (300 + c, 301 + c), len(question) - 1, 2) for c in range(4)]
    groups, rest = find_prefix_groups(rows)
    assert rest == []
    (group,) = groups
    assert group.prefix == shot and group.rows == ()
    assert [len(n.rows) for n in group.nested] == [4, 4, 4]
    assert all(len(n.prefix) == len(shot) + 19 for n in group.nested)  # the question minus its read token
    batches = plan_batches(rows, BatchLimits(max_rows=6), share_prefixes=True)
    for b in batches:
        assert b.prefix == shot
        for i, r in enumerate(b.rows):
            if r.keys:
                full = next(x for x in rows if x.keys == r.keys)
                head = b.rows[b.parent(i)].row.tokens if b.parent(i) >= 0 else ()
                assert b.prefix + head + r.row.tokens == full.row.tokens
    assert [sum(1 for r in b.rows if r.keys) for b in batches] == [4, 4, 4]  # max_rows counts rows with readouts
    assert sum(b.full_tokens for b in batches) == sum(len(r.row.tokens) for r in rows)


def test_a_batch_with_segments_that_runs_out_of_memory_is_scored_flat(tmp_path):
    from proctor.backends import load_backend
    from proctor.errors import BatchTooLarge

    backend = load_backend(str(build_tiny_model(tmp_path / "llama")), device="cpu")
    requests = [Loglikelihood(FEWSHOT + "Question: " + q + "\nAnswer:", c)
                for q in QUESTIONS[:2] for c in (" France", " the lazy dog", " nine")]
    want = Engine(backend, batch_size=64, progress=False).run(requests)
    score = backend.score

    def no_segments(rows, prefix=(), parents=()):
        if any(p >= 0 for p in parents):
            raise BatchTooLarge("segments")
        return score(rows, prefix=prefix, parents=parents)

    backend.score = no_segments
    engine = Engine(backend, batch_size=64, progress=False)
    got = engine.run(requests)
    assert engine.stats.oom_splits >= 1
    for a, b in zip(got, want):
        assert a.sum_logits == pytest.approx(b.sum_logits, abs=1e-5)


def test_gpt2_positions_continue_after_the_prefix(tmp_path):
    """With wrong position ids a GPT-2 suffix would score differently; check one row by hand."""
    import torch

    from proctor.backends import load_backend

    backend = load_backend(str(build_tiny_gpt2(tmp_path / "gpt2")), device="cpu")
    tokens = tuple(backend.tokenizer.encode(FEWSHOT + "Question: Which planet is red?\nAnswer: Mars"))
    start = len(tokens) - 3
    row = Row(tokens[20:], (Readout(start, tokens[start + 1:] + (5,)),))
    ((res,),) = backend.score([row], prefix=tokens[:20])
    with torch.no_grad():
        logp = torch.log_softmax(backend.model(torch.tensor([tokens])).logits[0], dim=-1)
    want = sum(float(logp[start + i, t]) for i, t in enumerate(tokens[start + 1:] + (5,)))
    assert res.sum_logits == pytest.approx(want, abs=1e-5)


@pytest.mark.slow  # the real SmolLM2
def test_real_items_on_smollm2_score_the_same_shared_and_unshared(data_dir):
    """30 fp32 layers: any change of batch shape moves sums by ~1e-5 (unshared runs at batch
    size 1 and "auto" differ by 2.5e-5 on these items), so 1e-5 is allowed relative too."""
    from proctor.backends import load_backend
    from proctor.tasks.registry import resolve

    (mmlu,) = resolve("mmlu_astronomy:mc::olmes")
    (arc,) = resolve("arc_easy:rc::olmes")
    docs = mmlu.instances(data_dir, 10) + arc.instances(data_dir, 5)
    requests = [r for d in docs for r in d.requests]
    backend = load_backend("smollm2-135m", device="cpu", dtype="float32")
    stats, got, want = compare(backend, requests, "auto", rel=1e-5)
    at = 0
    for doc in docs:  # identical predictions
        n = len(doc.requests)
        mine, ref = [r.sum_logits for r in got[at:at + n]], [r.sum_logits for r in want[at:at + n]]
        assert mine.index(max(mine)) == ref.index(max(ref)), doc.query_id
        at += n
    assert stats.prefixes_run == 2  # each task's 5-shot block once
    assert stats.tokens_run < stats.tokens_total / 3
