"""`codespec distill`: adapt the draft model to a repository by distilling the target into it.

The target labels the repository's code by teacher forcing (its top-k next-token distribution at every
position of FIM and left-to-right examples), a LoRA on the draft learns to match it, and the merged draft
is saved as a plain HF directory for `--draft-model DIR`. `--eval` (or `codespec bench distill`) measures
acceptance and tau before and after on held-out files. Both commands' arguments are in codespec/distill/cli.py,
what a run does in codespec/distill/pipeline.py."""

from __future__ import annotations

# What `distill_loss` measures between the target's distribution and the draft's (`--divergence`); kept here,
# torch-free, so that the CLI's parser takes its choices from the same tuple the loss checks.
DIVERGENCES = ("kl", "tvd", "rkl")

