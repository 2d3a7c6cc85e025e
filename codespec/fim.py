"""The Qwen2.5-Coder FIM special tokens, spelled once for every module that builds or stops on FIM prompts.

The prompt template, the stop tokens, the tiny test tokenizer, the benchmarks' prompts and distillation read
them from here."""

from __future__ import annotations

from typing import Any

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_PAD = "<|fim_pad|>"
REPO_NAME = "<|repo_name|>"
FILE_SEP = "<|file_sep|>"

FIM_MARKERS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)  # the prompt's order: prefix, suffix, then the middle

# The FIM stop tokens: the instruct models run past <|endoftext|> in FIM mode without the others.
FIM_STOP_TOKENS = (ENDOFTEXT, IM_END, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FIM_PAD, FILE_SEP, REPO_NAME)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The FIM stop tokens that exist as single tokens in this vocabulary, plus the tokenizer's EOS."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[token] for token in FIM_STOP_TOKENS if token in vocab]
    eos = tokenizer.eos_token_id
    if isinstance(eos, int) and eos not in ids:
        ids.append(eos)
    return ids
