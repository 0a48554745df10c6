"""Tiny random models (Llama, GPT-2) + a byte-level BPE tokenizer trained in-process, saved as model dirs.

Deterministic (fixed seed, fixed corpus), builds in well under a second, and its
tokenizer splits words into several tokens so multi-token continuations occur.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "The following are multiple choice questions (with answers) about astronomy.",
    "Question: Which planet is closest to the sun?\n A. Mercury\n B. Venus\n C. Earth\n D. Mars\nAnswer: A",
    "Question: What is the boiling point of water at sea level?\nAnswer: 100 degrees Celsius",
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine.",
    "Paris is the capital of France. Berlin is the capital of Germany.",
] * 20


def build_tokenizer(vocab_size: int = 320):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")


def build_tiny_model(directory: Path, *, seed: int = 0, vocab_size: int = 320) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    tokenizer = build_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.1,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    return _save(directory, LlamaForCausalLM(config), tokenizer)


def build_tiny_gpt2(directory: Path, *, seed: int = 0, vocab_size: int = 320) -> Path:
    """GPT-2 style: learned absolute position embeddings, fused QKV, LayerNorm, tied head."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = Path(directory)
    tokenizer = build_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=2048,  # room for the default --max-length
        n_embd=32,
        n_layer=2,
        n_head=4,
        initializer_range=0.1,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return _save(directory, GPT2LMHeadModel(config), tokenizer)


def _save(directory: Path, model, tokenizer) -> Path:
    model.eval().save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory
