"""The command-line option spellings shared by every command, with deprecated spellings still accepted.

One name per option (`--model`, `--draft-model`, `--drafting`), and the old spellings still accepted for one
release with a deprecation line."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_deprecated_flag(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs: Any) -> None:
    """Accept `old` as `new` (same destination), saying on stderr that it is deprecated; hidden from --help."""

    class Deprecated(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            print(f"codespec: {old} is deprecated and will be removed; use {new}", file=sys.stderr)
            setattr(namespace, dest, values)

    parser.add_argument(old, dest=dest, action=Deprecated, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                        **kwargs)
