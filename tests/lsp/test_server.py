"""The real `codespec serve --stdio` process (tiny random model, real engine and context room),
driven over LSP. One server for the module (see conftest); each test has its own documents."""

from __future__ import annotations

import contextlib

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.lsp.helpers import (
    DEFAULTS,
    FAIL_MARKER,
    FIRST_DOC,
    LOAD_WAIT_S,
    advance,
    bounded,
    cancel_request,
    close_opened,
    configure,
    document_text,
    end_position,
    generation_of,
    inline,
    insert,
    item_text,
    open_doc,
    raw_request,
    record_of,
    settle,
    stats,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

PY_DOC = "def add(a, b):\n    return a + b\n\n\ndef scale(values, factor):\n    result = "


async def suggestion_at(client, uri: str, line: int, character: int) -> tuple[dict, str]:
    """Invoke at a position, let the generation finish, re-trigger: the full (cached) suggestion."""
    first = await bounded(inline(client, uri, line, character, trigger=1), LOAD_WAIT_S)
    assert item_text(first), f"the tiny model suggested nothing at {uri}:{line}:{character}"
    await settle(client)
    again = inline(client, uri, line, character, trigger=1)
    full = await bounded(again)
    report = await stats(client)
    assert record_of(report, again.msg_id)["source"] == "cache"
    assert item_text(full).startswith(item_text(first))
    return full, item_text(full)


def delay(client, seconds: float, **more) -> None:
    configure(client, **{**DEFAULTS, "stepDelay": seconds, **more})


@pytest.fixture(autouse=True)
def isolate(client):
    """Defaults before and after; the test's documents closed after it (they would be neighbours)."""
    configure(client, **DEFAULTS)
    yield
    if client._server.returncode is None:
        close_opened(client)
        configure(client, **DEFAULTS)


async def test_capabilities_and_loading_progress(client):
    caps = client.init_result.capabilities
    assert client.init_result.server_info.name == "codespec"
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.text_document_sync.open_close is True
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    assert {"codespec.accept", "codespec.reject"} <= set(caps.execute_command_provider.commands)

    # Eager loading at `initialized` reported window/workDoneProgress begin ... end.
    async def progress_ended():
        return any(
            reports and isinstance(reports[-1], types.WorkDoneProgressEnd)
            for reports in client.progress_reports.values()
        )

    await wait_until(progress_ended, timeout=LOAD_WAIT_S)
    # A document opened while the models loaded is there (imports from two threads once lost it).
    assert await document_text(client, FIRST_DOC) == {"text": "opened = 'while the models load'\n", "version": 1}
    (reports,) = client.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin)
    assert reports[0].title == "codespec: loading models"
    # The backend is the one this run asked for: a remote engine reports itself, the local one its runtime.
    engine = (await stats(client))["engine"]
    if client.backend == "engine":
        assert engine["runtime"] == "remote" and engine["remote"]["engineKind"] == "llama-server"
        assert engine["remote"]["trouble"] == []
    else:
        assert "remote" not in engine and engine["runtime"] == "torch"


async def test_inline_completion_item_shape_accept_and_completion_fallback(client):
    uri = "file:///t/inline.py"
    open_doc(client, uri, PY_DOC)
    line, character = end_position(PY_DOC)
    full, text = await suggestion_at(client, uri, line, character)
    (item,) = full["items"]
    cursor = {"line": line, "character": character}
    assert item["range"] == {"start": cursor, "end": cursor}
    assert item["command"]["command"] == "codespec.accept"

    before = await stats(client)
    accepted = await bounded(
        raw_request(client, "workspace/executeCommand", {"command": "codespec.accept", "arguments": item["command"]["arguments"]})
    )
    assert accepted == {"known": True}
    again = await bounded(
        raw_request(client, "workspace/executeCommand", {"command": "codespec.accept", "arguments": item["command"]["arguments"]})
    )
    assert again == {"known": False}  # one acceptance per shown item
    after = await stats(client)
    assert after["accepted"] == before["accepted"] + 1
    assert after["acceptanceRate"] == after["accepted"] / after["shown"]

    # textDocument/completion: one item inserting the same suggestion at the cursor.
    completion = await bounded(
        raw_request(
            client,
            "textDocument/completion",
            {"textDocument": {"uri": uri}, "position": cursor, "context": {"triggerKind": 1}},
        )
    )
    assert completion["isIncomplete"] is True
    (fallback,) = completion["items"]
    assert fallback["textEdit"] == {"range": {"start": cursor, "end": cursor}, "newText": text}
    assert fallback["command"]["command"] == "codespec.accept"


async def test_streaming_partials_end_with_the_final_suggestion(client):
    uri = "file:///t/stream.py"
    open_doc(client, uri, PY_DOC, version=7)
    line, character = end_position(PY_DOC)
    seen = len(client.partials)
    result = await bounded(inline(client, uri, line, character, trigger=1))
    await settle(client)
    mine = [p for p in client.partials[seen:] if p.uri == uri]
    assert mine, "no codespec/partialCompletion with streaming on"
    assert all(p.version == 7 and (p.position.line, p.position.character) == (line, character) for p in mine)
    assert [p.done for p in mine].count(True) == 1 and mine[-1].done
    assert mine[-1].text.startswith(item_text(result))


async def test_selected_completion_info_is_extended(client):
    uri = "file:///t/selected.py"
    open_doc(client, uri, "import os\n\nbase = os.pa")
    selected = {"range": {"start": {"line": 2, "character": 10}, "end": {"line": 2, "character": 12}}, "text": "path"}
    request = inline(client, uri, 2, 12, trigger=1, selected=selected)
    result = await bounded(request)
    (item,) = result["items"]
    assert item["range"] == selected["range"]
    assert item["insertText"].startswith("path") and len(item["insertText"]) > len("path")
    await settle(client)

    # Accepting the popup item makes the document the state the suggestion was computed for:
    # the same generation then serves the cursor after "path" with the rest of the suggestion.
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(2, 10), end=types.Position(2, 12)), text="path"
                )
            ],
        )
    )
    follow = inline(client, uri, 2, 14, trigger=1)
    rest = await bounded(follow)
    report = await stats(client)
    assert record_of(report, follow.msg_id)["generation"] == record_of(report, request.msg_id)["generation"]
    assert item["insertText"][len("path") :].startswith(item_text(rest))


async def test_typing_along_is_answered_without_a_model_call(client):
    uri = "file:///t/typing.py"
    open_doc(client, uri, PY_DOC)
    line, character = end_position(PY_DOC)
    _, text = await suggestion_at(client, uri, line, character)
    assert len(text) >= 2
    before = await settle(client)
    typed = text[0]
    insert(client, uri, 2, line, character, typed)
    request = inline(client, uri, *advance(line, character, typed))
    result = await bounded(request)
    assert item_text(result) == text[1:]
    report = await stats(client)
    record = record_of(report, request.msg_id)
    assert record["source"] == "typed-along" and record["modelCall"] is False
    assert report["typedAlongHits"] == before["typedAlongHits"] + 1
    new_requests = [g for g in report["generations"]["recent"] if g["kind"] == "request"]
    old_requests = [g for g in before["generations"]["recent"] if g["kind"] == "request"]
    assert [g["id"] for g in new_requests] == [g["id"] for g in old_requests]


async def test_second_keystroke_prefills_far_fewer_tokens(client):
    uri = "file:///t/prefill.py"
    body = "".join(f"def helper_{i}(x):\n    return x * {i} + {i * 7}\n\n" for i in range(12))
    doc = body + "total = "
    open_doc(client, uri, doc)
    line, character = end_position(doc)
    first = inline(client, uri, line, character, trigger=1)
    await bounded(first)
    report = await settle(client)
    text = item_text(await bounded(inline(client, uri, line, character, trigger=1))) or ""
    typed = "q" if not text.startswith("q") else "z"  # not the suggestion: a new generation is needed
    insert(client, uri, 2, line, character, typed)
    second = inline(client, uri, line, character + 1, trigger=1)
    await bounded(second)
    report = await settle(client)
    one, two = record_of(report, first.msg_id), record_of(report, second.msg_id)
    assert one["source"] == two["source"] == "model"
    assert one["prefillTokens"] > 200
    assert two["reusedTokens"] > 0 and two["prefillTokens"] * 10 < one["prefillTokens"]
    # each generation says where the worker's time went; the totals add them up
    gens = {g["id"]: g for g in report["generations"]["recent"]}
    first_gen = gens[one["generation"]]
    assert first_gen["prefillMs"] > 0 and first_gen["decodeMs"] >= 0 and first_gen["queuedMs"] >= 0
    assert report["generations"]["busyMs"] >= round(first_gen["prefillMs"] + first_gen["decodeMs"], 1) - 0.1
    # what the load made is kept out of the collector's full passes (each walked it holding the GIL)
    assert report["gcFrozenObjects"] > 1000
    # and its decode forwards by their tokens ([tokens, forwards, ms]): as many as its target forwards, timed
    forwards = first_gen["forwardMs"]
    assert sum(n for _, n, _ in forwards) == first_gen["targetForwards"]
    assert sorted(k for k, _, _ in forwards) == [k for k, _, _ in forwards] and all(ms > 0 for _, _, ms in forwards)


async def test_utf16_positions_with_emoji(client):
    uri = "file:///t/emoji.py"
    doc = 'smile = "\U0001f600\U0001f600"\nlabel = "\U0001f600" + '
    open_doc(client, uri, doc)
    line, character = end_position(doc)  # utf-16: each emoji counts 2
    assert character == len('label = "') + 2 + len('" + ')
    full, text = await suggestion_at(client, uri, line, character)
    assert full["items"][0]["range"]["start"] == {"line": line, "character": character}

    # An edit after the emoji, in utf-16 units, lands where it should ...
    typed = text[0]
    insert(client, uri, 2, line, character, typed)
    state = await document_text(client, uri)
    assert state == {"text": doc + typed, "version": 2}
    # ... and the request after it is the typed-along continuation (offsets agree).
    request = inline(client, uri, *advance(line, character, typed))
    assert item_text(await bounded(request)) == text[1:]

    # A position inside a surrogate pair rounds down to the character start; past the end clamps.
    inside = await bounded(inline(client, uri, 0, len('smile = "') + 1, trigger=1))
    if inside and inside["items"]:
        assert inside["items"][0]["range"]["start"] == {"line": 0, "character": len('smile = "')}
    past = await bounded(inline(client, uri, 40, 3, trigger=1))
    end = dict(zip(("line", "character"), end_position(doc + typed), strict=True))
    if past and past["items"]:
        assert past["items"][0]["range"]["start"] == end


async def test_cancel_request_answers_32800_and_stops_the_worker(client):
    uri = "file:///t/cancel.py"
    open_doc(client, uri, PY_DOC)
    # Slow steps: after the first streamed text the cancel arrives long before the next step ends.
    delay(client, 0.5, earlyAnswer=False, maxTokens=200)
    before = await settle(client)
    seen = len(client.partials)
    line, character = end_position(PY_DOC)
    request = inline(client, uri, line, character, trigger=1)

    async def decoding():  # the worker is inside the decode loop
        return any(p.uri == uri for p in client.partials[seen:])

    await wait_until(decoding)
    cancel_request(client, request.msg_id)
    with pytest.raises(JsonRpcException) as error:
        await bounded(request)
    assert error.value.code == -32800
    report = await settle(client)
    generation = generation_of(report, record_of(report, request.msg_id)["generation"])
    assert generation["finishReason"] == "cancelled", (generation, record_of(report, request.msg_id))
    assert generation["forwardsAfterCancel"] <= 1
    assert generation["engineForwardsAfterCancel"] <= 1
    assert generation["newTokens"] < 200
    assert report["cancelled"] == before["cancelled"] + 1
    assert report["pending"] == 0


async def test_did_change_supersedes_the_running_request(client):
    uri = "file:///t/supersede.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 0.5, earlyAnswer=False, maxTokens=200)
    before = await settle(client)
    seen = len(client.partials)
    line, character = end_position(PY_DOC)
    request = inline(client, uri, line, character, trigger=1)

    async def decoding():
        return any(p.uri == uri for p in client.partials[seen:])

    await wait_until(decoding)
    insert(client, uri, 2, 0, 0, "# edited above\n")  # not typing the suggestion: stale
    assert await bounded(request) is None
    report = await settle(client)
    generation = generation_of(report, record_of(report, request.msg_id)["generation"])
    assert generation["finishReason"] == "cancelled"
    assert generation["forwardsAfterCancel"] <= 1
    assert report["superseded"] == before["superseded"] + 1
    assert (await document_text(client, uri))["text"] == "# edited above\n" + PY_DOC


async def test_newer_request_supersedes_older(client):
    uri = "file:///t/newer.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 0.5, earlyAnswer=False, maxTokens=4)  # the older one cannot finish first
    before = await settle(client)
    line, character = end_position(PY_DOC)
    older = inline(client, uri, line, character, trigger=1)
    newer = inline(client, uri, 1, len("    return a + b"), trigger=1)
    assert await bounded(older) is None
    result = await bounded(newer)
    assert result is not None and "items" in result
    report = await settle(client)
    assert record_of(report, older.msg_id)["outcome"] == "superseded"
    assert record_of(report, newer.msg_id)["outcome"] in ("answered", "empty")
    assert report["superseded"] == before["superseded"] + 1


async def test_model_exception_is_an_error_for_that_request_only(client):
    bad, good = "file:///t/fails.py", "file:///t/works.py"
    open_doc(client, bad, f"# {FAIL_MARKER}\nvalue = ")
    open_doc(client, good, PY_DOC)
    before = await settle(client)
    with pytest.raises(JsonRpcException) as error:
        await bounded(inline(client, bad, 1, 8, trigger=1))
    assert error.value.code == -32603
    assert error.value.data == {"kind": "out-of-memory"}
    line, character = end_position(PY_DOC)
    result = await bounded(inline(client, good, line, character, trigger=1))
    assert result is not None and "items" in result
    report = await settle(client)
    assert report["errors"] == before["errors"] + 1


async def test_invalid_params_and_unknown_documents_are_answered(client):
    uri = "file:///t/invalid.py"
    open_doc(client, uri, PY_DOC)
    bad_trigger = inline(client, uri, 0, 0, trigger=3)
    no_position = raw_request(
        client, types.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": {"uri": uri}, "context": {"triggerKind": 1}}
    )
    negative = inline(client, uri, -1, 0)
    bad_debug = raw_request(client, "codespec/documentText", {"path": uri})
    unknown_method = raw_request(client, "codespec/noSuchMethod", {})
    for future in (bad_trigger, no_position, negative, bad_debug):
        with pytest.raises(JsonRpcException) as error:
            await bounded(future)
        assert error.value.code == -32602
    with pytest.raises(JsonRpcException) as error:
        await bounded(unknown_method)
    assert error.value.code == -32601
    assert await bounded(inline(client, "file:///t/never-opened.py", 0, 0, trigger=1)) is None
    assert await document_text(client, "file:///t/never-opened.py") is None

    # A malformed frame body is logged and skipped; the server keeps serving.
    client._server.stdin.write(b"Content-Length: 9\r\n\r\n{not json")
    assert (await document_text(client, uri))["text"] == PY_DOC
    assert (await stats(client))["pending"] == 0


async def test_prefetch_serves_the_request_after_an_accept(client):
    uri = "file:///t/prefetch.py"
    open_doc(client, uri, PY_DOC)
    line, character = end_position(PY_DOC)
    _, text = await suggestion_at(client, uri, line, character)
    report = await settle(client)  # the shown suggestion's generation ended: a prefetch ran
    assert any(g["kind"] == "prefetch" for g in report["generations"]["recent"])
    insert(client, uri, 2, line, character, text)  # the editor inserts the whole suggestion
    request = inline(client, uri, *advance(line, character, text))
    await bounded(request)
    record = record_of(await stats(client), request.msg_id)
    assert record["source"] == "prefetch" and record["modelCall"] is False


async def test_cold_options_turn_caches_and_typing_along_off(client):
    """The benchmark's cold baseline: every request is a model call with a full prefill."""
    uri = "file:///t/cold.py"
    open_doc(client, uri, PY_DOC)
    configure(client, **{**DEFAULTS, "cache": False, "typingAlong": False, "prefetch": False})
    line, character = end_position(PY_DOC)
    first = inline(client, uri, line, character, trigger=1)
    text = item_text(await bounded(first))
    assert text
    again = inline(client, uri, line, character, trigger=1)
    assert item_text(await bounded(again)) == text  # same prompt, same greedy answer
    insert(client, uri, 2, line, character, text[0])
    typed = inline(client, uri, *advance(line, character, text[0]), trigger=1)
    await bounded(typed)
    report = await settle(client)
    records = [record_of(report, r.msg_id) for r in (first, again, typed)]
    assert [r["source"] for r in records] == ["model"] * 3
    assert all(r["reusedTokens"] == 0 for r in records)
    assert records[1]["prefillTokens"] == records[0]["prefillTokens"]


async def test_inline_and_completion_requests_do_not_supersede_each_other(client):
    uri = "file:///t/both.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 0.01)
    line, character = end_position(PY_DOC)
    cursor = {"line": line, "character": character}
    ghost = inline(client, uri, line, character, trigger=1)
    popup = raw_request(
        client, "textDocument/completion", {"textDocument": {"uri": uri}, "position": cursor, "context": {"triggerKind": 1}}
    )
    ghost_result, popup_result = await bounded(ghost), await bounded(popup)
    report = await settle(client)
    assert record_of(report, popup.msg_id)["generation"] == record_of(report, ghost.msg_id)["generation"]
    (item,) = popup_result["items"]
    assert item["textEdit"]["newText"].startswith(item_text(ghost_result))


async def test_typing_along_a_running_generation_keeps_it(client):
    """Editor-style: edit, $/cancelRequest for the (already superseded) request, new request.
    The typed text matches what is being generated, so the generation goes on and serves it."""
    uri = "file:///t/running.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 0.3, maxTokens=12, earlyAnswer=False)
    await settle(client)
    seen = len(client.partials)
    line, character = end_position(PY_DOC)
    first = inline(client, uri, line, character, trigger=1)

    async def some_text():
        texts = [p.text for p in client.partials[seen:] if p.uri == uri and not p.done]
        return next((t for t in texts if t), None)

    shown = await wait_until(some_text)
    insert(client, uri, 2, line, character, shown[0])
    cancel_request(client, first.msg_id)
    second = inline(client, uri, *advance(line, character, shown[0]))
    with contextlib.suppress(JsonRpcException):  # null (superseded) or -32800, whichever won the race
        assert await bounded(first) is None
    result = await bounded(second)
    report = await settle(client)
    one, two = record_of(report, first.msg_id), record_of(report, second.msg_id)
    assert two["generation"] == one["generation"] and two["source"] == "typed-along"
    generation = generation_of(report, one["generation"])
    assert generation["finishReason"] != "cancelled"
    assert item_text(result) is not None


async def test_request_storm_every_request_answered_once_and_workers_stopped(client):
    """Keystroke-rate traffic: requests, edits and cancels interleaved; nothing is left hanging."""
    uri = "file:///t/storm.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 0.02)
    before = await settle(client)
    line, character = end_position(PY_DOC)
    futures, version = [], 1
    for i in range(24):
        futures.append(inline(client, uri, line, character, trigger=1 + i % 2))
        if i % 3 == 0:
            version += 1
            insert(client, uri, version, line, character, "xy"[i % 2])
            character += 1
        if i % 4 == 1:
            cancel_request(client, futures[-1].msg_id)
    outcomes = []
    for future in futures:
        try:
            outcomes.append("null" if await bounded(future) is None else "result")
        except JsonRpcException as error:
            outcomes.append(error.code)
    assert set(outcomes) <= {"null", "result", -32800}
    assert outcomes[-1] == "result"  # the newest request is never superseded
    report = await settle(client)
    assert report["requests"] - before["requests"] == len(futures)
    assert report["pending"] == 0
    finished = [g for g in report["generations"]["recent"] if g["id"] > max((g["id"] for g in before["generations"]["recent"]), default=0)]
    assert all((g["forwardsAfterCancel"] or 0) <= 1 for g in finished)
    assert (await document_text(client, uri))["version"] == version

async def test_zz_vanished_client_during_a_generation_ends_the_process(client):
    """Last in the module (it ends the shared server): the editor dies mid-generation."""
    uri = "file:///t/gone.py"
    open_doc(client, uri, PY_DOC)
    delay(client, 1.0, maxTokens=200, earlyAnswer=False)
    line, character = end_position(PY_DOC)
    inline(client, uri, line, character, trigger=1)

    async def running():
        report = await stats(client, recent=0)
        return report["generations"]["started"] > report["generations"]["finished"]

    await wait_until(running)
    client._server.stdin.close()
    # The generation would take minutes; the process must not wait for it (nor for the stdin reader).
    assert await bounded(client._server.wait(), 5.0) in (0, 1)
