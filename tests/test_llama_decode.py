"""The direct decode step of Llama decoders: used only where it gives the decoder's own hidden states."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from proctor.backends.fused_mlp import fuse_gated_mlps
from proctor.backends import llama_decode
from proctor.backends.llama_decode import LlamaDecode, agrees_with_decoder, for_decoder


def tiny_llama(**extra) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1,
                         attn_implementation="proctor_packed", **extra)
    return LlamaForCausalLM(config).eval().get_decoder()


def checked(decoder: torch.nn.Module) -> LlamaDecode | None:
    return for_decoder(decoder)


@pytest.mark.parametrize("fused", [True, False])
def test_a_llama_decoder_gets_the_direct_step(fused):
    decoder = tiny_llama()
    if fused:
        fuse_gated_mlps(decoder)
    fast = checked(decoder)
    assert isinstance(fast, LlamaDecode)
    assert checked(decoder) is fast  # checked once


def test_the_probe_runs_once_per_decoder(monkeypatch):
    decoder = tiny_llama()
    calls = []
    monkeypatch.setattr(llama_decode, "agrees_with_decoder", lambda decoder, fast: calls.append(fast) or True)
    for_decoder(decoder)
    for_decoder(decoder)
    assert len(calls) == 1


def test_biases_or_extra_parts_keep_transformers_forward():
    assert checked(tiny_llama(attention_bias=True)) is None
    decoder = tiny_llama()
    decoder.layers[1].self_attn.q_norm = torch.nn.LayerNorm(12)  # as Qwen3's attention has
    assert checked(decoder) is None
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=101)).eval()
    assert checked(gpt2.transformer) is None


def test_a_layer_that_computes_something_else_fails_the_probe():
    decoder = tiny_llama()
    norm = decoder.layers[2].post_attention_layernorm
    plain = norm.forward
    norm.forward = lambda x: plain(x) * 1.5  # a different norm with a Llama norm's parts
    assert checked(decoder) is None


def test_the_probe_compares_hidden_states():
    decoder = tiny_llama()
    assert agrees_with_decoder(decoder, LlamaDecode(decoder, _layers_of(decoder)))
    wrong = LlamaDecode(decoder, _layers_of(decoder))
    wrong.eps = 1.0  # the final norm's epsilon
    assert not agrees_with_decoder(decoder, wrong)


def _layers_of(decoder):
    from proctor.backends.llama_decode import _layers

    layers = _layers(decoder)
    assert layers is not None
    return layers
