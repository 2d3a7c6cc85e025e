"""codespec-session v1: reading, writing, validation, and the committed corpus."""

from __future__ import annotations

import json
import platform

import pytest

from codespec.errors import CodespecError
from codespec.sessions.format import (
    Event,
    Session,
    SessionFormatError,
    TextBuffer,
    final_texts,
    iter_lines,
    make_header,
    parse_lines,
    read_session,
    validate_session,
    write_session,
)

URI = "file:///t.py"


def change(version: int, start: tuple[int, int], end: tuple[int, int], text: str) -> dict:
    rng = {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}}
    return {
        "textDocument": {"uri": URI, "version": version},
        "contentChanges": [{"range": rng, "text": text}],
    }


def session_of(*events: Event, text: str = "ab\n") -> Session:
    opened = Event(0.0, "textDocument/didOpen",
                   {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": text}})  # fmt: skip
    return Session(make_header("test", "python"), [opened, *events])


def test_round_trip_keeps_every_byte_and_unknown_keys(tmp_path, corpus_paths):
    original = corpus_paths[0].read_text(encoding="utf-8")
    session = read_session(corpus_paths[0])
    assert "".join(line + "\n" for line in iter_lines(session)) == original
    extra = session_of(
        Event(0.5, "textDocument/didClose", {"textDocument": {"uri": URI}}, extra={"note": [1]})
    )
    extra.header["editor"] = "vim"
    back = read_session(write_session(extra, tmp_path / "s.jsonl"))
    assert back.header["editor"] == "vim" and back.events[1].extra == {"note": [1]}
    assert [e.to_json() for e in back.events] == [e.to_json() for e in extra.events]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"format": "other", "version": 1}'], "not a codespec-session header"),
        (['{"format": "codespec-session", "version": 2, "source": "", "language": ""}'], "unsupported version"),
        (['{"format": "codespec-session", "version": 1, "language": "x"}'], '"source"'),
        (['{"format": "codespec-session", "version": 1, "source": "", "language": ""}', "{nope"], ":2: invalid JSON"),
        (['{"format": "codespec-session", "version": 1, "source": "", "language": ""}', '{"t": "1", "send": {}}'],
         '"t" must be a number'),
        (['{"format": "codespec-session", "version": 1, "source": "", "language": ""}',
          '{"t": 1, "send": {"method": "x", "id": 3}}'], 'no "id"'),
        (['{"format": "codespec-session", "version": 1, "source": "", "language": ""}',
          '{"t": 1, "send": {"method": "x"}, "expect": {"line_rest": 3}}'], '"expect"'),
        ([], "empty file"),
    ],
)  # fmt: skip
def test_parse_rejects_malformed_files(lines, message):
    with pytest.raises(SessionFormatError, match=message):
        parse_lines(lines)


def test_a_valid_session_has_no_problems():
    session = session_of(
        Event(0.2, "textDocument/didChange", change(2, (0, 2), (0, 2), "c")),
        Event(0.2, "textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 3}},
              expect={"line_rest": "d", "next_lines": ""}),
        Event(0.9, "textDocument/didClose", {"textDocument": {"uri": URI}}),
    )  # fmt: skip
    assert validate_session(session, strict=True) == []
    assert final_texts(session) == {URI: "abc\n"}


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ([Event(0.2, "textDocument/didChange", change(1, (0, 0), (0, 0), "x"))], "does not rise"),
        ([Event(0.2, "textDocument/didChange", change(2, (0, 3), (0, 3), "x"))], "past the end of line 0"),
        ([Event(0.2, "textDocument/didChange", change(2, (5, 0), (5, 0), "x"))], "outside the document"),
        ([Event(0.2, "textDocument/didChange", change(2, (0, 2), (0, 1), "x"))], "end before its start"),
        ([Event(-0.1, "textDocument/didClose", {"textDocument": {"uri": URI}})], "backwards or is negative"),
        ([Event(0.1, "textDocument/inlineCompletion",
                {"textDocument": {"uri": "file:///other.py"}, "position": {"line": 0, "character": 0}})], "not open"),
        ([Event(0.1, "initialize", {})], "belongs to the replayer"),
        ([Event(0.1, "textDocument/didClose", {"textDocument": {"uri": URI}}, expect={"line_rest": ""})],
         "expect on a textDocument/didClose"),
    ],
)  # fmt: skip
def test_validation_finds_each_kind_of_problem(events, problem):
    problems = validate_session(session_of(*events))
    assert any(problem in p for p in problems), problems


def test_strict_validation_wants_single_incremental_keystrokes_and_closed_documents():
    full = {"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": "new\n"}]}
    session = session_of(Event(0.1, "textDocument/didChange", full))
    assert validate_session(session) == []
    strict = validate_session(session, strict=True)
    assert any("one incremental change" in p for p in strict) and any("left open" in p for p in strict)
    assert final_texts(session) == {URI: "new\n"}


def test_text_buffer_counts_utf16_units_and_all_lsp_line_breaks():
    buf = TextBuffer("a😀b\r\nc\rd\n")
    assert buf.offset_at(0, 3) == 2  # the emoji is two UTF-16 units
    with pytest.raises(ValueError, match="surrogate"):
        buf.offset_at(0, 2)
    assert [buf.offset_at(line, 0) for line in range(4)] == [0, 5, 7, 9]
    assert buf.position_at(3) == (0, 4)
    buf.apply({"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 3}}, "é")
    assert buf.text == "aéb\r\nc\rd\n"


def test_the_corpus_has_twenty_valid_sessions_from_both_sources(corpus_paths):
    assert len(corpus_paths) >= 20
    sources = [read_session(p).header["source"] for p in corpus_paths]
    assert sum(s.startswith("cpython-") for s in sources) >= 10
    assert sum(s.startswith("git:codespec@") for s in sources) >= 3
    for path in corpus_paths:
        session = read_session(path)
        assert validate_session(session, strict=True) == [], path
        assert 20 <= session.keystrokes() <= 400, path
        assert all(isinstance(json.loads(line), dict) for line in path.read_text().splitlines())


def test_the_corpus_regenerates_byte_for_byte(tmp_path, corpus_paths):
    import tests.sessions.make_corpus as corpus

    stdlib = [p for p in corpus_paths if p.name.startswith("stdlib-")]
    header = read_session(stdlib[0]).header
    if not header["source"].startswith(f"cpython-{platform.python_version()}-"):
        pytest.skip(f"the corpus was made from another Python's stdlib ({header['source']})")
    for name, session in corpus.stdlib_sessions():
        path = write_session(session, tmp_path / f"{name}.jsonl")
        assert path.read_bytes() == (corpus.DATA / path.name).read_bytes(), name
    try:
        git = list(corpus.git_sessions(corpus.GIT_CHANGES[:3]))
    except CodespecError as exc:  # a copy without this repository's history
        pytest.skip(f"no git history here: {exc}")
    for name, session in git:
        path = write_session(session, tmp_path / f"{name}.jsonl")
        assert path.read_bytes() == (corpus.DATA / path.name).read_bytes(), name
