"""The Qwen2.5-Coder FIM special tokens, spelled once for every module that builds or stops on FIM prompts.

The prompt template, the stop tokens, the tiny test tokenizer, the benchmarks' prompts and distillation read
them from here."""

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
