"""`codespec bench`: benchmarks that print ratios measured side by side in one process (never timed tests).

`BENCHMARKS` maps `codespec bench NAME` to the module that runs it, which exposes `register_bench(parser)`
(adds its arguments, sets `func`). As in codespec/cli.py, a module is imported only when its benchmark is
the one asked for, so `codespec bench --help` starts without torch."""

from __future__ import annotations

import argparse
import importlib

from codespec.errors import CodespecError

# name -> (module, help); each module exposes `register_bench(parser)` (adds its arguments, sets `func`)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "generate": ("codespec.benchmarks.generate", "decode speed of every drafting mode vs plain greedy and transformers"),
    "context": ("codespec.benchmarks.context", "per-keystroke context building time on a large file"),
    "humaneval": ("codespec.benchmarks.humaneval", "HumanEval infilling with the bundled models"),
    "layout": ("codespec.benchmarks.layout", "FIM prompt layouts: tokens prefilled per keystroke, first-line match"),
    "replay": ("codespec.benchmarks.replay", "keystroke latency on replayed sessions, cold vs warm"),
    "distill": ("codespec.distill.cli", "acceptance before/after distillation"),
}
# The benchmarks whose --help has no description line (as it always was for generate).
_NO_DESCRIPTION = {"generate"}


class _LazyBenchmarks(argparse._SubParsersAction):
    """Sub-parsers whose arguments are added when their name is parsed: only the chosen module imports."""

    def __call__(self, parser, namespace, values, option_string=None):
        name = values[0]
        if name in BENCHMARKS and name not in self._loaded:
            self._loaded.add(name)
            _load(self._name_parser_map[name], name)
        super().__call__(parser, namespace, values, option_string)


def register(subparsers, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    parser = subparsers.add_parser(name, help=help, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="bench", metavar="BENCH", required=True, action=_LazyBenchmarks)
    sub._loaded = set()
    for bench_name, (_module, bench_help) in BENCHMARKS.items():
        description = None if bench_name in _NO_DESCRIPTION else bench_help
        sub.add_parser(bench_name, help=bench_help, description=description)


def _load(parser: argparse.ArgumentParser, name: str) -> None:
    """The module's own arguments when it imports (they must be known before the rest of the command line
    is parsed); a parser that explains what is missing when it does not."""
    module = BENCHMARKS[name][0]
    try:
        mod = importlib.import_module(module)
    except ImportError:
        mod = None
    if mod is None or not hasattr(mod, "register_bench"):
        parser.set_defaults(func=lambda args, m=module, n=name: _unavailable(m, n))
        return
    mod.register_bench(parser)


def _unavailable(module: str, name: str) -> int:
    raise CodespecError(f"`codespec bench {name}` is not available in this build ({module} missing)")
