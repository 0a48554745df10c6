"""proctor's sampler draws from transformers' temperature + top-p distribution, row by row."""

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from proctor.backends.decoding import sample_token, sample_tokens


def reference_probs(logits, temperature, top_p):
    """The distribution transformers' warpers define (as `generate` would sample from)."""
    scores = torch.log_softmax(logits.float(), dim=-1)
    scores = TemperatureLogitsWarper(temperature)(None, scores) if temperature != 1.0 else scores
    scores = TopPLogitsWarper(top_p)(None, scores) if top_p < 1.0 else scores
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 0.6), (0.8, 0.95), (1.3, 0.3)])
def test_draws_follow_the_warped_distribution(temperature, top_p):
    torch.manual_seed(0)
    logits = torch.randn(12) * 2
    expected = reference_probs(logits[None], temperature, top_p)[0]
    draws = 20000
    generator = torch.Generator().manual_seed(5)
    counts = torch.bincount(torch.tensor([sample_token(logits, temperature, top_p, generator) for _ in range(draws)]),
                            minlength=12).float()
    assert set(counts.nonzero().flatten().tolist()) <= set(expected.nonzero().flatten().tolist())
    # every token within 4 standard errors of its probability
    se = (expected * (1 - expected) / draws).sqrt()
    assert ((counts / draws - expected).abs() <= 4 * se + 1e-9).all()


def test_the_kept_set_equals_transformers_on_a_real_vocabulary_size():
    torch.manual_seed(1)
    logits = torch.randn(6, 49152) * 4
    for top_p in (0.3, 0.6, 0.95, 0.999):
        expected = reference_probs(logits, 0.7, top_p) > 0
        generators = [torch.Generator().manual_seed(i) for i in range(6)]
        for _ in range(30):
            for row, token in enumerate(sample_tokens(logits, 0.7, top_p, generators)):
                assert expected[row, token]


def test_a_row_draws_the_same_token_alone_or_in_a_batch():
    torch.manual_seed(2)
    logits = torch.randn(9, 500) * 3
    together = sample_tokens(logits, 0.9, 0.9, [torch.Generator().manual_seed(i) for i in range(9)])
    alone = [sample_token(logits[i], 0.9, 0.9, torch.Generator().manual_seed(i)) for i in range(9)]
    assert together == alone
