"""Recording: the recorder class the server calls, and `codespec record` as a proxy between a real
client (the replayer) and a real server (the fake pygls server)."""

from __future__ import annotations

import itertools
import sys

from codespec.sessions.format import final_texts, read_session, validate_session
from codespec.sessions.metrics import summarize
from codespec.sessions.record import SessionRecorder, annotate_expect
from codespec.sessions.replay import replay_sessions
from tests.sessions.conftest import fake_server

OPEN = {"textDocument": {"uri": "file:///a.go", "languageId": "go", "version": 1, "text": "package a\n"}}


def test_recorder_keeps_client_messages_with_their_times(tmp_path):
    clock = itertools.count(10.0, 0.25).__next__
    path = tmp_path / "rec.jsonl"
    with SessionRecorder(path, source="unit", clock=clock) as recorder:
        assert not recorder.record({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert recorder.record({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {}})
        assert recorder.record({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": OPEN})
        assert not recorder.record({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}})
        assert not recorder.record({"jsonrpc": "2.0", "id": 7, "result": None})  # a response to the server
        assert not recorder.record_bytes(b"{not json")
        assert recorder.record_bytes(
            b'{"jsonrpc":"2.0","id":2,"method":"textDocument/inlineCompletion",'
            b'"params":{"textDocument":{"uri":"file:///a.go"},"position":{"line":0,"character":9}}}'
        )
    session = read_session(path)
    assert session.header == {"format": "codespec-session", "version": 1, "source": "unit", "language": "go"}
    assert [e.method for e in session.events] == [
        "workspace/didChangeConfiguration", "textDocument/didOpen", "textDocument/inlineCompletion",
    ]  # fmt: skip
    assert [e.t for e in session.events] == [0.0, 0.25, 0.5]
    assert session.events[1].params == OPEN


def test_recorder_writes_a_readable_file_when_nothing_was_opened(tmp_path):
    SessionRecorder(tmp_path / "empty.jsonl").close()
    assert read_session(tmp_path / "empty.jsonl").events == []


async def test_record_proxy_between_a_real_client_and_server(tmp_path, small_sessions):
    session = small_sessions[0]
    recorded = tmp_path / "recorded.jsonl"
    proxy = [sys.executable, "-m", "codespec.cli", "record", "--out", str(recorded), "--source", "proxy-test",
             "--", *fake_server("--delay", "0.005")]  # fmt: skip
    through = summarize(await replay_sessions([session], proxy, speed=25.0, warmup=False))
    assert through["requests"] == len(session.inline_requests()) and through["documents_mismatched"] == 0

    copy = read_session(recorded)
    assert copy.header["source"] == "proxy-test" and copy.header["language"] == session.header["language"]
    assert validate_session(copy, strict=True) == []
    # every client message, in order, byte-equal params (the extension requests the replayer sent
    # are client messages too, and recorded)
    kept = [e for e in copy.events if not e.method.startswith("codespec/")]
    assert [(e.method, e.params) for e in kept] == [(e.method, e.params) for e in session.events]
    # closing the recorder annotated the recording: the same ground truth synth wrote
    assert [e.expect for e in kept] == [e.expect for e in session.events]
    assert all(b.t >= a.t for a, b in zip(copy.events, copy.events[1:], strict=False))
    assert copy.events[-1].t > 0.5 * session.duration / 25.0  # times are the replay's, scaled by 25
    assert final_texts(copy) == final_texts(session)

    again = summarize(await replay_sessions([copy], fake_server("--delay", "0.005"), speed=50.0))
    assert again["requests"] == through["requests"]
    assert again["documents_checked"] == 1 and again["documents_mismatched"] == 0


def test_annotating_a_recording_recovers_the_synthesized_ground_truth(corpus_paths):
    for path in corpus_paths[:6]:
        truth = read_session(path)
        stripped = read_session(path)
        for event in stripped.events:
            event.expect = None
        annotated = annotate_expect(stripped)
        assert annotated == sum(1 for e in truth.inline_requests() if e.expect is not None) > 0
        assert [e.expect for e in stripped.events] == [e.expect for e in truth.events], path.name
