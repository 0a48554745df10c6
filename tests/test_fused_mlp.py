"""Fused gate/up projections: bitwise the same outputs, no second copy of the weights, gradients intact."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from proctor.backends.fused_mlp import fuse_gated_mlps


def tiny_llama(intermediate: int = 96) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=intermediate, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("length", [1, 7, 300])
def test_fused_model_gives_bitwise_the_same_logits(length):
    plain = tiny_llama()
    fused = copy.deepcopy(plain)
    assert fuse_gated_mlps(fused) == 3
    ids = torch.randint(0, 101, (2, length), generator=torch.Generator().manual_seed(length))
    with torch.inference_mode():
        assert torch.equal(plain(input_ids=ids).logits, fused(input_ids=ids).logits)


def test_fusing_keeps_parameters_state_dict_and_memory():
    model = tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count = sum(p.numel() for p in model.parameters())
    fuse_gated_mlps(model)
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert sum(p.numel() for p in model.parameters()) == count
    mlp = model.model.layers[0].mlp
    stacked = mlp._proctor_gate_up
    # the projections are views of the stacked weights: nothing is stored twice
    assert mlp.gate_proj.weight.data_ptr() == stacked.data_ptr()
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
    assert fuse_gated_mlps(model) == 0  # fused once


def test_gradients_reach_the_projections():
    plain, fused = tiny_llama(), tiny_llama()
    fuse_gated_mlps(fused)
    ids = torch.randint(0, 101, (1, 9), generator=torch.Generator().manual_seed(1))
    for model in (plain, fused):
        model(input_ids=ids).logits.sum().backward()
    for name in ("gate_proj", "up_proj", "down_proj"):
        got = getattr(fused.model.layers[1].mlp, name).weight.grad
        want = getattr(plain.model.layers[1].mlp, name).weight.grad
        assert got is not None and torch.allclose(got, want)


def test_models_without_a_gated_mlp_are_left_alone():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32))
    assert fuse_gated_mlps(gpt2) == 0
    llama = tiny_llama()
    llama.model.layers[0].mlp.up_proj = torch.nn.Linear(48, 96, bias=True)  # a biased projection
    assert fuse_gated_mlps(llama) == 2
    assert not hasattr(llama.model.layers[0].mlp, "_proctor_gate_up")


def test_an_mlp_that_only_looks_gated_keeps_its_forward():
    model = tiny_llama()
    mlp = model.model.layers[2].mlp

    def swapped(x):  # up and gate the other way round: not what the fused forward computes
        return mlp.down_proj(mlp.act_fn(mlp.up_proj(x)) * mlp.gate_proj(x))

    mlp.forward = swapped
    plain = copy.deepcopy(model)
    weights = (mlp.gate_proj.weight, mlp.up_proj.weight)
    assert fuse_gated_mlps(model) == 2
    assert mlp.gate_proj.weight is weights[0] and mlp.up_proj.weight is weights[1]  # its own, not views
    ids = torch.randint(0, 101, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        assert torch.equal(plain(input_ids=ids).logits, model(input_ids=ids).logits)
