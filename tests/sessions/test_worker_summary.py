"""The worker's time per generation: read back from the server's request log and summed per variant."""

from __future__ import annotations

import json

import pytest

from codespec.sessions.metrics import worker_summary
from codespec.sessions.replay import ReplayedRequest, attach_server_records


def test_generation_lines_are_kept_apart_from_request_records(tmp_path):
    log = tmp_path / "requests.jsonl"
    entries = [
        {"id": 5, "outcome": "answered", "prefillTokens": 12},
        {"generation": {"id": 1, "finishReason": "stop", "prefillMs": 100.0, "decodeMs": 50.0}},
        {"generation": {"id": 2, "finishReason": "cancelled", "prefillMs": 20.0, "decodeMs": 0.0}},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries) + "not json\n", encoding="utf-8")
    records = [ReplayedRequest("s", "plain", "file:///a", 5, 0.0, 0, 0), ReplayedRequest("s", "plain", "file:///a", 1,
                                                                                       0.0, 0, 0)]
    generations: list[dict] = []
    assert attach_server_records(records, str(log), generations) == 1
    assert records[0].server == entries[0] and records[1].server is None  # generation 1 is not request 1
    assert [g["id"] for g in generations] == [1, 2]


def test_worker_summary_sums_busy_time_and_tokens_per_forward():
    generations = [
        {"finishReason": "stop", "queuedMs": 1.0, "prefillMs": 100.0, "decodeMs": 300.0, "draftMs": 6.0,
         "newTokens": 12, "targetForwards": 6, "draftingOff": False,
         "forwardMs": [[1, 4, 120.0], [3, 1, 60.0], [5, 1, 90.0]]},
        {"finishReason": "cancelled", "queuedMs": 9.0, "prefillMs": 40.0, "decodeMs": 60.0, "draftMs": 0.0,
         "newTokens": 3, "targetForwards": 3, "draftingOff": True, "forwardMs": [[1, 2, 50.0]]},
        {"finishReason": "error", "prefillMs": None, "decodeMs": None},  # failed: no timings, not counted
    ]
    w = worker_summary(generations)
    assert w["generations"] == 2 and w["cancelled"] == 1 and w["drafting_off"] == 1
    assert w["busy_s"] == pytest.approx(0.5)
    assert w["tokens_per_forward"] == pytest.approx(15 / 9)
    assert w["decode_ms_per_token"] == pytest.approx(360 / 15)
    assert w["draft_s"] == pytest.approx(0.006)
    assert w["step_ms"] == pytest.approx(170 / 6)
    assert w["verify_ms"] == pytest.approx(75.0) and w["verify_tokens"] == pytest.approx(4.0)
    assert worker_summary([])["tokens_per_forward"] is None and worker_summary([])["verify_ms"] is None
