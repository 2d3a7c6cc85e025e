"""The pause figures (what is on screen when the user stops typing) on hand-made request records, and on
a replay through the fake server."""

from __future__ import annotations

from codespec.sessions.metrics import PAUSE_MS, pause_summary, screen_pauses, summarize
from codespec.sessions.replay import ReplayedRequest, replay_sessions
from tests.sessions.conftest import fake_server

URI = "file:///t.py"


def record(index: int, line_text: str, *, key: float | None, answer: float | None = None,
           shown: str | None = None, gap_ms: float | None = None, next_key: float | None = None,
           expect: str | None = None, uri: str = URI) -> ReplayedRequest:  # fmt: skip
    """A request sent at its keystroke (or 10 ms after the previous instant when it follows none),
    the cursor at the end of `line_text`, answered at `answer` with `shown` (None: a null answer)."""
    sent = key if key is not None else 0.0
    made = ReplayedRequest("s", "", uri, index, sent, 0, len(line_text), sent_s=sent, line_text=line_text,
                         keystroke_s=key, gap_ms=gap_ms, next_keystroke_s=next_key,
                         expect=None if expect is None else {"line_rest": expect, "next_lines": ""})  # fmt: skip
    if answer is not None:
        made.responses, made.latency_ms = 1, (answer - sent) * 1000.0
        made.outcome = "items" if shown is not None else "null"
        made.shown = shown
    return made


def test_a_pause_is_covered_when_ghost_text_arrives_before_the_next_keystroke():
    records = [
        record(1, "x = ", key=1.0, answer=1.2, shown="foo()", gap_ms=800, next_key=1.8, expect="foo()"),
        record(2, "x = f", key=1.8, answer=1.85, shown="oo()", gap_ms=200, next_key=2.0),  # no pause
    ]
    pauses, shown = screen_pauses(records)
    assert [p.record.id for p in pauses] == [1]
    assert pauses[0].covered and pauses[0].ghost == "foo()" and pauses[0].accepted is True
    assert abs(pauses[0].time_to_ghost_ms - 200.0) < 1e-6
    assert shown == 2


def test_a_pause_is_not_covered_by_a_late_answer_a_null_or_a_wrong_typing():
    late = [record(1, "x = ", key=1.0, answer=1.9, shown="foo()", gap_ms=800, next_key=1.8)]
    null = [record(1, "x = ", key=1.0, answer=1.1, gap_ms=800, next_key=1.8)]
    (pause,), shown = screen_pauses(late)
    assert not pause.covered and pause.time_to_ghost_ms is None and pause.accepted is None and shown == 0
    assert not screen_pauses(null)[0][0].covered
    # ghost text on screen, but the user typed something else: it goes, and the new request is slow
    wrong = [
        record(1, "x = ", key=1.0, answer=1.1, shown="foo()", gap_ms=100, next_key=1.1),
        record(2, "x = g", key=1.1, answer=2.5, shown="et()", gap_ms=900, next_key=2.0, expect="et()"),
    ]
    (pause,), _ = screen_pauses(wrong)
    assert pause.record.id == 2 and not pause.covered and pause.accepted is None


def test_typed_along_ghost_text_stays_on_screen_through_the_keystroke():
    shown_before = record(1, "x = ", key=1.0, answer=1.1, shown="foo()", gap_ms=300, next_key=1.3)
    # the user types "f", the start of the ghost text, and pauses; the server is slow to answer
    slow = record(2, "x = f", key=1.3, answer=2.9, shown="oo()", gap_ms=1000, next_key=2.3, expect="oo()")
    (pause,), _ = screen_pauses([shown_before, slow])
    assert pause.covered and pause.ghost == "oo()" and pause.time_to_ghost_ms == 0.0 and pause.accepted
    # answered from the server's cache: that answer is the ghost text, on screen all along
    cached = record(
        2, "x = f", key=1.3, answer=1.301, shown="oo(1)", gap_ms=1000, next_key=2.3, expect="oo()"
    )
    (pause,), shown = screen_pauses([shown_before, cached])
    assert pause.ghost == "oo(1)" and pause.time_to_ghost_ms == 0.0 and pause.accepted is False
    assert shown == 2
    # typing the whole ghost text leaves nothing to show
    done = record(2, "x = foo()", key=1.3, gap_ms=1000, next_key=2.3)
    assert not screen_pauses([shown_before, done])[0][0].covered
    # the same typing in another document is not typing along
    elsewhere = record(2, "x = f", key=1.3, gap_ms=1000, next_key=2.3, uri="file:///other.py")
    assert not screen_pauses([shown_before, elsewhere])[0][0].covered


def test_an_answer_to_a_request_the_user_typed_past_is_not_shown():
    records = [
        record(1, "x = ", key=1.0, answer=1.5, shown="foo()", gap_ms=300, next_key=1.3),  # arrives after 2
        record(2, "x = f", key=1.3, gap_ms=1000, next_key=2.3),  # never answered
    ]
    (pause,), shown = screen_pauses(records)
    assert pause.record.id == 2 and not pause.covered and shown == 0


def test_the_last_keystroke_pauses_until_the_session_ends():
    on_time = record(1, "x = ", key=1.0, answer=1.7, shown="foo()", gap_ms=1000, next_key=None)
    too_late = record(1, "x = ", key=1.0, answer=2.2, shown="foo()", gap_ms=1000, next_key=None)
    short = record(1, "x = ", key=1.0, answer=1.1, shown="foo()", gap_ms=300, next_key=None)
    assert screen_pauses([on_time])[0][0].covered
    assert not screen_pauses([too_late])[0][0].covered
    assert screen_pauses([short])[0] == []  # 300 ms is no pause
    assert screen_pauses([short], pause_ms=250)[0][0].covered


def test_pause_summary_counts_plays_apart():
    first = record(
        1, "x = ", key=1.0, answer=1.2, shown="foo()", gap_ms=800, next_key=1.8, expect="foo() + 1"
    )
    second = record(2, "x = ", key=1.0, answer=1.9, shown="bar", gap_ms=800, next_key=1.8, expect="foo() + 1")
    second.play = 1  # another play: the same clock instants, its own screen
    summary = pause_summary([first, second], keystrokes=4, typed_chars=8)
    assert summary["count"] == 2 and summary["covered"] == 1 and summary["coverage"] == 0.5
    assert summary["accepted_at_pause"] == 1 and summary["accepted_at_pause_rate"] == 0.5
    assert summary["suggestions_per_100_keystrokes"] == 25.0  # the late answer was never on screen
    assert summary["chars_saved"] == 0 and summary["chars_saved_share"] == 0.0  # nothing typed along
    assert summary["pause_ms"] == PAUSE_MS


async def test_replay_finds_the_sessions_pauses(small_sessions):
    session = small_sessions[0]
    result = await replay_sessions([session], fake_server("--delay", "0.005"), speed=None)
    summary = summarize(result)
    assert next(iter(summary)) == "pauses"  # the headline comes first
    # every keystroke followed by a request, with >= 500 ms of session time before the next keystroke
    keys = [e for e in session.events if e.method == "textDocument/didChange"]
    ends = [e.t for e in keys[1:]] + [session.events[-1].t]
    requested, pending = set(), None
    for event in session.events:
        if event.method == "textDocument/didChange":
            pending = event
        elif event.method == "textDocument/inlineCompletion" and pending is not None:
            requested.add(id(pending))
            pending = None
    expected = sum(id(k) in requested and end - k.t >= 0.5 for k, end in zip(keys, ends, strict=True))
    pauses = summary["pauses"]
    assert pauses["count"] == expected > 0
    # at max speed every answer (the fake server always suggests) comes before the next keystroke
    assert pauses["covered"] == expected and pauses["coverage"] == 1.0
    assert pauses["suggestions_per_100_keystrokes"] > 0


def test_chars_saved_count_each_typed_character_once_and_tabs_per_line():
    """Typing along one suggestion "foo()\n    bar" shown at x = : every typed character of it counts once
    (5 + Enter with its indent 5 + 1 = 11, where counting every request's whole suggestion gave far more),
    and accepting it would have taken 2 Tab presses (one per line typed along)."""
    texts = ["x = ", "x = f", "x = fo", "x = foo", "x = foo(", "x = foo()", "    ", "    b"]
    records = []
    for index, text in enumerate(texts):
        key = 1.0 + 0.2 * index
        last = index == len(texts) - 1
        made = record(index + 1, text, key=key, answer=key + 0.05 if index == 0 else None,
                      shown="foo()\n    bar" if index == 0 else None, gap_ms=800 if last else 200,
                      next_key=None if last else key + 0.2)  # fmt: skip
        made.line = 1 if text.startswith(" ") else 0
        records.append(made)
    summary = pause_summary(records, keystrokes=7, typed_chars=11)
    assert summary["chars_saved"] == 11 and summary["chars_saved_share"] == 1.0
    assert summary["tab_presses"] == 2
    assert summary["count"] == 1 and summary["covered"] == 1  # "ar" still on screen at the pause


def test_uncovered_pauses_are_broken_down_by_cause():
    late = record(1, "x = ", key=1.0, answer=2.0, shown="foo()", gap_ms=800, next_key=1.8)
    declined = record(2, "y = ", key=3.0, answer=3.01, gap_ms=800, next_key=3.8)
    declined.server = {"cause": "declined", "contextReason": "text right of the cursor"}
    pending = record(3, "z = ", key=4.0, gap_ms=800, next_key=4.8)
    pending.outcome, pending.server = "cancelled", {"cause": "pending-prefill"}
    summary = pause_summary([late, declined, pending], keystrokes=3)
    assert summary["causes"] == {"too-late": 1, "declined": 1, "pending-prefill": 1}
    assert summary["declined_reasons"] == {"text right of the cursor": 1}


def test_time_to_ghost_text_at_each_percentile_of_all_pauses_counts_uncovered_pauses_as_never():
    from codespec.sessions.metrics import Pause, ghost_percentiles

    def pause(ms: float | None) -> Pause:
        return Pause(record(1, "x", key=1.0), None if ms is None else "y", ms, None)

    # 0 (typed-along text stayed), 100, 300 ms and one pause without ghost text: by nearest rank of four
    got = ghost_percentiles([pause(300.0), pause(None), pause(0.0), pause(100.0)])
    assert got == {"p10": 0.0, "p25": 100.0, "p50": 300.0, "p75": 300.0, "p90": None, "p95": None}
    # better coverage moves the high percentiles from never to a time, as a faster answer moves the low ones
    assert ghost_percentiles([pause(300.0), pause(400.0), pause(0.0), pause(100.0)])["p90"] == 400.0
    assert ghost_percentiles([]) == dict.fromkeys(("p10", "p25", "p50", "p75", "p90", "p95"))


def test_a_records_file_line_summarizes_again_as_the_run_did():
    import dataclasses
    import json

    shown_before = record(1, "x = ", key=1.0, answer=1.1, shown="foo()", gap_ms=300, next_key=1.3)
    slow = record(2, "x = f", key=1.3, answer=2.9, shown="oo()", gap_ms=1000, next_key=2.3, expect="oo()")
    names = {f.name for f in dataclasses.fields(ReplayedRequest)}
    back = [ReplayedRequest(**{k: v for k, v in json.loads(json.dumps(r.to_json())).items() if k in names})
            for r in (shown_before, slow)]
    assert [p.time_to_ghost_ms for p in screen_pauses(back)[0]] == [p.time_to_ghost_ms for p in
                                                                     screen_pauses([shown_before, slow])[0]] == [0.0]


def test_paired_pauses_compare_the_same_pauses_one_by_one():
    from codespec.sessions.metrics import paired_pauses

    def play(answers: list[float | None]) -> list[ReplayedRequest]:
        made = []
        for i, (text, after) in enumerate(zip(("a = ", "b = ", "c = "), answers, strict=True)):
            key = float(i + 1)
            shown = None if after is None else "x"
            made.append(record(i + 1, text, key=key, answer=key + (after if after is not None else 0.1), shown=shown,
                               gap_ms=800, next_key=key + 0.8))
        return made

    got = paired_pauses(play([0.3, 0.1, None]), play([0.1, 0.2, 0.15]))
    assert (got["pauses"], got["covered_only_base"], got["covered_only_other"]) == (3, 0, 1)
    assert (got["both_new"], got["other_faster"], got["other_slower"]) == (2, 1, 1)
    d = got["diff_ms"]  # -200 and +100 ms
    assert (round(d["p10"]), round(d["p50"]), round(d["p90"]), round(d["mean"])) == (-170, -50, 70, -50)
