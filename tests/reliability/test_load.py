"""A 3-second load burst (`make soak` holds it for 30 s): typing in 20 documents with a request
after every keystroke, offered at 200 requests/s, a fifth of them cancelled."""

from __future__ import annotations

import json

import pytest

from codespec.reliability import procinfo
from codespec.reliability.soak import RSS_LIMIT_BYTES, run_soak

pytestmark = pytest.mark.skipif(not procinfo.available(), reason="needs Linux /proc for RSS")


def test_burst_every_request_answered_nothing_lost(shared):
    report = run_soak(shared, rate=200, seconds=3, documents=20, seed=5, uri_prefix="file:///load-test")
    summary = json.dumps(report.to_dict(), indent=1)
    print(summary)
    assert report.requests > 20 and report.cancels_sent > 0, summary
    assert report.unanswered == 0 and report.answered_twice == 0, summary  # no deadlock, none lost
    assert report.errors == [] and report.probe_after_ok, summary
    assert set(report.outcomes) <= {"items", "empty", "null", "cancelled"}, summary
    assert report.documents_intact == 20, summary  # every keystroke applied, in order
    assert report.rss_growth_mb * 2**20 < RSS_LIMIT_BYTES, summary
    assert report.server_stats["maxForwardsAfterCancel"] <= 1, summary
    # pygls 2.1.1 keeps a future per notification for ever; once idle, nothing may be held.
    assert report.server_stats["handlersInFlight"] == 0, summary


def test_notifications_leave_no_handler_state_behind(shared):
    uri = "file:///load-test/notifications.py"
    shared.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": ""}})
    for version in range(2, 302):
        at = {"line": 0, "character": version - 2}
        shared.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"range": {"start": at, "end": at}, "text": "x"}]})
    assert shared.result("codespec/documentText", {"uri": uri}) == {"text": "x" * 300, "version": 301}
    assert shared.result("codespec/stats", {})["handlersInFlight"] == 0
    shared.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
