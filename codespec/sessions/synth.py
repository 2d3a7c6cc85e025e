"""Synthesize realistic edit sessions from (before, after) file pairs and from git history.

For each changed hunk the simulated user navigates there, deletes the old lines in one edit and types
the new text one keystroke at a time, with an inline-completion request after every keystroke (as VS
Code asks) that carries what the user types next as its `expect`. The timing model and its sources are
documented in docs/sessions.md ("Timing model").
"""

from __future__ import annotations

import difflib
import math
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from codespec.errors import CodespecError
from codespec.sessions.format import (
    DID_CHANGE,
    DID_CLOSE,
    DID_OPEN,
    INLINE_COMPLETION,
    Event,
    Session,
    TextBuffer,
    final_texts,
    first_lines,
    lsp_range,
    make_header,
    validate_session,
)

LANGUAGES = {
    ".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c", ".cpp": "cpp", ".cc": "cpp", ".hpp": "cpp", ".rb": "ruby", ".lua": "lua",
    ".sh": "shellscript",
}  # fmt: skip
NEXT_LINES_KEPT = 3  # expect.next_lines holds at most this many lines (suggestions are shorter)
AUTOMATIC_TRIGGER = 2  # lsprotocol InlineCompletionTriggerKind.Automatic
# Neighbouring keys on a QWERTY keyboard: typos hit a key next to the intended one.
_QWERTY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


@dataclass(frozen=True)
class TimingModel:
    """Seconds between client messages. See docs/sessions.md for the cited basis of each number."""

    key_median_s: float = 0.19  # lognormal inter-key gap; median 190 ms, mean ~231 ms = ~52 WPM
    key_sigma: float = 0.625  # log-space spread that gives that mean: exp(sigma^2 / 2) = 231 / 190
    key_min_s: float = 0.03
    key_max_s: float = 0.8  # longer gaps are pauses, modelled below
    think_s: float = 1.35  # KLM mental-preparation operator M
    think_sigma: float = 0.3
    think_rate: float = 1 / 3  # share of line starts that get a think pause
    navigate_s: float = 1.5  # KLM point (1.1 s) + home (0.4 s) to reach the hunk
    navigate_sigma: float = 0.25
    typo_rate: float = 0.02  # share of typed characters that are typos, each fixed by one backspace
    close_after_s: float = 1.0

    def key_gap(self, rng: random.Random) -> float:
        gap = rng.lognormvariate(math.log(self.key_median_s), self.key_sigma)
        return min(max(gap, self.key_min_s), self.key_max_s)

    def think_pause(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.think_s), self.think_sigma)

    def navigate(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.navigate_s), self.navigate_sigma)


@dataclass(frozen=True)
class Hunk:
    start: int  # character offsets in the before text
    end: int
    new_text: str


def line_hunks(before: str, after: str) -> list[Hunk]:
    """Line-level changes turning `before` into `after`, as character spans of `before`."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [
        Hunk(offsets[i1], offsets[i2], "".join(new[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def keystrokes(text: str) -> list[str]:
    """Split typed text into keystrokes. Editors auto-indent: Enter inserts the newline and the next
    line's indentation in one change, and the indentation of the first line is one change (Tab)."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\n" or i == 0:
            j = i + 1 if text[i] == "\n" else i
            while j < len(text) and text[j] in " \t":
                j += 1
            if j > i:
                keys.append(text[i:j])
                i = j
                continue
        keys.append(text[i])
        i += 1
    return keys


def _typo_for(ch: str, rng: random.Random) -> str | None:
    """A neighbouring key for a letter (same case), or None where no typo is modelled."""
    for row in _QWERTY_ROWS:
        k = row.find(ch.lower())
        if k >= 0:
            near = [row[m] for m in (k - 1, k + 1) if 0 <= m < len(row)]
            typo = rng.choice(near)
            return typo.upper() if ch.isupper() else typo
    return None


class _Writer:
    """Builds the event list while tracking the document, so that every range is exact."""

    def __init__(self, uri: str, language: str, before: str, timing: TimingModel, rng: random.Random):
        self.timing, self.rng = timing, rng
        self.docs: dict[str, TextBuffer] = {}
        self.t = 0.0
        self.events: list[Event] = []
        self.open(uri, language, before)

    def open(self, uri: str, language: str, text: str) -> None:
        """didOpen (version 1) at the current time; the document becomes the active one."""
        self.uri = uri
        self.docs[uri] = TextBuffer(text, 1)
        params = {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}}
        self.events.append(Event(self.t, DID_OPEN, params))

    @property
    def doc(self) -> TextBuffer:
        return self.docs[self.uri]

    def change(self, start: int, end: int, text: str) -> int:
        """Send one incremental change replacing [start, end); returns the cursor offset after it."""
        rng_ = lsp_range(self.doc.position_at(start), self.doc.position_at(end))
        self.doc.apply(rng_, text)
        self.doc.version += 1
        params = {
            "textDocument": {"uri": self.uri, "version": self.doc.version},
            "contentChanges": [{"range": rng_, "text": text}],
        }
        self.events.append(Event(self.t, DID_CHANGE, params))
        return start + len(text)

    def request(self, cursor: int, remaining: str | None) -> None:
        line, character = self.doc.position_at(cursor)
        params = {
            "textDocument": {"uri": self.uri},
            "position": {"line": line, "character": character},
            "context": {"triggerKind": AUTOMATIC_TRIGGER},
        }
        expect = None
        if remaining is not None:
            line_rest, _, next_lines = remaining.partition("\n")
            expect = {"line_rest": line_rest, "next_lines": first_lines(next_lines, NEXT_LINES_KEPT)}
        self.events.append(Event(self.t, INLINE_COMPLETION, params, expect))

    def type_hunk(self, offset: int, hunk: Hunk, *, enter_at_end: bool = False) -> int:
        """Navigate, delete the old lines, type the new ones; returns the offset after the typed text.

        With `enter_at_end` (as editors type), new lines that follow a line are typed from the END of that
        line: Enter (newline + auto-indent), then the line, so the text right of the cursor is empty; the
        old lines go with the line break before them. Otherwise the new text is typed at the start of the
        first old line, in front of the text that follows."""
        self.t += self.timing.navigate(self.rng)
        text, start, end = hunk.new_text, offset, offset + hunk.end - hunk.start
        doc = self.doc.text
        if (
            enter_at_end
            and start > 0
            and doc[start - 1] == "\n"
            and text.endswith("\n")
            and (end == start or doc[end - 1] == "\n")
        ):
            start, end, text = start - 1, end - 1, "\n" + text[:-1]
        cursor = start
        if end > start:
            cursor = self.change(start, end, "")
            self.request(cursor, text)
            self.t += self.timing.key_gap(self.rng)
        typed = 0
        for key in keystrokes(text):
            # A think pause comes before the first character of a line (after Enter and auto-indent).
            line_start = not key.isspace() and text[text.rfind("\n", 0, typed) + 1 : typed].strip() == ""
            if line_start and self.rng.random() < self.timing.think_rate:
                self.t += self.timing.think_pause(self.rng)
            typo = _typo_for(key, self.rng) if self.rng.random() < self.timing.typo_rate else None
            if typo is not None:
                cursor = self.change(cursor, cursor, typo)
                self.request(cursor, None)  # the user is about to erase it: no ground truth
                self.t += self.timing.key_gap(self.rng)
                cursor = self.change(cursor - 1, cursor, "")
                self.request(cursor, text[typed:])
                self.t += self.timing.key_gap(self.rng)
            cursor = self.change(cursor, cursor, key)
            typed += len(key)
            self.request(cursor, text[typed:])
            self.t += self.timing.key_gap(self.rng)
        return cursor

    def close(self) -> None:
        self.t += self.timing.close_after_s
        for uri in self.docs:  # in the order they were opened
            self.events.append(Event(self.t, DID_CLOSE, {"textDocument": {"uri": uri}}))


def synth_session(
    before: str,
    after: str,
    *,
    uri: str,
    language: str,
    source: str,
    seed: int = 0,
    timing: TimingModel | None = None,
) -> Session:
    """One session that edits `before` into `after`; checked with `check_session` before it returns."""
    timing = timing or TimingModel()
    writer = _Writer(uri, language, before, timing, random.Random(f"{seed}:{source}"))
    delta = 0  # how far the current document's offsets have moved from `before`'s
    for hunk in line_hunks(before, after):
        start = hunk.start + delta
        writer.type_hunk(start, hunk)
        delta += len(hunk.new_text) - (hunk.end - hunk.start)
    writer.close()
    session = Session(make_header(source, language, seed=seed), writer.events)
    check_session(session, before, after)
    return session


def check_session(session: Session, before: str, after: str) -> None:
    """Prove the session is valid and that applying its edits to `before` gives `after` exactly."""
    problems = validate_session(session, strict=True)
    if problems:
        raise CodespecError(f"synthesized session is invalid: {problems[0]} ({len(problems)} problems)")
    opens = [e for e in session.events if e.method == DID_OPEN]
    if len(opens) != 1 or opens[0].params["textDocument"]["text"] != before:
        raise CodespecError("synthesized session does not open exactly the before text")
    (text,) = final_texts(session).values()
    if text != after:
        raise CodespecError("applying the session's edits to before does not give after")


# ----------------------------------------------------------------------------------------------
# A change across files, typed as editors type, with navigation between its hunks


@dataclass(frozen=True)
class FileChange:
    """One file of a change: `after` is `before` with the change's hunks applied."""

    path: str  # relative path: the URI's tail and, by its suffix, the language
    before: str
    after: str


def apply_hunks(before: str, hunks: list[Hunk]) -> str:
    """`before` with some of its line hunks (from `line_hunks`) applied."""
    out, last = [], 0
    for hunk in sorted(hunks, key=lambda h: h.start):
        out += [before[last : hunk.start], hunk.new_text]
        last = hunk.end
    return "".join(out) + before[last:]


def synth_change(
    files: list[FileChange],
    order: list[tuple[int, int]],
    *,
    uri_root: str,
    source: str,
    seed: int = 0,
    timing: TimingModel | None = None,
) -> Session:
    """One session typing a change across `files` as an editor types it (Enter at the end of the
    previous line, then the new line with auto-indent; see `_Writer.type_hunk`). `order` lists every
    hunk once as (file index, index into `line_hunks(file.before, file.after)`), in the order the user
    visits them: a later hunk before an earlier one is a jump back up, a hunk in another file a file
    switch (the file's didOpen comes at its first visit; every file is closed at the end). The header
    notes `files`, `hunks`, `jumps` (moves within a file) and `file_switches`. Checked with
    `check_change` before it returns."""
    timing = timing or TimingModel()
    hunks = [line_hunks(f.before, f.after) for f in files]
    if sorted(order) != [(i, k) for i, file_hunks in enumerate(hunks) for k in range(len(file_hunks))]:
        raise CodespecError("the order must name every hunk of every file exactly once")
    rng = random.Random(f"{seed}:{source}")
    writer: _Writer | None = None
    applied: list[list[Hunk]] = [[] for _ in files]
    jumps = switches = 0
    previous: int | None = None
    for file_index, hunk_index in order:
        file, hunk = files[file_index], hunks[file_index][hunk_index]
        uri = f"{uri_root}/{file.path}"
        language = language_for(file.path) or "plaintext"
        if writer is None:
            writer = _Writer(uri, language, file.before, timing, rng)
        elif uri not in writer.docs:
            writer.t += timing.navigate(rng)  # finding the file and opening it
            writer.open(uri, language, file.before)
        else:
            writer.uri = uri
        if previous is not None:
            jumps += previous == file_index
            switches += previous != file_index
        previous = file_index
        delta = sum(len(h.new_text) - (h.end - h.start) for h in applied[file_index] if h.start < hunk.start)
        writer.type_hunk(hunk.start + delta, hunk, enter_at_end=True)
        applied[file_index].append(hunk)
    if writer is None:
        raise CodespecError("a change needs at least one hunk")
    writer.close()
    language = language_for(files[order[0][0]].path) or "plaintext"
    header = make_header(source, language, seed=seed, files=len(files), hunks=len(order), jumps=jumps,
                         file_switches=switches)  # fmt: skip
    session = Session(header, writer.events)
    check_change(session, files, uri_root)
    return session


def check_change(session: Session, files: list[FileChange], uri_root: str) -> None:
    """Prove a multi-file session valid, opening each file's `before` once and ending at its `after`."""
    problems = validate_session(session, strict=True)
    if problems:
        raise CodespecError(f"synthesized session is invalid: {problems[0]} ({len(problems)} problems)")
    opened = {e.uri: e.params["textDocument"]["text"] for e in session.events if e.method == DID_OPEN}
    texts = final_texts(session)
    for file in files:
        uri = f"{uri_root}/{file.path}"
        if opened.get(uri) != file.before:
            raise CodespecError(f"the session does not open exactly the before text of {file.path}")
        if texts.get(uri) != file.after:
            raise CodespecError(f"applying the session's edits to {file.path} does not give its after text")


def language_for(path: str | Path) -> str | None:
    return LANGUAGES.get(Path(path).suffix.lower())


def synth_pair(
    before_path: Path, after_path: Path, *, seed: int = 0, timing: TimingModel | None = None
) -> Session:
    try:
        before = before_path.read_text(encoding="utf-8")
        after = after_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CodespecError(f"cannot read the pair {before_path}, {after_path}: {exc}") from None
    language = language_for(after_path) or "plaintext"
    uri = f"file:///synth/pair/{after_path.name}"
    return synth_session(before, after, uri=uri, language=language, source=f"pair:{after_path.name}",
                         seed=seed, timing=timing)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# git history


@dataclass(frozen=True)
class GitChange:
    commit: str
    path: str
    before: str
    after: str
    changed_lines: int


def _git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True)
    except FileNotFoundError:
        raise CodespecError("git is not installed") from None
    except subprocess.CalledProcessError as exc:
        raise CodespecError(
            f"git {' '.join(args[:2])} failed: {exc.stderr.decode(errors='replace').strip()}"
        ) from None
    return out.stdout.decode("utf-8", errors="surrogateescape")


def _blob(repo: Path, commit: str, path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=True
        )
    except subprocess.CalledProcessError:
        return None
    try:
        return out.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None


def git_changes(
    repo: str | Path,
    *,
    commits: int | None = None,
    max_changed_lines: int = 40,
    min_changed_lines: int = 1,
    one_file_only: bool = False,
    revisions: list[str] | None = None,
) -> Iterator[GitChange]:
    """Modest changes to single source files in the history of `repo` (newest first): for each
    non-merge commit, every source file whose added + deleted lines lie in range (with `one_file_only`,
    only commits that touch exactly one source file). `commits` caps how many commits yield changes;
    `revisions` pins exact commits (for a reproducible corpus)."""
    repo = Path(repo)
    shas = revisions or _git(repo, "log", "--no-merges", "--format=%H").split()
    used = 0
    for sha in shas:
        if commits is not None and used >= commits:
            return
        found = False
        files = _numstat(repo, sha)
        if one_file_only and len(files) != 1:
            continue
        for path, changed in files:
            if not (min_changed_lines <= changed <= max_changed_lines):
                continue
            after = _blob(repo, sha, path)
            before = _blob(repo, f"{sha}^", path) if _has_parent(repo, sha) else ""
            if after is None or before is None or before == after:
                continue
            found = True
            yield GitChange(sha, path, before, after, changed)
        used += found


def _has_parent(repo: Path, sha: str) -> bool:
    return len(_git(repo, "rev-list", "--parents", "-n", "1", sha).split()) > 1


def _numstat(repo: Path, sha: str) -> list[tuple[str, int]]:
    """(path, added + deleted) for each source file the commit changes (binary files skipped)."""
    out = _git(repo, "show", "--numstat", "--format=", "--no-renames", sha)
    files = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() and language_for(parts[2]):
            files.append((parts[2], int(parts[0]) + int(parts[1])))
    return files


def synth_git_change(change: GitChange, *, repo_name: str, seed: int = 0,
                     timing: TimingModel | None = None) -> Session:  # fmt: skip
    language = language_for(change.path) or "plaintext"
    uri = f"file:///synth/{repo_name}/{change.commit[:10]}/{change.path}"
    source = f"git:{repo_name}@{change.commit[:12]}:{change.path}"
    return synth_session(change.before, change.after, uri=uri, language=language, source=source,
                         seed=seed, timing=timing)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# CPython standard library: delete a function body, type it back


@dataclass(frozen=True)
class FunctionEdit:
    module: str  # file name relative to the stdlib directory
    function: str
    before: str  # the file with the function's body removed
    after: str  # the file as installed


def stdlib_function_edit(relpath: str, function: str, stdlib_dir: str | Path | None = None) -> FunctionEdit:
    """The file with `function`'s body (everything after its `def` line(s)) deleted, and the file itself.
    `function` is a top-level function or `Class.method`; its docstring stays, so typing starts
    at the first statement after it."""
    import ast
    import sysconfig

    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    after = (root / relpath).read_text(encoding="utf-8")
    node = _find_function(ast.parse(after), function.split("."))
    if node is None:
        raise CodespecError(f"no function {function} in {relpath}")
    body = node.body
    if (
        len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
    ):
        body = body[1:]  # keep the docstring
    lines = after.splitlines(keepends=True)
    first, last = body[0].lineno - 1, node.end_lineno  # 0-based start, exclusive end
    before = "".join(lines[:first] + lines[last:])
    return FunctionEdit(relpath, function, before, after)


def _find_function(tree, names: list[str]):
    import ast

    scope = tree.body
    for depth, name in enumerate(names):
        found = None
        for node in scope:
            is_last = depth == len(names) - 1
            kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if is_last else (ast.ClassDef,)
            if isinstance(node, kinds) and node.name == name:
                found = node
                break
        if found is None:
            return None
        scope = found.body
    return found


def synth_function_edit(edit: FunctionEdit, *, python: str, seed: int = 0,
                        timing: TimingModel | None = None) -> Session:  # fmt: skip
    uri = f"file:///synth/stdlib/{edit.module}"
    source = f"cpython-{python}-stdlib:{edit.module}:{edit.function}"
    return synth_session(edit.before, edit.after, uri=uri, language="python", source=source,
                         seed=seed, timing=timing)  # fmt: skip
