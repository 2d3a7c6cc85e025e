"""Tiny random-weight test models, so tests run the real model code paths in milliseconds without weights.

Tiny random-weight Qwen2-architecture models with a byte-level tokenizer that carries the Qwen
special tokens. They exercise the real code paths (HF model, KV cache, tokenizer, FIM tokens) in
milliseconds, so unit tests and server tests need no weights."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from codespec import fim

if TYPE_CHECKING:  # torch and transformers only where a model is built: the thin client uses the tokenizer
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

QWEN_SPECIAL_TOKENS = [  # in this order: the tiny vocabulary's ids follow it
    fim.ENDOFTEXT,
    fim.IM_START,
    fim.IM_END,
    fim.FIM_PREFIX,
    fim.FIM_MIDDLE,
    fim.FIM_SUFFIX,
    fim.FIM_PAD,
    fim.REPO_NAME,
    fim.FILE_SEP,
]


def tiny_tokenizer_object() -> Tokenizer:
    """Byte-level BPE without merges: every byte is a token, so any text round-trips exactly; then the Qwen
    special tokens, in QWEN_SPECIAL_TOKENS' order."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in QWEN_SPECIAL_TOKENS])
    return tok


@lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny tokenizer as transformers wraps it (what a loaded tiny model carries)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tiny_tokenizer_object(), eos_token=fim.ENDOFTEXT,
                                   pad_token=fim.ENDOFTEXT)
    fast.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL_TOKENS[1:]})
    return fast


def tiny_config(vocab_size: int, *, layers: int = 2, hidden: int = 64) -> Qwen2Config:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        # Wider than the default init: output then depends on the context and varies (neither one repeated
        # token nor pure noise), so drafts get both accepted and rejected.
        initializer_range=0.1,
        bos_token_id=None,
        eos_token_id=0,
    )


def tiny_model(seed: int = 0, *, layers: int = 2, hidden: int = 64, vocab_size: int | None = None) -> Qwen2ForCausalLM:
    """A deterministic random model; `vocab_size` lets tests use a small vocabulary for statistics."""
    import torch
    from transformers import Qwen2ForCausalLM

    vocab_size = vocab_size or len(tiny_tokenizer())
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(tiny_config(vocab_size, layers=layers, hidden=hidden))
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()
