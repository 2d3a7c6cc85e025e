"""`codespec demo`: shows codespec completing code live, one recorded edit session through the real server.

It replays one recorded-format edit session (a CPython standard-library function typed back into its file)
through the real `codespec serve --stdio` at typing speed, prints each suggestion as the editor would show it,
then the latency table (its parser is added in codespec/cli.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
from importlib import resources
from pathlib import Path

from codespec.flags import add_deprecated_flag
from codespec.modes import DRAFTING_MODES

# Package data (pyproject.toml: [tool.setuptools.package-data]); a copy of the corpus session
# tests/sessions/data/stdlib-colorsys-hls_to_rgb.jsonl, so that an installed codespec has it too.
DEFAULT_SESSION = "stdlib-colorsys-hls_to_rgb.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session", type=Path, help="a codespec-session file (default: the session shipped in codespec/data)"
    )
    parser.add_argument("--speed", default="1", help="time factor or max (default 1: real typing speed)")
    parser.add_argument("--model", help="target model spec (default: the server's default model)")
    parser.add_argument("--draft-model", help="draft model spec")
    parser.add_argument("--drafting", choices=DRAFTING_MODES, help="drafting mode")
    add_deprecated_flag(parser, "--draft", "--drafting", "drafting", choices=DRAFTING_MODES)
    parser.add_argument("--server", help="a whole server command line instead (any LSP server)")
    parser.add_argument("--plot", type=Path, help="also write the latency plot (PNG)")
    parser.add_argument("--no-compare", dest="compare_plain", action="store_false",
                        help="skip the second replay through the plain server (no drafts)")


def load_demo_session(path: Path | None):
    """The session at `path`, else the one shipped as package data (codespec/data)."""
    from codespec.sessions.format import read_session

    if path is not None:
        return read_session(path)
    with resources.as_file(resources.files("codespec").joinpath("data", DEFAULT_SESSION)) as shipped:
        return read_session(shipped)


def server_command(args: argparse.Namespace) -> list[str]:
    if args.server:
        return shlex.split(args.server)
    command = [sys.executable, "-m", "codespec.cli", "serve", "--stdio"]
    for flag, value in (
        ("--model", args.model),
        ("--draft-model", args.draft_model),
        ("--drafting", args.drafting),
    ):
        if value:
            command += [flag, value]
    return command


def describe(record) -> str | None:
    """One line for a suggestion the editor would show: the line up to the cursor, the ghost text in
    brackets, the latency and whether the user's next typing matches it."""
    if record.outcome != "items" or not record.shown:
        return None
    from codespec.sessions.format import TextBuffer

    before = record.line_text[: TextBuffer(record.line_text).offset_at(0, record.character)]
    first, _, more = record.shown.partition("\n")
    ghost = first + (f" ⏎ +{more.count(chr(10)) + 1} lines" if more else "")
    verdict = "" if record.accepted is None else ("  accepted" if record.accepted else "  not typed")
    saved = f", saves {record.chars_saved} chars" if record.chars_saved else ""
    return f"{record.t:6.1f} s  {record.latency_ms:6.0f} ms  {before.strip()[-40:]}[{ghost[:60]}]{verdict}{saved}"


def run(args: argparse.Namespace) -> int:
    from codespec.sessions.metrics import format_table, plot_result, summarize
    from codespec.sessions.replay import parse_speed, replay

    session = load_demo_session(args.session)
    command = server_command(args)
    speed = parse_speed(args.speed)
    print(f"codespec demo: {session.header['source']}: {session.keystrokes()} keystrokes over "
          f"{session.duration:.0f} s, replayed at speed {args.speed} through: {shlex.join(command)}")  # fmt: skip
    print("(models load first; each line below is a suggestion the editor would show)\n", flush=True)

    def show(record) -> None:
        line = describe(record)
        if line:
            print(line, flush=True)

    result = replay([session], command, speed=speed, on_record=show, drain_timeout_s=120.0)
    summary = summarize(result)
    print()
    print(format_table(summary))
    if args.plot:
        plot_result(result, str(args.plot), f"codespec demo: {session.name}")
        print(f"plot: {args.plot}")
    if args.compare_plain and not args.server:
        # The same session through the same server without drafts: what the speculation buys the user.
        plain_command = list(command)
        if "--drafting" in plain_command:
            at = plain_command.index("--drafting")
            del plain_command[at : at + 2]
        plain_command += ["--drafting", "none"]
        print("\nthe same session through the plain server (no drafts) ...", flush=True)
        plain = summarize(replay([session], plain_command, speed=speed, drain_timeout_s=120.0))
        print()
        for name, row in (("speculative", summary), ("plain", plain)):
            print(pause_line(name, row["pauses"]))
    return 0


def pause_line(name: str, pauses: dict) -> str:
    """One line of the figures a user feels: ghost text at pauses, how soon, characters saved."""
    coverage = "-" if pauses["coverage"] is None else f"{pauses['coverage']:.0%}"
    p50 = pauses["time_to_ghost_ms"]["p50"]
    saved = pauses["chars_saved_per_keystroke"]
    return (f"{name:<12} ghost text at {pauses['covered']}/{pauses['count']} pauses ({coverage}), "
            f"time to ghost text p50 {'-' if p50 is None else f'{p50:.0f} ms'}, "
            f"{'-' if saved is None else f'{saved:.2f}'} chars saved per keystroke")
