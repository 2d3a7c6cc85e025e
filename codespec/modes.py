"""The drafting modes' and runtimes' names, defined once and importable without torch (the server's options, the CLIs)."""

DRAFTING_MODES = ("none", "lookup", "model", "both")  # none: plain greedy; both: lookup, then the draft model
SPECULATIVE_MODES = DRAFTING_MODES[1:]  # the modes that draft at all
# auto: for a GGUF-backed model on a CPU the ik_llama.cpp fork where it loads (faster here: experiments/cheap-verify/
# log.md), else llama.cpp; otherwise torch
RUNTIMES = ("auto", "torch", "llamacpp", "ik-llamacpp")
LLAMACPP_RUNTIMES = ("llamacpp", "ik-llamacpp")  # GGUF files on the CPU
