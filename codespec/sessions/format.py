"""The codespec-session v1 format: JSON Lines, one header then one client message per line.

    {"format": "codespec-session", "version": 1, "source": "...", "language": "python"}
    {"t": 0.0, "send": {"method": "textDocument/didOpen", "params": {...}}}
    {"t": 0.19, "send": {"method": "textDocument/didChange", "params": {...}}}
    {"t": 0.19, "send": {"method": "textDocument/inlineCompletion", "params": {...}},
     "expect": {"line_rest": "...", "next_lines": "..."}}

The full specification is docs/sessions.md. Positions are LSP positions in UTF-16 code units; keys this
module does not know are kept on read and written back unchanged, so recorded and synthesized sessions
share one format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError
from codespec.sessions.files import write_text

FORMAT_NAME = "codespec-session"
FORMAT_VERSION = 1
INLINE_COMPLETION = "textDocument/inlineCompletion"
DID_OPEN = "textDocument/didOpen"
DID_CHANGE = "textDocument/didChange"
DID_CLOSE = "textDocument/didClose"
# Messages the replayer sends by itself (lifecycle, cancellation): never part of a session.
# The replayer's cancellation probe (see codespec.sessions.replay): never recorded either.
PROBE_METHOD = "codespec/replayProbe"
LIFECYCLE_METHODS = frozenset(
    {"initialize", "initialized", "shutdown", "exit", "$/cancelRequest", "$/setTrace"}
)


class SessionFormatError(CodespecError):
    """A session file that does not follow codespec-session v1."""


def is_notification(method: str) -> bool:
    """Sessions carry no ids, so the method decides: LSP notifications are the `did*` document and
    workspace events, `$/...` messages and the lifecycle notifications; every other method is a request."""
    last = method.rsplit("/", 1)[-1]
    return method.startswith("$/") or last.startswith("did") or method in {"initialized", "exit"}


@dataclass
class Event:
    """One client message at `t` seconds since the session start."""

    t: float
    method: str
    params: Any = None
    expect: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept for round trips

    @property
    def uri(self) -> str | None:
        if isinstance(self.params, dict):
            doc = self.params.get("textDocument")
            if isinstance(doc, dict) and isinstance(doc.get("uri"), str):
                return doc["uri"]
        return None

    def to_json(self) -> dict[str, Any]:
        send: dict[str, Any] = {"method": self.method}
        if self.params is not None:
            send["params"] = self.params
        obj: dict[str, Any] = {"t": round(self.t, 6), "send": send}
        if self.expect is not None:
            obj["expect"] = self.expect
        obj.update(self.extra)
        return obj

    @classmethod
    def from_json(cls, obj: Any, where: str = "") -> Event:
        if not isinstance(obj, dict):
            raise SessionFormatError(f"{where}: a message line must be a JSON object")
        t, send = obj.get("t"), obj.get("send")
        if isinstance(t, bool) or not isinstance(t, int | float):
            raise SessionFormatError(f'{where}: "t" must be a number of seconds')
        if not isinstance(send, dict) or not isinstance(send.get("method"), str):
            raise SessionFormatError(f'{where}: "send" must be an object with a "method" string')
        if "id" in send or "jsonrpc" in send:
            raise SessionFormatError(f'{where}: "send" carries no "id" or "jsonrpc" (the replayer adds them)')
        expect = obj.get("expect")
        if expect is not None and not _valid_expect(expect):
            raise SessionFormatError(f'{where}: "expect" must map "line_rest"/"next_lines" to strings')
        extra = {k: v for k, v in obj.items() if k not in ("t", "send", "expect")}
        return cls(float(t), send["method"], send.get("params"), expect, extra)


def _valid_expect(expect: Any) -> bool:
    return (
        isinstance(expect, dict)
        and isinstance(expect.get("line_rest"), str)
        and isinstance(expect.get("next_lines", ""), str)
    )


@dataclass
class Session:
    header: dict[str, Any]
    events: list[Event]
    path: Path | None = None

    @property
    def name(self) -> str:
        return self.path.stem if self.path else str(self.header.get("source", "session"))

    @property
    def duration(self) -> float:
        return self.events[-1].t - self.events[0].t if self.events else 0.0

    def inline_requests(self) -> list[Event]:
        return [e for e in self.events if e.method == INLINE_COMPLETION]

    def keystrokes(self) -> int:
        return sum(1 for e in self.events if e.method == DID_CHANGE)


def make_header(source: str, language: str, **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": source, "language": language, **extra}


def check_header(header: Any, where: str = "line 1") -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise SessionFormatError(f'{where}: not a codespec-session header (want "format": "{FORMAT_NAME}")')
    if header.get("version") != FORMAT_VERSION:
        raise SessionFormatError(
            f"{where}: unsupported version {header.get('version')!r} (want {FORMAT_VERSION})"
        )
    for key in ("source", "language"):
        if not isinstance(header.get(key), str):
            raise SessionFormatError(f'{where}: header needs a "{key}" string')


def parse_lines(lines: Iterable[str], name: str = "<session>") -> Session:
    header: dict[str, Any] | None = None
    events: list[Event] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SessionFormatError(f"{name}:{number}: invalid JSON ({exc.msg})") from None
        if header is None:
            check_header(obj, f"{name}:{number}")
            header = obj
        else:
            events.append(Event.from_json(obj, f"{name}:{number}"))
    if header is None:
        raise SessionFormatError(f"{name}: empty file, no header")
    return Session(header, events)


def read_session(path: str | Path) -> Session:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SessionFormatError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SessionFormatError(f"{path}: not UTF-8") from None
    session = parse_lines(text.splitlines(), str(path))
    session.path = path
    return session


def dump_line(obj: dict[str, Any]) -> str:
    # Compact and ASCII-safe: one message per line whatever the text contains (U+2028 included).
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True)


def iter_lines(session: Session) -> Iterator[str]:
    yield dump_line(session.header)
    for event in session.events:
        yield dump_line(event.to_json())


def write_session(session: Session, path: str | Path) -> Path:
    """Write the session atomically: a reader never sees half a session file."""
    path = Path(path)
    write_text(path, "".join(line + "\n" for line in iter_lines(session)))
    return path


# ----------------------------------------------------------------------------------------------
# Documents: LSP text edits with UTF-16 positions, kept independent of codespec.context so that the
# session tools check the server rather than share its code.


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _line_breaks(text: str) -> list[int]:
    """Offsets where each line starts; LSP line ends are \\n, \\r\\n and \\r."""
    return [0, *(m.end() for m in _LINE_BREAK.finditer(text))]


def first_lines(text: str, count: int) -> str:
    """The first `count` lines of `text`, line breaks kept."""
    cut = -1
    for _ in range(count):
        cut = text.find("\n", cut + 1)
        if cut < 0:
            return text
    return text[: cut + 1]


def utf16_len(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


class TextBuffer:
    """A document's text with LSP (line, UTF-16 character) positions."""

    def __init__(self, text: str = "", version: int | None = None) -> None:
        self.text = text
        self.version = version
        self._starts: list[int] | None = None

    @property
    def line_starts(self) -> list[int]:
        if self._starts is None:
            self._starts = _line_breaks(self.text)
        return self._starts

    def _line_end(self, line: int) -> int:
        """Offset of the end of `line`'s content (before its line break)."""
        starts = self.line_starts
        end = starts[line + 1] if line + 1 < len(starts) else len(self.text)
        while end > starts[line] and self.text[end - 1] in "\r\n":
            end -= 1
        return end

    def offset_at(self, line: int, character: int) -> int:
        """Strict conversion: raises ValueError for a position outside the document."""
        starts = self.line_starts
        if line < 0 or line >= len(starts) or character < 0:
            raise ValueError(f"position {line}:{character} outside the document ({len(starts)} lines)")
        offset, end, units = starts[line], self._line_end(line), 0
        while units < character:
            if offset >= end:
                raise ValueError(f"character {character} past the end of line {line}")
            units += 2 if ord(self.text[offset]) > 0xFFFF else 1
            offset += 1
        if units != character:
            raise ValueError(f"position {line}:{character} splits a surrogate pair")
        return offset

    def position_at(self, offset: int) -> tuple[int, int]:
        import bisect

        starts = self.line_starts
        line = bisect.bisect_right(starts, offset) - 1
        return line, utf16_len(self.text[starts[line] : offset])

    def apply(self, range_: dict[str, Any] | None, text: str) -> None:
        """Apply one LSP content change (a range change, or the full text when `range_` is None)."""
        if range_ is None:
            self.text = text
        else:
            start = self.offset_at(range_["start"]["line"], range_["start"]["character"])
            end = self.offset_at(range_["end"]["line"], range_["end"]["character"])
            if end < start:
                raise ValueError("range end before its start")
            self.text = self.text[:start] + text + self.text[end:]
        self._starts = None


def lsp_range(start: tuple[int, int], end: tuple[int, int]) -> dict[str, Any]:
    return {
        "start": {"line": start[0], "character": start[1]},
        "end": {"line": end[0], "character": end[1]},
    }


class DocumentSet:
    """The client's view of every open document while a session is played: applies didOpen,
    didChange and didClose events, raising ValueError on anything inconsistent."""

    def __init__(self) -> None:
        self.open: dict[str, TextBuffer] = {}
        self.closed: dict[str, TextBuffer] = {}  # last state of each closed document

    def apply(self, event: Event) -> None:
        params, uri = event.params, event.uri
        if event.method == DID_OPEN:
            doc = params["textDocument"]
            if uri in self.open:
                raise ValueError(f"didOpen for {uri}, which is already open")
            if not isinstance(doc.get("text"), str) or not isinstance(doc.get("version"), int):
                raise ValueError("didOpen needs textDocument.text and an integer version")
            self.open[uri] = TextBuffer(doc["text"], doc["version"])
        elif event.method == DID_CHANGE:
            buf = self._get(uri, event.method)
            version = params["textDocument"].get("version")
            if not isinstance(version, int) or (buf.version is not None and version <= buf.version):
                raise ValueError(f"didChange version {version!r} does not rise above {buf.version}")
            changes = params.get("contentChanges")
            if not isinstance(changes, list) or not changes:
                raise ValueError("didChange needs a non-empty contentChanges list")
            for change in changes:
                buf.apply(change.get("range"), change["text"])
            buf.version = version
        elif event.method == DID_CLOSE:
            self.closed[uri] = self.open.pop(self._check_open(uri, event.method))
        elif uri is not None and isinstance(params, dict) and "position" in params:
            buf = self._get(uri, event.method)
            pos = params["position"]
            buf.offset_at(pos["line"], pos["character"])

    def _check_open(self, uri: str | None, method: str) -> str:
        if uri is None or uri not in self.open:
            raise ValueError(f"{method} for a document that is not open: {uri}")
        return uri

    def _get(self, uri: str | None, method: str) -> TextBuffer:
        return self.open[self._check_open(uri, method)]

    def text(self, uri: str) -> str:
        buf = self.open.get(uri) or self.closed.get(uri)
        if buf is None:
            raise KeyError(uri)
        return buf.text


def validate_session(session: Session, *, strict: bool = False) -> list[str]:
    """Problems found by playing the session on client-side documents (an empty list: valid).

    Checks times, message shapes, document life cycle (didOpen first, rising versions, didClose),
    that every range and position lies inside its document, and `expect` shapes. `strict` adds the
    rules synthesized sessions follow: every didChange holds one incremental change, and every
    document is closed at the end.
    """
    problems: list[str] = []
    docs = DocumentSet()
    last_t = None
    for index, event in enumerate(session.events, 2):  # line numbers: the header is line 1
        where = f"line {index}"
        if event.t < 0 or (last_t is not None and event.t < last_t):
            problems.append(f"{where}: time {event.t} goes backwards or is negative")
        last_t = event.t
        if event.method in LIFECYCLE_METHODS:
            problems.append(f"{where}: {event.method} belongs to the replayer, not to a session")
            continue
        if event.expect is not None and event.method != INLINE_COMPLETION:
            problems.append(f"{where}: expect on a {event.method} message")
        if strict and event.method == DID_CHANGE:
            changes = (event.params or {}).get("contentChanges") or []
            if len(changes) != 1 or "range" not in changes[0]:
                problems.append(f"{where}: a keystroke is one incremental change")
        if event.method == INLINE_COMPLETION and (
            event.uri is None or not isinstance(event.params.get("position"), dict)
        ):
            problems.append(f"{where}: an inline completion request needs textDocument.uri and a position")
            continue
        try:
            docs.apply(event)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # any shape the JSON can take
            problems.append(f"{where}: {event.method}: {exc}")
    if not session.events:
        problems.append("no messages after the header")
    elif session.events[0].method != DID_OPEN:
        problems.append(f"the first message is {session.events[0].method}, not {DID_OPEN}")
    if strict and docs.open:
        problems.append(f"documents left open at the end: {sorted(docs.open)}")
    return problems


TYPING, JUMP, SWITCH, OPEN = "typing", "jump", "switch", "open"  # where the user was at a request
CATEGORIES = (TYPING, JUMP, SWITCH, OPEN)


def request_categories(session: Session) -> list[str]:
    """For each inline request of the session, in order, where the user was when it came: OPEN (the
    document's first request since its didOpen), SWITCH (another document than the previous request's),
    JUMP (the same document, but the cursor did not get there by typing: no edit since the previous request
    started or ended at its cursor, and the cursor moved) or TYPING."""
    categories: list[str] = []
    opened: set[str] = set()
    previous: tuple[str, dict[str, int]] | None = None
    edits: list[dict[str, Any]] = []  # ranges of the changes since the previous request
    for event in session.events:
        uri = event.uri
        if event.method == DID_OPEN and uri is not None:
            opened.add(uri)
        elif event.method == DID_CHANGE:
            for change in (event.params or {}).get("contentChanges") or []:
                edits.append(change.get("range") or {})
        elif event.method == INLINE_COMPLETION and uri is not None:
            position = event.params["position"]
            if uri in opened:
                opened.discard(uri)
                categories.append(OPEN)
            elif previous is None or previous[0] != uri:
                categories.append(SWITCH)
            else:
                cursor = previous[1]
                typed = bool(edits) and (edits[0].get("start") == cursor or edits[0].get("end") == cursor)
                moved = position != cursor
                categories.append(TYPING if typed or not moved else JUMP)
            previous, edits = (uri, {"line": position["line"], "character": position["character"]}), []
    return categories


def final_texts(session: Session) -> dict[str, str]:
    """Each document's text at the end of the session (closed or not), by URI."""
    docs = DocumentSet()
    for event in session.events:
        docs.apply(event)
    return {uri: buf.text for uri, buf in {**docs.closed, **docs.open}.items()}


def session_paths(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        else:
            found.append(path)
    if not found:
        raise CodespecError("no session files given (directories hold *.jsonl)")
    return found


def load_sessions(paths: list[Path]) -> list:
    """The sessions of files and directories (their *.jsonl), each validated; the first problem is raised."""
    sessions = []
    for path in session_paths(paths):
        session = read_session(path)
        problems = validate_session(session)
        if problems:
            raise SessionFormatError(
                f"{path}: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
            )
        sessions.append(session)
    return sessions
