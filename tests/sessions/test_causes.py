"""The server's per-request causes, navigation categories and prefill numbers (lsp/stats.py), and its request log."""

from __future__ import annotations

import json

from lsp.stats import (
    ANSWERED,
    JUMP,
    OPEN,
    PENDING_PREFILL,
    SUPERSEDED,
    SWITCH,
    TYPING,
    GenerationRecord,
    RequestRecord,
    ServerStats,
)


def test_categories_causes_prefill_and_log(tmp_path, monkeypatch):
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("CODESPEC_REQUEST_LOG", str(log))
    stats = ServerStats()
    stats.document_opened("a")
    stats.document_opened("b")
    requests = [RequestRecord(i, "inline", uri, line=line) for i, (uri, line) in
                enumerate([("a", 3), ("a", 4), ("a", 40), ("b", 1), ("a", 40)], 1)]  # fmt: skip
    for r in requests:
        stats.begin_request(r)
    assert [r.category for r in requests] == [OPEN, TYPING, JUMP, OPEN, SWITCH]
    gen = GenerationRecord(7, "request")
    stats.add_generation(gen)
    first = requests[0]
    first.source, first.generation = "model", 7
    stats.finish_request(first, SUPERSEDED, 5.0)  # dropped while generation 7 was prefilling
    gen.phase = "prefill"  # (the phase was read at finish_request: "queued")
    assert first.cause == "pending-queued"
    second = requests[1]
    second.source, second.generation = "model", 7
    gen.phase = "prefill"
    stats.finish_request(second, SUPERSEDED, 5.0)
    assert second.cause == PENDING_PREFILL and second.prefill_tokens is None  # held until the generation ends
    gen.prefill_tokens, gen.reused_tokens = 120, 30
    gen.queued_ms, gen.prefill_ms, gen.decode_ms, gen.draft_ms = 4.0, 250.0, 80.5, 2.25
    stats.finish_generation(gen)
    assert second.prefill_tokens == 120 and second.reused_tokens == 30
    third = requests[2]
    third.source, third.generation = "typed-along", 7
    stats.finish_request(third, ANSWERED, 1.0)
    assert third.cause == "" and third.prefill_tokens == 0
    report = stats.to_dict()
    assert report["causes"] == {"pending-queued": 1, PENDING_PREFILL: 1}
    assert report["prefillByCategory"][OPEN] == {"count": 1, "p50": 120, "p90": 120, "max": 120}
    assert report["prefillByCategory"][JUMP]["count"] == 1
    assert report["generations"]["busyMs"] == 330.5 and report["generations"]["draftMs"] == 2.2
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    # the generation's line comes when it finishes, before the requests it held
    generations = [e["generation"] for e in entries if "generation" in e and "id" not in e]
    assert [(g["id"], g["queuedMs"], g["prefillMs"], g["decodeMs"], g["draftMs"]) for g in generations] == [
        (7, 4.0, 250.0, 80.5, 2.25)]
    lines = [e for e in entries if "id" in e]
    assert [line["id"] for line in lines] == [1, 2, 3]
    assert lines[1]["cause"] == PENDING_PREFILL and lines[1]["prefillTokens"] == 120
    stats.close()
