"""The drafting modes' and runtimes' names, defined once and importable without torch (the server's options, the CLIs)."""

DRAFTING_MODES = ("none", "lookup", "model", "both")  # none: plain greedy; both: lookup, then the draft model
SPECULATIVE_MODES = DRAFTING_MODES[1:]  # the modes that draft at all
# auto: llama.cpp for a GGUF-backed model on a CPU, else torch; ik-llamacpp: the ik_llama.cpp fork (measured, not
# the default: experiments/cheap-verify/log.md)
RUNTIMES = ("auto", "torch", "llamacpp", "ik-llamacpp")
LLAMACPP_RUNTIMES = ("llamacpp", "ik-llamacpp")  # GGUF files on the CPU
