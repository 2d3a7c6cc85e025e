"""Edit-sequence fuzz: random `didChange` sequences against a reference string model.

Sequences mix inserts, deletions across lines, replacements and full-text replacements, on text
full of surrogate pairs (emoji), CJK, CRLF, lone CR and tabs, with utf-16 positions at every code
point boundary, past the end of a line or of the document (clamped, as docs/server.md says) and,
rarely, inside a surrogate pair (rounded down, as codespec.context.Document says). One
notification may carry several changes, applied in order. The reference below is written from
the LSP rules, independently of codespec.context.Document; the check is that the server's copy
(`codespec/documentText`) and an in-process Document both equal it.

    python -m codespec.reliability.edits --sequences 1000 [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

LINE_BREAK = re.compile(r"\r\n|\r|\n")
PIECES = ["a", "b", "xyz", " ", "\t", "\n", "\r\n", "\r", "é", "中文", "😀", "\U0001f9ea", "👍🏽", "def ", "()", "\u200b"]
Change = dict[str, Any]


# ----- the reference model --------------------------------------------------------------------


def utf16_units(char: str) -> int:
    return 2 if ord(char) > 0xFFFF else 1


def lines_of(text: str) -> list[tuple[int, int]]:
    """(start, end of content) of each line; LSP lines end at \\r\\n, \\r or \\n."""
    spans, start = [], 0
    for match in LINE_BREAK.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return spans


def reference_offset(text: str, line: int, character: int) -> int:
    spans = lines_of(text)
    if line >= len(spans):
        return len(text)
    start, end = spans[line]
    units = 0
    for index in range(start, end):
        width = utf16_units(text[index])
        if units + width > character:
            return index
        units += width
    return end


def reference_apply(text: str, change: Change) -> str:
    if "range" not in change:
        return change["text"]
    span = change["range"]
    start = reference_offset(text, span["start"]["line"], span["start"]["character"])
    end = reference_offset(text, span["end"]["line"], span["end"]["character"])
    start, end = min(start, end), max(start, end)
    return text[:start] + change["text"] + text[end:]


def positions(text: str) -> list[tuple[int, int]]:
    """Every code point boundary as a utf-16 position, the ends of lines included."""
    found = []
    for line, (start, end) in enumerate(lines_of(text)):
        units = 0
        found.append((line, 0))
        for index in range(start, end):
            units += utf16_units(text[index])
            found.append((line, units))
    return found


# ----- strategies -----------------------------------------------------------------------------

texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@st.composite
def position_in(draw: st.DrawFn, text: str) -> dict[str, int]:
    roll = draw(st.integers(0, 19))
    spans = lines_of(text)
    if roll == 0:  # past the end of a line
        line = draw(st.integers(0, len(spans) - 1))
        return {"line": line, "character": draw(st.integers(0, 40)) + 1000 * draw(st.integers(0, 1))}
    if roll == 1:  # past the last line
        return {"line": len(spans) + draw(st.integers(0, 3)), "character": draw(st.integers(0, 5))}
    if roll == 2:  # inside a surrogate pair, where there is one
        inside = [(line, units - 1) for line, units in positions(text) if units and _ends_pair(text, line, units)]
        if inside:
            line, character = draw(st.sampled_from(inside))
            return {"line": line, "character": character}
    line, character = draw(st.sampled_from(positions(text)))
    return {"line": line, "character": character}


def _ends_pair(text: str, line: int, units: int) -> bool:
    start, _ = lines_of(text)[line]
    index = reference_offset(text, line, units)
    return index > start and utf16_units(text[index - 1]) == 2


@st.composite
def change_for(draw: st.DrawFn, text: str) -> Change:
    kind = draw(st.sampled_from(["insert", "insert", "delete", "replace", "full", "lines"]))
    if kind == "full":
        return {"text": draw(texts)}
    start = draw(position_in(text))
    if kind == "insert":
        return {"range": {"start": start, "end": start}, "text": draw(texts)}
    if kind == "lines":  # a deletion (or replacement) across lines, maybe given end-first
        spans = lines_of(text)
        end = {"line": min(start["line"] + draw(st.integers(1, 4)), len(spans)), "character": draw(st.integers(0, 6))}
        first, second = (end, start) if draw(st.booleans()) else (start, end)
        return {"range": {"start": first, "end": second}, "text": draw(st.sampled_from(["", "\n", "x\r\ny"]))}
    end = draw(position_in(text))
    return {"range": {"start": start, "end": end}, "text": "" if kind == "delete" else draw(texts)}


@dataclass
class EditSequence:
    initial: str
    notifications: list[list[Change]]
    expected: str


@st.composite
def edit_sequences(draw: st.DrawFn, max_notifications: int = 10) -> EditSequence:
    initial = draw(texts)
    text, notifications = initial, []
    for _ in range(draw(st.integers(1, max_notifications))):
        changes = []
        for _ in range(draw(st.integers(1, 3))):
            change = draw(change_for(text))
            text = reference_apply(text, change)
            changes.append(change)
        notifications.append(changes)
    return EditSequence(initial, notifications, text)


# ----- checks ---------------------------------------------------------------------------------


def document_result(sequence: EditSequence) -> str:
    """The in-process codespec.context.Document after the sequence."""
    from codespec.context import Document

    doc = Document("file:///edits/local.py", "python", sequence.initial, 1, "utf-16")
    for version, changes in enumerate(sequence.notifications, start=2):
        for change in changes:
            span = change.get("range")
            bounds = None if span is None else ((span["start"]["line"], span["start"]["character"]),
                                                (span["end"]["line"], span["end"]["character"]))
            doc.apply_change(bounds, change["text"], version)
        doc.tree  # noqa: B018 - the incremental re-parse must not fail either
    return doc.text


_uris = itertools.count(1)


def server_result(server: Any, sequence: EditSequence) -> dict[str, Any] | None:
    """The server's copy after the sequence (one document per sequence, closed afterwards)."""
    from codespec.reliability.rpc import did_change, did_open, document_text

    uri = f"file:///edits/seq-{next(_uris)}.py"
    did_open(server, uri, sequence.initial, "python", 1)
    for version, changes in enumerate(sequence.notifications, start=2):
        did_change(server, uri, version, changes)
    result = document_text(server, uri)
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return result


@dataclass
class EditReport:
    seed: int
    server_sequences: int = 0
    local_sequences: int = 0
    changes: int = 0
    notifications: int = 0
    failure: str = ""
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failure

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["ok"] = self.ok
        return data


def run_edit_sequences(server: Any | None, count: int, *, seed: int = 0) -> EditReport:
    """Check `count` generated sequences (and their shrinks, on a failure) against the reference:
    the in-process Document always, the server's copy too when `server` is given."""
    report = EditReport(seed=seed)
    started = time.perf_counter()

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, print_blob=False,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    @given(edit_sequences())
    def check(sequence: EditSequence) -> None:
        report.notifications += len(sequence.notifications)
        report.changes += sum(len(changes) for changes in sequence.notifications)
        for changes in sequence.notifications:
            for change in changes:
                kind = "full" if "range" not in change else "range"
                report.kinds[kind] = report.kinds.get(kind, 0) + 1
        local = document_result(sequence)
        report.local_sequences += 1
        assert local == sequence.expected, f"Document: {local!r} != reference {sequence.expected!r}"
        if server is not None:
            remote = server_result(server, sequence)
            report.server_sequences += 1
            version = len(sequence.notifications) + 1
            assert remote == {"text": sequence.expected, "version": version}, (
                f"server: {remote!r} != reference {sequence.expected!r} (version {version})")

    try:
        check()
    except AssertionError as exc:
        report.failure = str(exc)[:2000]
    report.seconds = round(time.perf_counter() - started, 2)
    return report


def main(argv: list[str] | None = None) -> int:
    from codespec.reliability.fuzz import SERVER_OPTIONS
    from codespec.reliability.rpc import StdioServer

    parser = argparse.ArgumentParser(prog="python -m codespec.reliability.edits", description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local-only", action="store_true", help="only the in-process Document")
    args = parser.parse_args(argv)
    if args.local_only:
        report = run_edit_sequences(None, args.sequences, seed=args.seed)
    else:
        with StdioServer() as server:
            server.initialize(SERVER_OPTIONS)
            report = run_edit_sequences(server, args.sequences, seed=args.seed)
    print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
