"""Thin products through oneDNN inside `packed_linears`: the same model, restored after, skipped where it can't help."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

import proctor.backends.decode_linear as decode_linear
from proctor.backends.decode_linear import MAX_ROWS, linear, packed_linears
from proctor.backends.fused_mlp import fuse_gated_mlps

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")


def tiny_llama(dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1)
    return LlamaForCausalLM(config).to(dtype).eval()


def onednn(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(weight), None,
                                              "none", [], "")


@torch.inference_mode()
def test_thin_products_run_through_onednn_and_wide_ones_through_f_linear():
    model = tiny_llama()
    layer = model.model.layers[0].self_attn.q_proj
    thin = torch.randn(5, 48, generator=torch.Generator().manual_seed(1))
    wide = torch.randn(MAX_ROWS + 1, 48, generator=torch.Generator().manual_seed(2))
    with packed_linears(model) as packed:
        assert packed == sum(isinstance(m, torch.nn.Linear) for m in model.modules())
        got_thin, got_wide = layer(thin), layer(wide)
    assert torch.equal(got_thin, onednn(thin, layer.weight))
    assert torch.equal(got_wide, F.linear(wide, layer.weight))
    assert torch.allclose(got_thin, F.linear(thin, layer.weight), rtol=1e-5, atol=1e-6)


@torch.inference_mode()
def test_a_row_is_the_same_whatever_rows_share_its_product():
    model = tiny_llama()
    layer = model.model.layers[1].mlp.down_proj
    rows = torch.randn(32, 96, generator=torch.Generator().manual_seed(3))
    with packed_linears(model):
        alone, among_8, among_32 = layer(rows[:1]), layer(rows[:8]), layer(rows)
    assert torch.equal(alone[0], among_8[0]) and torch.equal(among_8, among_32[:8])


@torch.inference_mode()
def test_the_model_gives_the_same_logits_and_is_restored_after():
    model = tiny_llama()
    fuse_gated_mlps(model)
    ids = torch.randint(0, 101, (4, 1), generator=torch.Generator().manual_seed(4))
    want = model(input_ids=ids).logits
    with packed_linears(model):
        assert "forward" in vars(model.lm_head)
        got = model(input_ids=ids).logits
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not any("forward" in vars(m) for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert torch.equal(model(input_ids=ids).logits, want)


@torch.inference_mode()
def test_the_fused_mlp_weight_is_packed_too():
    model = tiny_llama()
    fuse_gated_mlps(model)
    mlp = model.model.layers[2].mlp
    x = torch.randn(3, 48, generator=torch.Generator().manual_seed(5))
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    with packed_linears(model) as packed:
        got = linear(x, mlp._proctor_gate_up)
        # the stacked weight instead of its two views: each layer's gate/up weights packed once
        assert packed == linears - 3
        assert "forward" not in vars(mlp.gate_proj)
    assert torch.equal(got, onednn(x, mlp._proctor_gate_up))


def test_an_error_inside_the_block_restores_the_model():
    model = tiny_llama()
    with pytest.raises(RuntimeError, match="boom"), packed_linears(model):
        raise RuntimeError("boom")
    assert not any("forward" in vars(m) for m in model.modules())
    assert decode_linear._PACKED.get() is None


@pytest.mark.parametrize("why", ["bfloat16", "no memory"])
def test_nothing_is_packed_where_it_cannot_help(monkeypatch, why):
    model = tiny_llama(torch.bfloat16 if why == "bfloat16" else torch.float32)
    if why == "no memory":
        monkeypatch.setattr(decode_linear, "_enough_memory", lambda nbytes: False)
    with packed_linears(model) as packed:
        assert packed == 0
        assert not any("forward" in vars(m) for m in model.modules())


def test_a_module_with_its_own_forward_keeps_it():
    model = tiny_llama()
    head = model.lm_head
    own = head.forward  # an instance attribute, as another tool's patch would be
    head.forward = own
    with packed_linears(model):
        assert vars(head)["forward"] is own
    assert vars(head)["forward"] is own
