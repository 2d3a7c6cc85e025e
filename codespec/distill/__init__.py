"""`codespec distill`: adapt the draft model to a repository by distilling the target into it.

The target labels the repository's code by teacher forcing (its top-k next-token distribution at every
position of FIM and left-to-right examples), a LoRA on the draft learns to match it, and the merged draft
is saved as a plain HF directory for `--draft-model DIR`. `--eval` (or `codespec bench distill`) measures
acceptance and tau before and after on held-out files. Heavy imports happen only when a command runs."""

from __future__ import annotations

import argparse

# What `distill_loss` measures between the target's distribution and the draft's (`--divergence`); kept here,
# torch-free, so that the CLI's parser takes its choices from the same tuple the loss checks.
DIVERGENCES = ("kl", "tvd", "rkl")


def register(subparsers, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    from codespec.distill.cli import add_distill_arguments, run_distill

    parser = subparsers.add_parser(name, help=help, description=__doc__.splitlines()[0])
    add_distill_arguments(parser)
    parser.set_defaults(func=run_distill)


def register_bench(parser: argparse.ArgumentParser) -> None:
    """`codespec bench distill`: before/after on held-out files for a draft made by `codespec distill`."""
    from codespec.distill.cli import add_bench_arguments, run_bench

    add_bench_arguments(parser)
    parser.set_defaults(func=run_bench)
