"""Regenerate the session corpus in tests/sessions/data/ (`make sessions-corpus`).

Deterministic: the same Python standard library and the same pinned commits of this repository give
byte-identical files. Sessions come from (1) CPython standard-library functions whose body is deleted
and typed back, and (2) real commits of this repository: one session per modest change to one file.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from codespec.sessions.cli import slug  # noqa: E402
from codespec.sessions.format import write_session  # noqa: E402
from codespec.sessions.synth import (  # noqa: E402
    git_changes,
    stdlib_function_edit,
    synth_function_edit,
    synth_git_change,
)

DATA = Path(__file__).resolve().parent / "data"
SEED = 6
MAX_KEYSTROKES = 400  # keep each session modest so replay tests stay fast

# (file in the standard library, function): bodies of 150-320 keystrokes.
STDLIB_FUNCTIONS = [
    ("colorsys.py", "rgb_to_hsv"),
    ("colorsys.py", "hls_to_rgb"),
    ("heapq.py", "_siftdown"),
    ("heapq.py", "heappop"),
    ("glob.py", "_glob1"),
    ("glob.py", "escape"),
    ("fnmatch.py", "filter"),
    ("base64.py", "b64decode"),
    ("calendar.py", "monthrange"),
    ("copy.py", "_deepcopy_tuple"),
    ("linecache.py", "getlines"),
    ("getopt.py", "short_has_arg"),
    ("copyreg.py", "_reconstructor"),
    ("gettext.py", "_tokenize"),
    ("filecmp.py", "_do_cmp"),
]

# (commit, file) changes of this repository's history (full hashes, so a clone regenerates them).
GIT_CHANGES: list[tuple[str, str]] = [
    ("4245b55bbc3ed95504087e75a7484783cea7ba9a", "codespec/__init__.py"),
    ("4245b55bbc3ed95504087e75a7484783cea7ba9a", "codespec/errors.py"),
    ("4245b55bbc3ed95504087e75a7484783cea7ba9a", "lsp/__init__.py"),
    ("02d1bc87137cf51eff9f00f3578808960c40bdc9", "tests/editors/nvim_init.lua"),
    ("02d1bc87137cf51eff9f00f3578808960c40bdc9", "tests/editors/standin_server.py"),
    ("4251b2ea97f6b6e60cbd2e4b7a87f2d8d83428fb", "lsp/cli.py"),
    ("5723dc8b784c8dcfc02b4074b75edd950109859c", "codespec/context/mode.py"),
    ("6bf34338a647d5d58b424a2b16ad0bcdc1a4829a", "codespec/engine.py"),
    ("6f142c26311fbea246548d6a3cd1a5ad59a49767", "lsp/server.py"),
    ("151ee7b07785f20c0dd17594e497044782cf90cd", "codespec/context/postprocess.py"),
    ("f5052171bb8f45cabd72b7b4fba6e2728d738d1c", "lsp/options.py"),
    ("52598778bdf47332e6b00ebaec65bb171a1d700d", "codespec/reliability/soak.py"),
]


def stdlib_sessions():
    python = platform.python_version()
    for module, function in STDLIB_FUNCTIONS:
        edit = stdlib_function_edit(module, function)
        yield f"stdlib-{Path(module).stem}-{function}", synth_function_edit(edit, python=python, seed=SEED)


def git_sessions(changes: list[tuple[str, str]]):
    wanted = set(changes)
    revisions = list(dict.fromkeys(sha for sha, _ in changes))
    for change in git_changes(REPO, revisions=revisions, max_changed_lines=60):
        if (change.commit, change.path) not in wanted:
            continue
        session = synth_git_change(change, repo_name="codespec", seed=SEED)
        if 20 <= session.keystrokes() <= MAX_KEYSTROKES:
            yield f"git-{change.commit[:10]}-{slug(change.path)}", session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--list-git", action="store_true", help="print candidate commits of this repository")
    args = parser.parse_args()
    if args.list_git:
        for change in git_changes(REPO, max_changed_lines=60):
            session = synth_git_change(change, repo_name="codespec", seed=SEED)
            print(change.commit, change.path, session.keystrokes())
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.jsonl"):
        old.unlink()
    count = 0
    for name, session in [*stdlib_sessions(), *git_sessions(GIT_CHANGES)]:
        path = write_session(session, args.out / f"{name}.jsonl")
        print(
            f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {session.keystrokes()} keystrokes"
        )
        count += 1
    print(f"{count} sessions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
