"""Byte-level fuzz of the real server (a short run; `make fuzz` runs >= 10,000 cases)."""

from __future__ import annotations

import json

import pytest

from codespec.reliability.fuzz import CaseGenerator, FramingModel, classify, run_fuzz
from codespec.reliability.rpc import did_open, document_text


@pytest.fixture
def server(shared):
    return shared


def test_framing_model_follows_the_readers_rules():
    model = FramingModel()
    body = b'{"a": 1}'
    assert model.feed(b"X: y\r\nContent-Length: 8\r\n\r\n" + body) == [body]
    assert model.clean
    # A length too long waits for more bytes; the model says so and how to recover.
    assert model.feed(b"Content-Length: 12\r\n\r\n" + body) == []
    assert not model.clean and model.recovery() == b"    "
    assert model.feed(model.recovery()) == [body + b"    "]
    # ... unless the next frame's header arrives first: the lying body is dropped, the next one read.
    assert model.feed(b"Content-Length: 99\r\n\r\n" + body + b"Content-Length: 8\r\n\r\n" + body) == [body]
    assert model.clean
    # Too short: junk is left before the next header on its line, and skipped.
    assert model.feed(b"Content-Length: 5\r\n\r\n" + body + b"Content-Length: 8\r\n\r\n" + body) == [
        body[:5], body]
    assert model.feed(b"content-length:8\n\n" + body) == [body]  # any case, no blank, bare line feeds
    assert model.feed(b"Content-Length: 3\r\nContent-Length: 8\r\n\r\n" + body) == [body]  # the last wins
    assert model.feed(b"Content-Length: 0x8\r\n\r\n" + body) == [] and model.recovery() == b"\r\n"
    model.feed(model.recovery())
    assert model.clean


def test_classify_requires_an_int_or_string_id_for_a_must_answer():
    assert classify(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "x"}).encode()) == ("request", 3)
    assert classify(json.dumps({"jsonrpc": "2.0", "id": True, "method": "x"}).encode()) == ("maybe", True)
    assert classify(json.dumps({"jsonrpc": "2.0", "method": "x"}).encode()) == ("none", None)
    assert classify(b"[" * 100_000) == ("none", None)


def test_cases_are_deterministic_per_seed():
    first = [case.data for case in CaseGenerator(7).cases(50)]
    assert first == [case.data for case in CaseGenerator(7).cases(50)]
    assert first != [case.data for case in CaseGenerator(8).cases(50)]


def test_a_notification_method_sent_with_an_id_is_answered_once(server):
    uri = "file:///fuzz/kept-open.py"
    did_open(server, uri, "x = 1\n")
    ids = []
    for method, params in [
        ("textDocument/didClose", {"textDocument": {"uri": uri}}),
        ("initialized", {}),
        ("$/cancelRequest", {"id": 12345}),
    ]:
        msg_id = server.request(method, params)
        response = server.wait_response(msg_id)
        assert response["error"]["code"] == -32600, response
        ids.append(msg_id)
    try:
        # rejected, not also run as the notification: the document is still open, unchanged
        assert document_text(server, uri)["text"] == "x = 1\n"
        assert [len(server.responses_for(msg_id)) for msg_id in ids] == [1, 1, 1]
    finally:
        server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert document_text(server, uri) is None


def test_fuzz_cases_every_request_answered_exactly_once(server):
    report = run_fuzz(400, seed=11, batch=50, server=server)
    summary = json.dumps(report.to_dict(), indent=1)
    assert report.cases == 400 and report.probes_ok == report.batches == 8, summary
    assert report.requests > 100, summary
    assert report.missing == [] and report.duplicated == [] and report.unexpected == [], summary
    assert report.violations == [] and report.server_alive, summary
    # the server still answers a valid request afterwards, with its state intact
    assert server.call("codespec/documentText", {"uri": "file:///never-opened.py"})["result"] is None


def test_stdout_stays_strictly_framed_under_garbage(server):
    server.send_bytes(b"\x00\xff garbage without a line end")
    server.send_bytes(b"\r\n")
    server.send({"jsonrpc": "2.0", "id": "after-garbage", "method": "codespec/stats", "params": {}})
    assert "result" in server.wait_response("after-garbage")
    assert server.received.violations == []


def test_params_may_be_omitted(server):
    # JSON-RPC 2.0: "params" MAY be omitted; the method decides what it needs.
    server.send({"jsonrpc": "2.0", "id": "no-params-stats", "method": "codespec/stats"})
    assert "requests" in server.wait_response("no-params-stats")["result"]
    server.send({"jsonrpc": "2.0", "id": "no-params-unknown", "method": "codespec/nope"})
    assert server.wait_response("no-params-unknown")["error"]["code"] == -32601
    server.send({"jsonrpc": "2.0", "id": "no-params-text", "method": "codespec/documentText"})
    assert server.wait_response("no-params-text")["error"]["code"] == -32602


def test_the_reader_resynchronises_after_a_lying_content_length(server):
    body = b'{"jsonrpc": "2.0", "id": "lying", "method": "codespec/stats", "params": {}}'
    server.send_bytes(b"Content-Length: %d\r\n\r\n" % (len(body) - 5) + body)  # 5 bytes left over
    try:
        server.send({"jsonrpc": "2.0", "id": "after-lying", "method": "codespec/stats", "params": {}})
        assert "result" in server.wait_response("after-lying", 3.0)
    finally:
        server.send_bytes(b"\r\n")  # what a recovering client sends; the shared server must go on
        server.send({"jsonrpc": "2.0", "id": "after-recovery", "method": "codespec/stats", "params": {}})
        assert "result" in server.wait_response("after-recovery")


def test_an_error_to_a_null_id_request_keeps_the_null_id(server):
    server.send({"jsonrpc": "2.0", "id": None, "method": "codespec/nope", "params": {}})
    server.send({"jsonrpc": "2.0", "id": "after-null", "method": "codespec/stats", "params": {}})
    server.wait_response("after-null")
    errors = [r for r in server.responses_for(None) if r.get("error", {}).get("code") == -32601]
    assert errors and errors[-1]["id"] is None
    assert not [v for v in server.received.violations if "codespec/nope" in v]
