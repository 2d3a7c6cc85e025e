"""`codespec record`, `codespec synth` and `codespec replay` (docs/sessions.md)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError
from codespec.sessions.format import load_sessions


def register(subparsers: Any, name: str, help_text: str) -> None:
    {"record": _register_record, "synth": _register_synth, "replay": _register_replay}[name](
        subparsers, name, help_text
    )


# ---------------------------------------------------------------------------------------------- record


def _register_record(subparsers: Any, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name,
        help=help_text,
        description="Sit between an editor and any stdio LSP server and record the editor's messages "
        "as a codespec-session v1 file. Point the editor's server command at: "
        "codespec record --out FILE -- SERVER-COMMAND...",
    )
    parser.add_argument("--out", required=True, type=Path, help="session file to write (JSON Lines)")
    parser.add_argument("--source", default="recorded", help='the header\'s "source" (default: recorded)')
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- then the server command")
    parser.set_defaults(func=_run_record)


def _run_record(args: argparse.Namespace) -> int:
    from codespec.sessions.record import proxy

    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    return proxy(command, args.out, source=args.source)


# ---------------------------------------------------------------------------------------------- synth


def _register_synth(subparsers: Any, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name,
        help=help_text,
        description="Turn (before, after) file pairs or a git history into edit sessions: navigate to "
        "each hunk, delete the old lines, type the new text keystroke by keystroke with an inline "
        "completion request after each. Every session is checked to turn before into after exactly.",
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--pair", nargs=2, action="append", metavar=("BEFORE", "AFTER"), help="a file pair (repeatable)"
    )
    src.add_argument(
        "--git", type=Path, metavar="REPO", help="a git repository: its commits' changes to source files"
    )
    parser.add_argument(
        "--commits", type=int, default=None, help="with --git: at most N commits (newest first)"
    )
    parser.add_argument("--max-lines", type=int, default=40, help="with --git: most changed lines per file")
    parser.add_argument(
        "--one-file-commits", action="store_true", help="with --git: only commits that touch one source file"
    )
    parser.add_argument("--seed", type=int, default=0, help="timing seed (same seed, same session)")
    parser.add_argument(
        "--out", type=Path, required=True, help="directory for the sessions (or FILE.jsonl for one)"
    )
    parser.set_defaults(func=_run_synth)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:120]


def _run_synth(args: argparse.Namespace) -> int:
    from codespec.sessions.format import write_session
    from codespec.sessions.synth import git_changes, synth_git_change, synth_pair

    if args.pair:
        sessions = [synth_pair(Path(b), Path(a), seed=args.seed) for b, a in args.pair]
    else:
        repo_name = args.git.resolve().name
        changes = git_changes(
            args.git,
            commits=args.commits,
            max_changed_lines=args.max_lines,
            one_file_only=args.one_file_commits,
        )
        sessions = [synth_git_change(c, repo_name=repo_name, seed=args.seed) for c in changes]
    if not sessions:
        raise CodespecError("nothing to synthesize (no pair, or no modest source change in that history)")
    single = args.out.suffix == ".jsonl"
    if single and len(sessions) > 1:
        raise CodespecError(f"{len(sessions)} sessions: give a directory for --out, not a file")
    for session in sessions:
        path = args.out if single else args.out / f"{slug(session.header['source'])}.jsonl"
        write_session(session, path)
        print(f"{path}: {session.keystrokes()} keystrokes, {session.duration:.1f} s")
    return 0


# ---------------------------------------------------------------------------------------------- replay


def _register_replay(subparsers: Any, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name,
        help=help_text,
        description="Replay sessions against an LSP server (default: codespec serve --stdio) at their "
        "recorded times and report latency, cancellations and acceptance.",
    )
    parser.add_argument(
        "sessions", nargs="+", type=Path, metavar="SESSION", help="session files or directories"
    )
    parser.add_argument("--server", help='server command line (default: "codespec serve --stdio")')
    parser.add_argument("--speed", default="1", help="time factor (2 = twice as fast) or max (default 1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="latency over time and its distribution"
    )
    parser.add_argument("--records", type=Path, metavar="FILE.jsonl", help="write every request's record")
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=500.0,
        help="a keystroke followed by this long without another is a pause (default 500)",
    )
    parser.add_argument("--init-options", help="JSON initializationOptions for the server")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for answers at a close")
    parser.add_argument("--no-cancel-probe", action="store_true", help="send no probe request after a cancel")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 on errors, missing answers, answers after cancellation or a document text mismatch",
    )
    parser.set_defaults(func=_run_replay)


def correctness_failures(summary: dict[str, Any]) -> list[str]:
    checks = {
        "errors": "error responses",
        "missing": "requests without an answer",
        "duplicate_responses": "duplicate answers",
        "answered_after_cancel": "answers after cancellation",
        "documents_mismatched": "documents whose server text differs",
    }
    return [f"{summary[key]} {what}" for key, what in checks.items() if summary[key]]


def _run_replay(args: argparse.Namespace) -> int:
    from codespec.sessions.files import Writer, text_writer, write_all
    from codespec.sessions.metrics import format_table, plot_result, summarize
    from codespec.sessions.replay import default_server_command, parse_speed, replay

    if args.pause_ms <= 0:
        raise CodespecError("--pause-ms must be positive")
    sessions = load_sessions(args.sessions)
    server = shlex.split(args.server) if args.server else default_server_command()
    try:
        init_options = json.loads(args.init_options) if args.init_options else None
    except json.JSONDecodeError as exc:
        raise CodespecError(f"--init-options is not JSON: {exc.msg}") from None
    result = replay(
        sessions,
        server,
        speed=parse_speed(args.speed),
        probe_cancel=not args.no_cancel_probe,
        drain_timeout_s=args.timeout,
        init_options=init_options,
    )
    summary = summarize(result, pause_ms=args.pause_ms)
    # every file at once, each atomic, and only after the replay succeeded: no partial report
    outputs: dict[Path, Writer] = {}
    if args.records:
        outputs[args.records] = text_writer("".join(json.dumps(r.to_json()) + "\n" for r in result.records))
    if args.plot:
        outputs[args.plot] = lambda path: plot_result(result, str(path), pause_ms=args.pause_ms)
    write_all(outputs)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(format_table(summary))
    failures = correctness_failures(summary)
    if failures and args.check:
        print("codespec replay: check failed: " + ", ".join(failures), file=sys.stderr)
        return 1
    return 0
