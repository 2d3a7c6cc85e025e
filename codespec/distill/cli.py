"""Command line of `codespec distill` and `codespec bench distill`: the arguments, checked, and calls into the pipeline.

What a run does (data -> labels -> training -> saved draft -> before/after evaluation) is in
codespec/distill/pipeline.py; `bench distill` is that pipeline's last step (the evaluation) run again on a saved
run, from the labels and middles it kept."""

from __future__ import annotations

import argparse
from pathlib import Path

from codespec.distill import DIVERGENCES, pipeline
from codespec.distill.pipeline import DEFAULT_LR, DEFAULT_TRAIN_TOKENS
from codespec.errors import CodespecError
from codespec.flags import add_deprecated_flag

DEFAULT_TARGET = "bundled:qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "bundled:qwen2.5-coder-0.5b"


def add_common_arguments(parser: argparse.ArgumentParser,
                         dtype_help: str = "auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16") -> None:
    parser.add_argument("--model", dest="target", default=DEFAULT_TARGET,
                        help=f"the target model spec (default {DEFAULT_TARGET})")
    add_deprecated_flag(parser, "--target", "--model", "target")
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto", help=dtype_help)
    parser.add_argument("--threads", type=int, help="CPU threads for torch")
    parser.add_argument("--seed", type=int, default=0, help="seeds the split, the examples and the training")
    parser.add_argument("--eval-prompts", type=int, default=16, help="FIM prompts from held-out files for --eval")
    parser.add_argument("--eval-max-tokens", type=int, default=48, help="new tokens per eval prompt")
    parser.add_argument("--eval-prefix-tokens", type=int, default=256, help="prefix tokens of each eval prompt")
    parser.add_argument("--replay-prompts", type=int, default=0,
                        help="also measure tau on the first N held-out prompts (N >= --eval-prompts) by replay: "
                             "one plain greedy run of the target per prompt (kept in DIR/work) and one forward of "
                             "each draft, no speculative decode; exact for tau, gives no acceptance rate or time")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_distill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, type=Path, help="the repository whose code the draft learns")
    parser.add_argument("--out", required=True, type=Path, help="output directory: the merged draft (HF format)")
    parser.add_argument("--extra-repo", type=Path, action="append", default=[], metavar="PATH",
                        help="more code to train on (repeatable): each goes through the steps --repo alone would "
                             "(split, examples, middles, labels, --max-train-tokens each) and adds its training "
                             "examples; its held-out files stay unused, the evaluation is on --repo's")
    parser.add_argument("--draft-model", dest="draft", default=DEFAULT_DRAFT,
                        help=f"the draft model spec to adapt (default {DEFAULT_DRAFT})")
    add_deprecated_flag(parser, "--draft", "--draft-model", "draft")
    parser.add_argument("--method", choices=tuple(DEFAULT_LR), default="lora",
                        help="lora: LoRA adapters on the draft, merged at the end; full: every weight but the token "
                             "embedding (fp32 weights, computing in --dtype; ~16 bytes per weight of memory); eagle: "
                             "a new EAGLE-style head (one decoder layer on the target's features, drafting with the "
                             "target's own embedding and LM head) instead of the draft model")
    add_common_arguments(parser, dtype_help="of labelling and training: auto (bf16 on CUDA and on CPUs with "
                         "AVX512-BF16 or AMX, else fp32), fp32, bf16, fp16")
    parser.add_argument("--holdout", type=float, default=0.2, help="share of files held out for evaluation")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per training example")
    # The defaults of the data mix and the loss are the best recipe measured (docs/distill.md, on-policy run).
    parser.add_argument("--fim-fraction", type=float, default=0.85, help="share of the label budget for FIM")
    parser.add_argument("--max-train-tokens", type=int,
                        help="budget of tokens the target labels for training (its forward is the cost; default "
                             f"{DEFAULT_TRAIN_TOKENS}, or as many as --max-minutes allows when it is given)")
    parser.add_argument("--max-eval-tokens", type=int, default=4000, help="same, for held-out agreement")
    parser.add_argument("--top-k", type=int, default=32, help="target probabilities kept per position")
    parser.add_argument("--greedy-fraction", type=float, default=0.1,
                        help="share of FIM examples whose middle is the target's own greedy continuation "
                             "(sequence-level distillation; costs --greedy-tokens target decode steps each)")
    parser.add_argument("--greedy-tokens", type=int, default=48, help="longest greedy continuation")
    parser.add_argument("--greedy-weight", type=float, default=1.0,
                        help="loss weight of positions in those greedy middles, relative to the others")
    parser.add_argument("--offpath-weight", type=float, default=1.0,
                        help="loss weight of positions in the draft's own middles after its first token that is "
                             "not the target's argmax (decoding never drafts from there: verification rejects it)")
    parser.add_argument("--onpolicy-fraction", type=float, default=0.8,
                        help="share of FIM examples whose middle is the draft's own greedy continuation, labelled "
                             "by the target (on-policy distillation: the draft is taught where it goes wrong; a "
                             "draft decode step per token, ~3x cheaper than the target's)")
    parser.add_argument("--greedy-batch", type=int, default=16,
                        help="prompts per batched generation (greedy and on-policy middles)")
    parser.add_argument("--eval-dtype", default="auto",
                        help="dtype of the saved draft and of --eval (default auto: what the server uses); "
                             "--dtype is for labelling and training")
    parser.add_argument("--max-minutes", type=float,
                        help="time budget of the whole run up to the saved draft: generating and labelling data "
                             "(at most --data-share of it), then training (--eval comes after, on top)")
    parser.add_argument("--data-share", type=float, default=0.4,
                        help="share of --max-minutes for generating and labelling data (default 0.4)")
    parser.add_argument("--train-minutes", type=float,
                        help="stop training after this many minutes of training (counted over resumed runs)")
    parser.add_argument("--max-steps", type=int, help="stop training after this many optimizer steps")
    parser.add_argument("--epochs", type=float, default=1.5)
    parser.add_argument("--batch", type=int, default=4, help="examples per optimizer step")
    parser.add_argument("--lr", type=float, help="peak learning rate (default 3e-4 for lora, 5e-6 for full: measured, docs/distill.md)")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (--method lora)")
    parser.add_argument("--lora-layers", type=int,
                        help="adapt only the last N decoder layers (--method lora; cheaper backward; default all)")
    parser.add_argument("--ce-weight", type=float, default=0.5, help="weight of the CE on the target's argmax")
    parser.add_argument("--divergence", choices=DIVERGENCES, default="kl",
                        help="between the target's distribution and the draft's, on top of the CE: kl = KL(target "
                             "|| draft), rkl = KL(draft || target), tvd = total variation (default kl)")
    parser.add_argument("--average-from", type=float,
                        help="save the mean of the weights after every step from this share of the planned steps "
                             "on (weight averaging, e.g. 0.5), instead of the last weights")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="optimizer steps between checkpoints")
    parser.add_argument("--fresh", action="store_true", help="ignore saved labels and checkpoints in OUT/work")
    parser.add_argument("--eval", action="store_true",
                        help="after training: acceptance and tau before/after on held-out files")
    parser.add_argument("--data-only", action="store_true",
                        help="generate and label the data (all of --max-minutes, when given) and stop: a later "
                             "run of the same command without it reuses them and trains")


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--draft-model", required=True, type=Path, help="a directory written by `codespec distill`")
    parser.add_argument("--base-draft", help="the draft before distillation (default: from DIR/distill.json)")
    add_common_arguments(parser)


def register(subparsers, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    import codespec.distill

    parser = subparsers.add_parser(name, help=help, description=codespec.distill.__doc__.splitlines()[0])
    add_distill_arguments(parser)
    parser.set_defaults(func=run_distill)


def register_bench(parser: argparse.ArgumentParser) -> None:
    """`codespec bench distill`: before/after on held-out files for a draft made by `codespec distill`."""
    add_bench_arguments(parser)
    parser.set_defaults(func=run_bench)


# ----------------------------------------------------------------------------------------------- commands


def run_distill(args: argparse.Namespace) -> int:
    _check_args(args)
    _threads(args.threads)
    return pipeline.distill(args)


def run_bench(args: argparse.Namespace) -> int:
    _threads(args.threads)
    meta = pipeline.read_report(args.draft_model)
    pipeline.evaluate_dir(
        args.draft_model, target_spec=args.target if args.target != DEFAULT_TARGET else meta["target"],
        base_spec=args.base_draft or meta["draft"], device=args.device, dtype=args.dtype,
        prompts=args.eval_prompts, max_new_tokens=args.eval_max_tokens, progress=not args.quiet,
        prefix_tokens=args.eval_prefix_tokens, replay_prompts=args.replay_prompts, agreement_report=None)
    return 0


# ----------------------------------------------------------------------------------------------- checks


def _check_args(args: argparse.Namespace) -> None:
    for name in ("seq_len", "max_train_tokens", "top_k", "batch", "rank", "eval_prompts", "eval_max_tokens",
                 "greedy_tokens", "greedy_batch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CodespecError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("max_minutes", "train_minutes"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise CodespecError(f"--{name.replace('_', '-')} must be > 0")
    if not 0.0 < args.data_share < 1.0:
        raise CodespecError("--data-share must be in (0, 1): the rest of --max-minutes is for training")
    for name in ("greedy_fraction", "onpolicy_fraction"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise CodespecError(f"--{name.replace('_', '-')} must be in [0, 1]")
    if args.greedy_weight <= 0 or not 0.0 <= args.offpath_weight <= 1.0:
        raise CodespecError("--greedy-weight must be > 0 and --offpath-weight in [0, 1]")
    if args.greedy_fraction + args.onpolicy_fraction > 1.0:
        raise CodespecError("--greedy-fraction + --onpolicy-fraction must be <= 1 (they share the FIM examples)")
    if args.average_from is not None and not 0.0 <= args.average_from < 1.0:
        raise CodespecError("--average-from must be in [0, 1): the share of the planned steps before averaging")
    if args.data_only and args.eval:
        raise CodespecError("--data-only stops before training: there is nothing to --eval")
    if args.method != "lora" and args.lora_layers is not None:
        raise CodespecError("--lora-layers is for --method lora")
    if args.method == "eagle" and args.divergence != "kl":
        raise CodespecError("--divergence is for a draft model (--method lora or full): an EAGLE head regresses the "
                            "target's features")
    for extra in args.extra_repo:
        if extra.resolve() == args.repo.resolve():
            raise CodespecError(f"--extra-repo {extra} is --repo itself")
    if args.eval and args.holdout == 0:
        raise CodespecError("--eval needs held-out files (--holdout > 0)")


def _threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        if threads < 1:
            raise CodespecError("--threads must be >= 1")
        torch.set_num_threads(threads)
