"""Replay against the fake pygls server in tests/sessions/fake_server.py: outcomes, cancellation,
document state, acceptance, the CLI."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from codespec.cli import main
from codespec.errors import CodespecError
from codespec.sessions.metrics import summarize
from codespec.sessions.replay import Play, judge, replay_sessions, shown_suggestion
from tests.sessions.conftest import fake_server


def assert_sound(result, summary, sessions, label: str | None = None) -> None:
    """The properties every replay must have: one outcome per request, nothing answered after its
    cancellation, no errors, the server's final text of each document equals the session's."""
    records = [r for r in result.records if label is None or r.label == label]
    documents = [d for d in result.documents if label is None or d.label == label]
    assert summary["requests"] == len(records) == sum(len(s.inline_requests()) for s in sessions)
    assert all(r.responses == 1 for r in records), [r for r in records if r.responses != 1][:3]
    assert summary["missing"] == summary["errors"] == summary["duplicate_responses"] == 0
    assert summary["answered"] + summary["cancelled"] == summary["requests"]
    assert summary["answered_after_cancel"] == 0
    assert summary["documents_checked"] == len(documents) == len(sessions)
    assert summary["documents_mismatched"] == 0


async def run(sessions, *flags, **kwargs):
    result = await replay_sessions(sessions, fake_server(*flags), **kwargs)
    return result, summarize(result)


async def test_max_speed_answers_every_request_and_measures_acceptance(small_sessions):
    requests = [e for s in small_sessions for e in s.inline_requests()]
    # the most common two-character start of what the user typed next: a suggestion often accepted
    starts = Counter(
        e.expect["line_rest"][:2] for e in requests if e.expect and len(e.expect["line_rest"]) >= 2
    )
    suggestion = starts.most_common(1)[0][0]
    result, summary = await run(small_sessions, "--delay", "0.005", "--suggestion", suggestion, speed=None)
    assert_sound(result, summary, small_sessions)
    assert summary["cancelled"] == 0 and summary["items"] == summary["requests"]
    expected = sum(
        1 for e in requests if e.expect is not None and e.expect["line_rest"].startswith(suggestion)
    )
    assert summary["shown"] == sum(1 for e in requests if e.expect is not None)
    assert summary["accepted"] == expected > 0
    # each typed character counts at most once, and only when it was on screen before it was typed
    assert 0 < summary["chars_saved"] <= summary["pauses"]["typed_chars"]
    assert summary["keystrokes"] == sum(s.keystrokes() for s in small_sessions)
    warm_up = 1  # the replayer's first request on a scratch document, not in the report
    assert summary["server_stats"] == {
        "requests": summary["requests"] + warm_up,
        "answered": summary["requests"] + warm_up,
    }
    assert all(r.latency_ms is not None and r.latency_ms >= 5.0 for r in result.records)


async def test_fast_typing_cancels_older_requests_and_the_server_honours_it(small_sessions):
    result, summary = await run(small_sessions[:1], "--delay", "0.15", speed=10.0)
    assert_sound(result, summary, small_sessions[:1])
    assert summary["cancelled"] > summary["requests"] // 2
    cancelled = [r for r in result.records if r.outcome == "cancelled"]
    assert all(r.cancel_sent_s is not None and r.cancel_sent_s >= r.sent_s for r in cancelled)
    assert any(r.error and r.error["code"] == -32800 for r in cancelled)
    # the newest request of each document is never cancelled: nothing newer replaced it
    last = {r.uri: r for r in result.records}
    assert all(r.outcome == "items" for r in last.values())


async def test_a_server_that_ignores_cancellation_is_caught(small_sessions):
    result, summary = await run(small_sessions[:1], "--delay", "0.15", "--ignore-cancel", speed=10.0)
    assert summary["answered_after_cancel"] > 0
    assert all(r.responses == 1 for r in result.records)


async def test_a_server_that_loses_text_is_caught(small_sessions):
    result, summary = await run(small_sessions[:2], "--corrupt-text", speed=40.0)
    assert summary["documents_checked"] == 2 and summary["documents_mismatched"] == 2
    assert "first difference" in result.documents[0].detail


async def test_a_server_without_the_extensions_is_replayed_without_the_checks(small_sessions):
    result, summary = await run(small_sessions[:1], "--no-extensions", speed=40.0)
    assert summary["documents_checked"] == 0 and summary["server_stats"] is None
    assert summary["answered"] + summary["cancelled"] == summary["requests"] > 0
    assert summary["items"] > 0


async def test_each_play_ends_when_the_server_says_its_own_work_is_done(small_sessions):
    # The server reports pendingWork until polled 5 times after its last request: each play (and the warm-up)
    # waits for that, so no prefetch or idle-time work of one play runs beside the next one.
    result, summary = await run(small_sessions[:2], "--work-after-play", "5", speed=40.0)
    assert_sound(result, summary, small_sessions[:2])
    assert summary["server_stats"]["pendingWork"] == 0 and summary["server_stats"]["settlePolls"] >= 5
    assert all(s["pendingWork"] == 0 and s["settlePolls"] >= 5 for s in result.session_stats)
    assert summary["settle_s"] >= 0.2  # 3 waits of 4 polls 50 ms apart at least
    # A server without the field (or without codespec/stats) is not waited for.
    _, plain = await run(small_sessions[:2], speed=40.0)
    assert plain["settle_s"] < 0.5


async def test_a_server_that_exits_is_an_error():
    from codespec.sessions.format import read_session
    from tests.sessions.conftest import DATA

    session = read_session(sorted(DATA.glob("*.jsonl"))[0])
    with pytest.raises(CodespecError, match="exited|initialize"):
        await replay_sessions([session], [sys.executable, "-c", "import sys; sys.exit(3)"], init_timeout_s=10)


async def test_plays_send_their_settings_and_are_summarized_by_label(small_sessions):
    session = small_sessions[0]
    plays = [Play(session, {"suggestion": "AAA"}, "a"), Play(session, {"suggestion": "BB"}, "b")]
    result = await replay_sessions(plays, fake_server("--delay", "0.005"), speed=None)
    a, b = summarize(result, "a"), summarize(result, "b")
    assert a["requests"] == b["requests"] == len(session.inline_requests())
    assert a["keystrokes"] == b["keystrokes"] == session.keystrokes()
    assert {r.shown for r in result.records if r.label == "a"} == {"AAA"}
    assert {r.shown for r in result.records if r.label == "b"} == {"BB"}
    assert len(result.session_stats) == 2 and result.session_stats[1]["requests"] == 2 * a["requests"] + 1


def test_shown_suggestion_honours_the_item_range():
    line = "    retu"
    full = {"start": {"line": 3, "character": 4}, "end": {"line": 3, "character": 8}}
    assert shown_suggestion("return x", full, 3, line, 8) == "rn x"
    assert shown_suggestion("yield x", full, 3, line, 8) is None  # does not extend the typed text
    assert shown_suggestion("rn x", None, 3, line, 8) == "rn x"


def test_judge_accepts_prefixes_of_what_was_typed():
    expect = {"line_rest": "x + 1)", "next_lines": "    return y\n"}
    assert judge("x + 1)", expect) == (True, 6)
    assert judge("x + 1)\n    return y", expect) == (True, 19)
    assert judge("x + 1)\n    print(y)", expect) == (True, 6)  # first line only
    assert judge("x + 2)", expect) == (False, 0)
    assert judge("\n    return", {"line_rest": "", "next_lines": "    return y\n"}) == (True, 11)


def test_cli_json_and_plot(tmp_path, capsys, small_sessions):
    plot = tmp_path / "latency.png"
    records = tmp_path / "records.jsonl"
    server = " ".join(fake_server("--delay", "0.005"))
    code = main(["replay", str(small_sessions[0].path), "--server", server, "--speed", "max", "--json",
                 "--plot", str(plot), "--records", str(records), "--check"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("requests", "answered", "cancelled", "errors", "accepted_rate"):
        assert key in report
    assert set(report["latency_ms"]) >= {"p50", "p90", "p99"}
    assert report["requests"] == len(small_sessions[0].inline_requests())
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(records.read_text().splitlines()) == report["requests"]


def test_cli_check_fails_on_a_broken_server(capsys, small_sessions):
    server = " ".join(fake_server("--corrupt-text"))
    assert main(["replay", str(small_sessions[0].path), "--server", server, "--speed", "max", "--check"]) == 1
    assert "documents whose server text differs" in capsys.readouterr().err
    assert main(["replay", "/nonexistent/session.jsonl", "--speed", "max"]) == 2
