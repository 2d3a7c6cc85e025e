"""The `codespec` command line: the top-level parser that hands each sub-command to its own module.

Each sub-command lives in its own module, imported only when used, so that `codespec serve` and
`codespec --help` start without importing torch.

One convention: a command's `register(subparsers, name, help)` lives in the module named `cli.py` of the
package that owns the command (codespec/models/cli.py, codespec/context/cli.py, codespec/sessions/cli.py,
codespec/benchmarks/cli.py, codespec/distill/cli.py, lsp/cli.py); the top-level package's own commands,
`generate` and `demo`, register here, and what they run is in codespec/generate.py and codespec/demo.py
(each with `add_arguments(parser)` and `run(args)`)."""

from __future__ import annotations

import argparse
import importlib
import sys

from codespec.errors import CodespecError

# command -> (module, help). The module (a `cli.py`) exposes `register(subparsers, name, help)`; the parser it adds
# sets `func` to a callable taking the parsed args and returning an exit code.
COMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("codespec.cli", "generate from a prompt file with speculative decoding"),
    "models": ("codespec.models.cli", "list model specs and their cache state; `models fetch` prepares them"),
    "context": ("codespec.context.cli", "show the completion context built for FILE:LINE:COL"),
    "complete": ("codespec.context.cli", "complete at FILE:LINE:COL (context + generate + post-process)"),
    "serve": ("lsp.cli", "run the language server (--stdio or --tcp)"),
    "record": ("codespec.sessions.cli", "record an editor session through a stdio proxy to any LSP server"),
    "synth": ("codespec.sessions.cli", "synthesize edit sessions from file pairs or git history"),
    "replay": ("codespec.sessions.cli", "replay sessions against an LSP server and report latency"),
    "bench": ("codespec.benchmarks.cli", "benchmarks (generate, context, ...)"),
    "distill": ("codespec.distill.cli", "train a draft model on your own code"),
    "demo": ("codespec.cli", "the main job: replay a session through the real server"),
}


def register(subparsers, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    """`codespec generate` and `codespec demo`, whose modules import only when the command runs."""
    module = importlib.import_module(f"codespec.{name}")
    description = help if name == "generate" else module.__doc__.splitlines()[0]
    parser = subparsers.add_parser(name, help=help, description=description)
    module.add_arguments(parser)
    parser.set_defaults(func=module.run)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    from codespec import __version__

    parser = argparse.ArgumentParser(prog="codespec", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"codespec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        if wanted == name:
            importlib.import_module(module).register(sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except CodespecError as exc:  # expected failures: one clear line, no traceback
        print(f"codespec: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
