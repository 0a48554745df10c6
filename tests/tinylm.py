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


# ChatML, as SmolLM2's and Qwen's templates lay turns out (without SmolLM2's default system turn)
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")


def build_tokenizer(vocab_size: int = 320, *, chat: bool = False, bos: bool = False):
    """`chat`: ChatML special tokens and template, EOS <|im_end|>; `bos`: a BOS token <s> the
    tokenizer prepends with special tokens on (as Llama's and Gemma's do)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", *(["<s>"] if bos else []), *(["<|im_start|>", "<|im_end|>"] if chat else [])]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(CORPUS, trainer=trainer)
    if bos:
        bos_id = raw.token_to_id("<s>")
        raw.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>" if chat else "<|endoftext|>",
                                        **({"bos_token": "<s>"} if bos else {}))
    if chat:
        tokenizer.chat_template = CHATML
    return tokenizer


def build_tiny_model(directory: Path, *, seed: int = 0, vocab_size: int = 320, chat: bool = False,
                     bos: bool = False) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    tokenizer = build_tokenizer(vocab_size, chat=chat, bos=bos)
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
        bos_token_id=tokenizer.bos_token_id,
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
