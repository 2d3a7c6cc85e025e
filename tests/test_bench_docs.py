"""`make bench` rewrites docs/benchmarks.md only between markers it already has: each command's block exists once.

Every benchmark command of the Makefile's `bench` target rewrites one `<!-- KEY:start -->` .. `<!-- KEY:end -->`
block of docs/benchmarks.md and nothing else; where the file has no such block the command appends a new one,
leaving the stale table it was meant to replace in place (as happened when `bench generate` began to name
the runtime in its key). The keys are computed here by the benchmarks' own code from the Makefile's arguments.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from codespec.benchmarks import load, replay
from codespec.benchmarks.generate import label_slug, run_label
from codespec.cli import build_parser
from codespec.models.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
CODESPEC = "$(VENV)/bin/codespec"


def bench_commands() -> list[list[str]]:
    """The `codespec ...` argument lists of the Makefile's `bench` recipe (continuation lines joined)."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("bench:"))
    recipe: list[str] = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    commands = " ".join(recipe).replace("\\ ", " ").split(CODESPEC)
    return [shlex.split(command) for command in commands if command.strip()]


def marker_key(argv: list[str]) -> str:
    args = build_parser(argv).parse_args(argv)
    if argv[:2] == ["bench", "replay"]:
        return load.MARKER if args.parallel else replay.MARKER
    if argv[:2] == ["bench", "generate"]:
        assert args.runtime != "auto", "make bench names the runtime: the key depends on it"
        draft = parse_spec(args.draft_model).name if args.draft_model else None
        return "bench-generate-" + label_slug(run_label(parse_spec(args.target).name, args.runtime, draft))
    raise AssertionError(f"make bench runs {shlex.join(argv)}: this test does not know which block it writes")


COMMANDS = bench_commands()


def test_the_bench_target_runs_every_benchmark_that_owns_a_table():
    kinds = [(argv[1], "--parallel" in argv) for argv in COMMANDS]
    assert ("generate", False) in kinds and ("replay", False) in kinds and ("replay", True) in kinds


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv[:4]) for argv in COMMANDS])
def test_each_make_bench_command_has_its_block_in_the_docs(argv):
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    key = marker_key(argv)
    assert text.count(f"<!-- {key}:start -->") == 1 and text.count(f"<!-- {key}:end -->") == 1, key
    assert text.index(f"<!-- {key}:start -->") < text.index(f"<!-- {key}:end -->")
    if "--markdown" in argv:
        assert argv[argv.index("--markdown") + 1] == "docs/benchmarks.md"
    else:
        assert argv[1] == "generate" and argv[argv.index("--out") + 1] == "docs"  # writes OUT/benchmarks.md


def test_the_keys_are_distinct():
    keys = [marker_key(argv) for argv in COMMANDS]
    assert len(keys) == len(set(keys))
