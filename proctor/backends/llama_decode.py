"""A decode step of a Llama-family decoder in a few dozen tensor operations per layer.

transformers' decoder layer is general: keyword plumbing, output capture, an attention
interface lookup, rotary embeddings per layer, an RMSNorm of eight operations. For one
token per sample that Python and those small operations cost as much as the matmuls
(a step of SmolLM2-135M at 8 samples: about a third of its time). `LlamaDecode` runs
the same arithmetic straight from the modules' weights: the rotary cos/sin once per
step (the model's own `rotary_emb`), each norm as `F.rms_norm`, the projections through
`decode_linear.linear` (oneDNN inside `packed_linears`), and attention as the step's
`DecodeStep.attend`; the MLP is the layer's own module (one call).

It is used only where the decoder has exactly a Llama layer's parts (attention without
biases or extra norms, two RMSNorms, an MLP run as its own module) and, checked once per decoder on a probe prompt, its
step gives the decoder's own hidden states; any other decoder keeps transformers'
forward (`for_decoder` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F

from proctor.backends.decode_attention import DecodeStep, Prefill, SlotCache, length_mask, write_index
from proctor.backends.decode_linear import linear
from proctor.backends.packed_attention import PackedLayout, packed

_CHECKED = "_proctor_llama_decode"  # the decoder's verdict: its LlamaDecode, or None
_LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTENTION_PARTS = {"q_proj", "k_proj", "v_proj", "o_proj"}


@dataclass(frozen=True)
class _Layer:
    norm1: torch.Tensor
    eps1: float
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    norm2: torch.Tensor
    eps2: float
    mlp: Any                 # the layer's own MLP module (fused or not: one call per layer)


class LlamaDecode:
    """One decode step: token ids and positions [S, T] of every slot -> final hidden states [S, T, hidden]."""

    def __init__(self, decoder: Any, layers: list[_Layer]):
        self.decoder = decoder
        self.layers = layers
        attention = decoder.layers[0].self_attn
        self.head_dim = int(attention.head_dim)
        self.scale = float(attention.scaling)
        self.heads = layers[0].q.shape[0] // self.head_dim
        self.kv_heads = layers[0].k.shape[0] // self.head_dim
        self.norm, self.eps = decoder.norm.weight, float(decoder.norm.variance_epsilon)

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, step: Any) -> torch.Tensor:
        """Run the step: attention is `step.attend` (a `decode_attention.DecodeStep`)."""
        h = self.decoder.embed_tokens(ids)                       # [S, T, hidden]
        cos, sin = self.decoder.rotary_emb(h, positions)         # [S, T, d]
        cos, sin = cos[:, :, None], sin[:, :, None]              # over the heads
        (s, t), d, half = ids.shape, self.head_dim, self.head_dim // 2
        size = (h.shape[-1],)
        for i, layer in enumerate(self.layers):
            x = F.rms_norm(h, size, layer.norm1, layer.eps1)
            q = linear(x, layer.q).view(s, t, self.heads, d)
            k = linear(x, layer.k).view(s, t, self.kv_heads, d)
            v = linear(x, layer.v).view(s, t, self.kv_heads, d)
            q = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
            k = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
            out = step.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), i, self.scale)
            h = h + linear(out.reshape(s, t, -1), layer.o)
            h = h + layer.mlp(F.rms_norm(h, size, layer.norm2, layer.eps2))
        return F.rms_norm(h, size, self.norm, self.eps)


def for_decoder(decoder: Any) -> Optional[LlamaDecode]:
    """Return the decoder's `LlamaDecode`, or None where it is not exactly a Llama decoder.

    The verdict (the parts, then `agrees_with_decoder`) is reached once per decoder.
    """
    if not hasattr(decoder, _CHECKED):
        layers = _layers(decoder)
        fast = LlamaDecode(decoder, layers) if layers else None
        setattr(decoder, _CHECKED, fast if fast is not None and agrees_with_decoder(decoder, fast) else None)
    verdict: Optional[LlamaDecode] = getattr(decoder, _CHECKED)
    return verdict


def decode(decoder: Any, fast: Optional[LlamaDecode], ids: torch.Tensor, positions: torch.Tensor,
           step: DecodeStep) -> torch.Tensor:
    """Return the final hidden states [S, T, hidden] of a decode step of ids/positions [S, T]: by `fast` or the decoder."""
    if fast is not None:
        return fast(ids, positions, step)
    with packed(step):
        return decoder(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state


@torch.inference_mode()
def agrees_with_decoder(decoder: Any, fast: LlamaDecode, length: int = 6) -> bool:
    """Whether `fast` gives the decoder's own hidden states on a decode step of a random probe prompt."""
    device = next(decoder.parameters()).device
    dtype = next(decoder.parameters()).dtype
    vocab = decoder.embed_tokens.num_embeddings
    ids = torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(0)).to(device)
    states = []
    for way in (None, fast):
        cache = SlotCache(1, length - 1, length)
        with packed(Prefill(PackedLayout(((0, length - 1),)), cache, (0,))):
            decoder(input_ids=ids[None, :-1], position_ids=torch.arange(length - 1, device=device)[None],
                    use_cache=False)
        cache.start_sample(0, 0, length - 1)
        at = torch.tensor([length - 1], device=device)
        step = DecodeStep(cache, write_index(at, 1), length_mask(at + 1, length, dtype))
        states.append(decode(decoder, way, ids[None, -1:], at[:, None], step).float())
    tolerance = 1e-4 if dtype == torch.float32 else 3e-2
    return bool(torch.allclose(states[1], states[0], rtol=tolerance, atol=tolerance * float(states[0].abs().max())))


def _layers(decoder: Any) -> Optional[list[_Layer]]:
    """Each layer's weights, where every layer has exactly a Llama layer's parts; else None."""
    if not all(hasattr(decoder, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return None
    if not _is_rms_norm(decoder.norm):
        return None
    out = []
    for layer in decoder.layers:
        attention: Any = getattr(layer, "self_attn", None)
        mlp: Any = getattr(layer, "mlp", None)
        if ({n for n, _ in layer.named_children()} != _LAYER_PARTS
                or {n for n, _ in attention.named_children()} != _ATTENTION_PARTS
                or not all(_is_plain_linear(getattr(attention, n)) for n in _ATTENTION_PARTS)
                or not (_is_rms_norm(layer.input_layernorm) and _is_rms_norm(layer.post_attention_layernorm))):
            return None
        out.append(_Layer(layer.input_layernorm.weight, float(layer.input_layernorm.variance_epsilon),
                          attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight,
                          attention.o_proj.weight, layer.post_attention_layernorm.weight,
                          float(layer.post_attention_layernorm.variance_epsilon), mlp))
    return out or None


def _is_plain_linear(module: Any) -> bool:
    return isinstance(module, torch.nn.Linear) and module.bias is None


def _is_rms_norm(module: Any) -> bool:
    return (type(module).__name__.endswith("RMSNorm") and isinstance(getattr(module, "weight", None), torch.Tensor)
            and isinstance(getattr(module, "variance_epsilon", None), float))
