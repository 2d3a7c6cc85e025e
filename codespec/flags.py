"""The command-line option spellings shared by every command, with deprecated spellings still accepted.

One name per option (`--model`, `--draft-model`, `--drafting`), and the old spellings still accepted for one
release with a deprecation line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from codespec.modes import DRAFTING_MODES, RUNTIMES


def add_deprecated_flag(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs: Any) -> None:
    """Accept `old` as `new` (same destination), saying on stderr that it is deprecated; hidden from --help."""

    class Deprecated(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            print(f"codespec: {old} is deprecated and will be removed; use {new}", file=sys.stderr)
            setattr(namespace, dest, values)

    parser.add_argument(old, dest=dest, action=Deprecated, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                        **kwargs)


def add_model_arguments(parser: argparse.ArgumentParser, *, unset_defaults: bool = False) -> None:
    """The model flags, defined once for every command that runs a model (`serve`, `generate`, `complete`, the
    benchmarks). `unset_defaults` (`serve`): a flag not given stays None, so the server's own option and then
    the client's settings decide; elsewhere "auto" is the default."""
    auto = None if unset_defaults else "auto"
    parser.add_argument("--model", help="target model spec (default: the device's profile, see `codespec models`)")
    parser.add_argument("--draft-model", help='draft model spec for --drafting model/both, or "none"')
    parser.add_argument("--drafting", choices=DRAFTING_MODES, help="none (plain greedy), lookup, model, both")
    add_deprecated_flag(parser, "--draft", "--drafting", "drafting", choices=DRAFTING_MODES)
    parser.add_argument("--device", default=auto, help="auto (cuda if present), cpu, cuda, cuda:N")
    parser.add_argument("--runtime", default=auto, choices=RUNTIMES,
                        help="auto (llama.cpp for a GGUF-backed model on a CPU, else torch), torch, llamacpp")
    parser.add_argument("--dtype", default=auto,
                        help="torch runtime: auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")
    parser.add_argument("--threads", type=int, help="CPU threads for the model")
