"""What a replay adds up to: its pause figures, request summary, table and plots, computed from its requests.

What the user saw at each pause (the pause figures: coverage, time to ghost
text, acceptance), the summary of a replay's requests, its table and its plots. The replaying itself is in
codespec/sessions/replay.py."""

from __future__ import annotations

import json
import math
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codespec.sessions.format import CATEGORIES, TextBuffer
from codespec.sessions.replay import OUTCOMES, ReplayedRequest, ReplayResult, judge
from codespec.stats import percentile

PAUSE_MS = 500.0


@dataclass
class Pause:
    """The screen at one pause: a keystroke that triggered an inline request and was followed by at
    least the pause length without another keystroke in the session (or by the session's end)."""

    record: ReplayedRequest  # the request that keystroke triggered
    ghost: str | None  # the ghost text on screen when the pause ended (None: nothing)
    # keystroke sent -> that ghost text on screen (0: ghost text stayed on screen through the keystroke)
    time_to_ghost_ms: float | None
    accepted: bool | None  # the ghost text was what the user typed next (None: not judged, no expect)
    cause: str = ""  # why no ghost text (pause_cause); "" when covered

    @property
    def covered(self) -> bool:
        return self.ghost is not None


def typed_between(before: ReplayedRequest, after: ReplayedRequest) -> str | None:
    """The text inserted at `before`'s cursor that took the document to `after`'s cursor: on the same
    line, or a line break (Enter with auto-indent) that moved the rest of the line down. None when the
    change was anything else (a jump, a deletion)."""
    if after.uri != before.uri:
        return None
    try:
        cursor = TextBuffer(before.line_text).offset_at(0, before.character)
        new_cursor = TextBuffer(after.line_text).offset_at(0, after.character)
    except ValueError:
        return None
    if after.line == before.line:
        typed = after.line_text[cursor:new_cursor]
        inserted = before.line_text[:cursor] + typed + before.line_text[cursor:]
        return typed if typed and after.line_text == inserted else None
    indent = after.line_text[:new_cursor]
    if after.line == before.line + 1 and not indent.strip() and after.line_text[new_cursor:] == before.line_text[cursor:]:
        return "\n" + indent
    return None


def typed_along(ghost: str, before: ReplayedRequest, after: ReplayedRequest) -> str | None:
    """What is left of `ghost` (shown at `before`'s cursor) once the user typed its start, which takes the
    document to `after`'s cursor line and position: editors keep such ghost text on screen. None when the
    typing went elsewhere or did not match the ghost text."""
    typed = typed_between(before, after)
    if not typed or not ghost.startswith(typed):
        return None
    return ghost[len(typed) :] or None


@dataclass
class Screen:
    """What one play put on screen: its pauses, how many answers showed ghost text, and the characters
    the user typed while they were on screen as ghost text (each typed character counted once) with the
    Tab presses that accepting them would have taken (one per line of a shown suggestion typed along)."""

    pauses: list[Pause]
    shown: int
    chars_saved: int
    tab_presses: int


def screen_pauses(records: Sequence[ReplayedRequest], pause_ms: float = PAUSE_MS) -> tuple[list[Pause], int]:
    """(the pauses, how many answers put ghost text on screen) of one play's records (send order)."""
    played = screen(records, pause_ms)
    return played.pauses, played.shown


def screen(records: Sequence[ReplayedRequest], pause_ms: float = PAUSE_MS) -> Screen:
    """The screen of one play's records (send order).

    The screen is played forward on the replay clock. An answer that arrives before a newer keystroke
    (and after no newer answer) replaces the ghost text: its suggestion, or nothing for a null. A
    keystroke keeps the ghost text when it typed the ghost text's start (the rest stays), otherwise
    clears it. A pause ends at the session's next keystroke as sent, or for the last keystroke when its
    scheduled gap has passed; what is on screen then is the pause's ghost text."""
    key, pause_end, answer = 1, 0, 2  # event order at equal instants: a pause ends before the next keystroke
    events: list[tuple[float, int, int]] = []
    keystroke_s: dict[int, float] = {}  # by record index
    # by record index: when the keystroke after the one it followed was sent; its answer is stale from then
    # on, even when that keystroke triggered no request (so that no record tells of it)
    stale_from: dict[int, float | None] = {}
    next_key: float | None = None
    for index, record in enumerate(records):
        if record.keystroke_s is not None:
            keystroke_s[index], next_key = record.keystroke_s, record.next_keystroke_s
            events.append((record.keystroke_s, key, index))
            if record.gap_ms is not None and record.gap_ms >= pause_ms:
                end = record.next_keystroke_s
                events.append(
                    (record.keystroke_s + record.gap_ms / 1000.0 if end is None else end, pause_end, index)
                )
        stale_from[index] = next_key
        if record.outcome in ("items", "null") and record.latency_ms is not None:
            events.append((record.sent_s + record.latency_ms / 1000.0, answer, index))
    events.sort()
    ghost: str | None = None
    anchor: ReplayedRequest | None = None  # the request whose cursor the ghost text follows
    since: float | None = None  # since when ghost text has been on screen without a gap
    newest_key = newest_answer = -1
    pauses: list[Pause] = []
    shown = saved = 0
    origin, consumed = -1, 0  # the answer whose suggestion is on screen, and how much of it was typed along
    tab_lines: set[tuple[int, int]] = set()  # (origin, line of its suggestion) typed along
    for instant, kind, index in events:
        record = records[index]
        if kind == pause_end:
            wait = None if since is None else max(0.0, (since - keystroke_s[index]) * 1000.0)
            verdict = None if ghost is None or record.expect is None else judge(ghost, record.expect)[0]
            cause = "" if ghost is not None else pause_cause(record, instant)
            pauses.append(Pause(record, ghost, wait, verdict, cause))
        elif kind == key:
            newest_key = index
            typed = typed_between(anchor, record) if ghost is not None and anchor is not None else None
            if ghost is not None and typed and ghost.startswith(typed):  # shown in time, typed along
                saved += len(typed)
                first_line = records[origin].shown[:consumed].count("\n") if records[origin].shown else 0
                tab_lines.update((origin, first_line + k) for k in range(typed.count("\n") + 1))
                consumed += len(typed)
            left = ghost[len(typed) :] if ghost is not None and typed and ghost.startswith(typed) else None
            ghost, anchor = (left, record) if left else (None, None)
            since = since if left else None
        else:
            later_key = stale_from[index]
            if index < newest_key or (later_key is not None and instant >= later_key):
                continue  # a newer keystroke was sent first: the editor dropped the answer
            if index < newest_answer:
                continue  # overtaken by a newer request's answer: the editor dropped it too
            newest_answer = index
            text = record.shown if record.outcome == "items" else None
            if text:
                shown += 1
                since = instant if ghost is None else since
                if text != ghost:  # a new suggestion (the same text again is the one on screen, from a cache)
                    origin, consumed = index, 0
                ghost, anchor = text, record
            else:
                ghost = anchor = since = None
    return Screen(pauses, shown, saved, len(tab_lines))


def pause_cause(record: ReplayedRequest, end: float) -> str:
    """Why a pause ended without ghost text, from its request: `too-late` (a suggestion came after the user
    typed on), `not-shown` (an answer whose item did not extend the line), the server's cause where it
    keeps one (its request log: declined, pending-prefill, pending-decode, emptied, ...), else `null`
    (answered with nothing) or `pending` (no answer before the user typed on)."""
    answered_at = record.sent_s + record.latency_ms / 1000.0 if record.latency_ms is not None else None
    if record.late or (record.outcome == "items" and record.shown and answered_at is not None
                       and answered_at >= end):  # fmt: skip
        return "too-late"
    if record.outcome == "items" and not record.shown:
        return "not-shown"
    server = record.server.get("cause") if isinstance(record.server, dict) else None
    if server:
        return str(server)
    if record.outcome == "error":
        return "error"
    if record.outcome == "items":
        return "dropped"  # answered in time, but a newer answer or keystroke took its place
    return "null" if record.outcome == "null" else "pending"


def pause_summary(records: Sequence[ReplayedRequest], keystrokes: int, typed_chars: int | None = None,
                  pause_ms: float = PAUSE_MS) -> dict[str, Any]:  # fmt: skip
    """The headline figures: what the user sees when they stop typing, and what the ghost text saved."""
    pauses: list[Pause] = []
    shown = saved = tabs = 0
    by_play: dict[int, list[ReplayedRequest]] = {}
    for record in records:
        by_play.setdefault(record.play, []).append(record)
    for play_records in by_play.values():
        played = screen(play_records, pause_ms)
        pauses += played.pauses
        shown += played.shown
        saved += played.chars_saved
        tabs += played.tab_presses
    covered = [p for p in pauses if p.covered]
    waits = [p.time_to_ghost_ms for p in covered if p.time_to_ghost_ms is not None]
    judged = [p for p in pauses if p.record.expect is not None]
    accepted = sum(p.accepted is True for p in judged)
    return {
        "pause_ms": pause_ms,
        "count": len(pauses),
        "covered": len(covered),
        "coverage": len(covered) / len(pauses) if pauses else None,
        "time_to_ghost_ms": {"p50": percentile(waits, 50), "p90": percentile(waits, 90)},
        "time_to_ghost_all_ms": ghost_percentiles(pauses),
        "accepted_at_pause": accepted,
        # over the pauses with an expect, covered or not: how often the user found the right text waiting
        "accepted_at_pause_rate": accepted / len(judged) if judged else None,
        "suggestions_per_100_keystrokes": 100.0 * shown / keystrokes if keystrokes else None,
        # typed characters that were on screen as ghost text before they were typed, each once
        "chars_saved": saved,
        "chars_saved_per_keystroke": saved / keystrokes if keystrokes else None,
        "typed_chars": typed_chars,
        "chars_saved_share": saved / typed_chars if typed_chars else None,
        "tab_presses": tabs,
        "causes": dict(Counter(p.cause for p in pauses if not p.covered).most_common()),
        "declined_reasons": dict(Counter(
            str((p.record.server or {}).get("contextReason") or "?") for p in pauses if p.cause == "declined"
        ).most_common()),  # fmt: skip
        "by_category": {
            name: {"pauses": sum(p.record.category == name for p in pauses),
                   "covered": sum(p.record.category == name and p.covered for p in pauses)}
            for name in CATEGORIES
        },  # fmt: skip
    }


def prefill_by_category(records: Sequence[ReplayedRequest]) -> dict[str, dict[str, Any]]:
    """Prompt tokens the server prefilled per request (its request log), p50 / p90 / max, by where the
    user was (the session's category of the request)."""
    out: dict[str, dict[str, Any]] = {}
    for name in CATEGORIES:
        values = [r.server["prefillTokens"] for r in records if r.category == name and isinstance(r.server, dict)
                  and isinstance(r.server.get("prefillTokens"), int)]  # fmt: skip
        out[name] = {"count": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
                     "max": max(values, default=None)}  # fmt: skip
    return out


def worker_summary(generations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where the server's worker spent its time (the generation records of its request log): generations,
    busy seconds (prefill + decode), p50 / p90 of each per generation, tokens per target forward, drafting's
    own work. A request that arrives while the worker is busy waits for it: busy time is what speculation
    must not add to."""
    done = [g for g in generations if isinstance(g.get("decodeMs"), int | float)]
    prefill = [float(g.get("prefillMs") or 0.0) for g in done]
    decode = [float(g["decodeMs"]) for g in done]
    queued = [float(g["queuedMs"]) for g in done if isinstance(g.get("queuedMs"), int | float)]
    tokens = sum(int(g.get("newTokens") or 0) for g in done)
    forwards = sum(int(g.get("targetForwards") or 0) for g in done)
    return {
        "generations": len(done),
        "cancelled": sum(g.get("finishReason") == "cancelled" for g in done),
        "interrupted": sum(int(g.get("interrupted") or 0) for g in done),  # forwards stopped part-way
        "busy_s": round((sum(prefill) + sum(decode)) / 1000, 3),
        "queued_ms": {"p50": percentile(queued, 50), "p90": percentile(queued, 90)},
        "prefill_ms": {"p50": percentile(prefill, 50), "p90": percentile(prefill, 90)},
        "decode_ms": {"p50": percentile(decode, 50), "p90": percentile(decode, 90)},
        "new_tokens": tokens,
        "target_forwards": forwards,
        "tokens_per_forward": tokens / forwards if forwards else None,
        "decode_ms_per_token": sum(decode) / tokens if tokens else None,
        "draft_s": round(sum(float(g.get("draftMs") or 0.0) for g in done) / 1000, 3),
        "drafting_off": sum(bool(g.get("draftingOff")) for g in done),
        **forward_costs(done),
    }


def forward_costs(generations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean ms of the decode forwards as they ran in the server: steps (one token) and verifies (several;
    their mean tokens), to set beside the cost curve measured idle."""
    sums = {False: [0, 0.0, 0], True: [0, 0.0, 0]}  # verify? -> [forwards, ms, tokens]
    for g in generations:
        for k, n, ms in g.get("forwardMs") or ():
            entry = sums[int(k) > 1]
            entry[0], entry[1], entry[2] = entry[0] + int(n), entry[1] + float(ms), entry[2] + int(k) * int(n)
    step, verify = sums[False], sums[True]
    return {"step_ms": step[1] / step[0] if step[0] else None,
            "verify_ms": verify[1] / verify[0] if verify[0] else None,
            "verify_tokens": verify[2] / verify[0] if verify[0] else None}


def summarize(result: ReplayResult, label: str | None = None, pause_ms: float = PAUSE_MS) -> dict[str, Any]:
    """The report: the pause figures first, then counts per outcome, latency percentiles of answered
    requests, acceptance (of the plays with `label` only, when given)."""
    records = [r for r in result.records if label is None or r.label == label]
    counts = {o: sum(r.outcome == o for r in records) for o in OUTCOMES}
    answered = [r.latency_ms for r in records if r.outcome in ("items", "null") and r.latency_ms is not None]
    with_items = [r.latency_ms for r in records if r.outcome == "items" and r.latency_ms is not None]
    shown = [r for r in records if r.shown and r.expect is not None]
    accepted = [r for r in shown if r.accepted]
    keys = sum(n for name, n in result.keystrokes.items() if label is None or name == label)
    typed = sum(n for name, n in result.typed_chars.items() if label is None or name == label)
    pauses = pause_summary(records, keys, typed, pause_ms)
    checked = [d for d in result.documents if d.ok is not None and (label is None or d.label == label)]
    return {
        "pauses": pauses,
        "server": shlex.join(result.server),
        "speed": "max" if result.speed is None else result.speed,
        "sessions": len(result.sessions),
        "requests": len(records),
        "answered": counts["items"] + counts["null"],
        "items": counts["items"],
        "null": counts["null"],
        "cancelled": counts["cancelled"],
        "errors": counts["error"],
        "missing": counts["missing"],
        "duplicate_responses": sum(max(0, r.responses - 1) for r in records),
        "late_results": sum(r.late for r in records),
        "answered_after_cancel": sum(r.answered_after_cancel is True for r in records),
        "latency_ms": {
            "p50": percentile(answered, 50),
            "p90": percentile(answered, 90),
            "p99": percentile(answered, 99),
            "mean": sum(answered) / len(answered) if answered else None,
            "max": max(answered) if answered else None,
        },
        # the same over answers that carried a suggestion (nulls are often instant "nothing to suggest")
        "latency_items_ms": {
            "p50": percentile(with_items, 50),
            "p90": percentile(with_items, 90),
            "p99": percentile(with_items, 99),
        },
        "shown": len(shown),
        "accepted": len(accepted),
        "accepted_rate": len(accepted) / len(shown) if shown else None,
        "keystrokes": keys,
        "chars_saved": pauses["chars_saved"],
        "chars_saved_per_keystroke": pauses["chars_saved_per_keystroke"],
        "tab_presses": pauses["tab_presses"],
        "prefill_tokens": prefill_by_category(records),
        "worker": worker_summary(result.generations),
        "documents_checked": len(checked),
        "documents_mismatched": sum(d.ok is False for d in checked),
        "other_requests": result.other_requests,
        "other_errors": result.other_errors,
        "server_stats": result.server_stats,
        "max_send_lag_ms": round(result.max_send_lag_ms, 1),
        "first_error": next((r.error for r in records if r.outcome == "error"), None),
        "wall_s": round(result.wall_s, 3),
        "settle_s": round(result.settle_s, 3),
    }


def format_table(summary: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    lat = summary["latency_ms"]
    rate = summary["accepted_rate"]
    per_key = summary["chars_saved_per_keystroke"]
    pauses = summary["pauses"]
    per_100 = pauses["suggestions_per_100_keystrokes"]
    rows = [  # the pauses first: the moment the user looks for ghost text
        (
            f"pauses (>= {pauses['pause_ms']:.0f} ms)",
            f"{pauses['count']}, ghost text at {pauses['covered']} ({pct(pauses['coverage'])})",
        ),
        (
            "  time to ghost text p50 / p90",
            " / ".join(ms(pauses["time_to_ghost_ms"][q]) for q in ("p50", "p90")),
        ),
        (
            "  what was typed next",
            f"{pauses['accepted_at_pause']} ({pct(pauses['accepted_at_pause_rate'])} of judged pauses)",
        ),
        ("suggestions shown / 100 keys", "-" if per_100 is None else f"{per_100:.1f}"),
        (
            "chars saved / keystroke",
            "-" if per_key is None else f"{per_key:.3f} ({summary['chars_saved']} chars)",
        ),
        ("server", summary["server"]),
        ("sessions / speed", f"{summary['sessions']} / {summary['speed']}"),
        ("inline requests", summary["requests"]),
        ("answered (items / null)", f"{summary['answered']} ({summary['items']} / {summary['null']})"),
        ("cancelled", summary["cancelled"]),
        ("errors / missing", f"{summary['errors']} / {summary['missing']}"),
        ("answered after cancel", summary["answered_after_cancel"]),
        ("latency p50 / p90 / p99", f"{ms(lat['p50'])} / {ms(lat['p90'])} / {ms(lat['p99'])}"),
        ("  of items answers", " / ".join(ms(summary["latency_items_ms"][q]) for q in ("p50", "p90", "p99"))),
        (
            "shown / accepted",
            f"{summary['shown']} / {summary['accepted']}" + (f" ({rate:.1%})" if rate is not None else ""),
        ),  # fmt: skip
        (
            "final text checked",
            f"{summary['documents_checked']} docs, {summary['documents_mismatched']} mismatched",
        ),
        ("wall time / max send lag / settling", f"{summary['wall_s']:.1f} s / {summary['max_send_lag_ms']:.0f} ms / "
                                                 f"{summary.get('settle_s', 0.0):.1f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if summary.get("first_error"):
        lines.append(f"{'first error':<{width}}  {json.dumps(summary['first_error'])[:200]}")
    stats = summary.get("server_stats")
    if isinstance(stats, dict):  # the scalar counters; the full object is in --json
        flat = {k: v for k, v in sorted(stats.items()) if isinstance(v, int | float | str | bool)}
        lines.append(f"{'server stats':<{width}}  {json.dumps(flat)}")
    elif stats is not None:
        lines.append(f"{'server stats':<{width}}  {json.dumps(stats)[:300]}")
    return "\n".join(lines)


GHOST_PERCENTILES = (10, 25, 50, 75, 90, 95)


def ghost_percentiles(pauses: Sequence[Pause]) -> dict[str, float | None]:
    """Time to ghost text at each percentile of all pauses, a pause never covered counting as never (None):
    one curve per variant that coverage and latency both move, compared percentile by percentile."""
    ordered = sorted(p.time_to_ghost_ms if p.covered and p.time_to_ghost_ms is not None else math.inf for p in pauses)
    out: dict[str, float | None] = {}
    for q in GHOST_PERCENTILES:
        # the nearest rank, not an interpolation: never (inf) next to a time is never, not a mean of the two
        value = ordered[min(len(ordered) - 1, round((len(ordered) - 1) * q / 100))] if ordered else None
        out[f"p{q}"] = None if value is None or math.isinf(value) else value
    return out


def play_pauses(records: Sequence[ReplayedRequest], pause_ms: float = PAUSE_MS) -> list[Pause]:
    """The pauses of records from any number of plays, each play's screen followed on its own."""
    by_play: dict[int, list[ReplayedRequest]] = {}
    for record in records:
        by_play.setdefault(record.play, []).append(record)
    return [p for play_records in by_play.values() for p in screen_pauses(play_records, pause_ms)[0]]


NEW_ANSWER_MS = 20.0  # a pause's ghost text later than this came from model work (typed-along, cache: 0-5 ms)


def paired_pauses(base: Sequence[ReplayedRequest], other: Sequence[ReplayedRequest],
                  pause_ms: float = PAUSE_MS) -> dict[str, Any]:  # fmt: skip
    """The same pauses (session, time) in two variants' plays, compared one by one: the unpaired percentiles
    mix which pauses each covered and how (a typed-along 0 ms or a new answer); paired, the difference is the
    variants' own. Returns the pauses in both, those covered by one only, and over the pauses both answered
    with new model work (> NEW_ANSWER_MS): how many `other` was faster / slower on and other - base in ms."""

    def by_pause(records: Sequence[ReplayedRequest]) -> dict[tuple[str, float], Pause]:
        return {(p.record.session, p.record.t): p for p in play_pauses(records, pause_ms)}

    a, b = by_pause(base), by_pause(other)
    keys = [k for k in a if k in b]
    new = [(a[k].time_to_ghost_ms, b[k].time_to_ghost_ms) for k in keys if a[k].covered and b[k].covered
           and a[k].time_to_ghost_ms > NEW_ANSWER_MS and b[k].time_to_ghost_ms > NEW_ANSWER_MS]  # fmt: skip
    diffs = [y - x for x, y in new]
    return {
        "pauses": len(keys),
        "covered_only_base": sum(a[k].covered and not b[k].covered for k in keys),
        "covered_only_other": sum(b[k].covered and not a[k].covered for k in keys),
        "both_new": len(new),
        "other_faster": sum(d < 0 for d in diffs),
        "other_slower": sum(d > 0 for d in diffs),
        "diff_ms": {"p10": percentile(diffs, 10), "p50": percentile(diffs, 50), "p90": percentile(diffs, 90),
                    "mean": sum(diffs) / len(diffs) if diffs else None},
    }


def pause_waits(result: ReplayResult, label: str | None = None,
                pause_ms: float = PAUSE_MS) -> tuple[list[float], int]:  # fmt: skip
    """(time to ghost text of the covered pauses in ms, the number of pauses) of a replay's plays."""
    pauses = play_pauses([r for r in result.records if label is None or r.label == label], pause_ms)
    return [p.time_to_ghost_ms for p in pauses if p.time_to_ghost_ms is not None], len(pauses)


def plot_pause_cdf(ax: Any, waits: list[float], count: int, label: str = "", until: float | None = None,
                   **style: Any) -> None:  # fmt: skip
    """The share of pauses with ghost text on screen by each time after the keystroke: the curve
    levels off at the coverage (pauses never covered never arrive). It runs from 0 (ghost text that
    stayed through the keystroke) to `until` ms (default: a little past the slowest)."""
    if not count:
        return
    values = sorted(waits)
    xs = [0.0, *values, until if until is not None else max(values, default=0.0) * 1.05 + 1.0]
    ys = [sum(v <= 0.0 for v in values) / count, *((i + 1) / count for i in range(len(values)))]
    ys.append(ys[-1])
    text = f"{label} " if label else ""
    ax.step(xs, ys, where="post", label=f"{text}{len(values)}/{count} covered", **style)


def style_pause_axes(ax: Any, pause_ms: float) -> None:
    ax.set_xlabel("keystroke -> ghost text on screen (ms)")
    ax.set_ylabel("share of pauses with ghost text")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"at pauses (>= {pause_ms:.0f} ms without a keystroke)", fontsize=9)


def plot_result(result: ReplayResult, path: str, title: str = "", pause_ms: float = PAUSE_MS) -> None:
    """Latency of every inline request over the replay, the distribution of answered latencies, and the
    time to ghost text at pauses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (over_time, dist, at_pause) = plt.subplots(
        1, 3, figsize=(16, 4.4), gridspec_kw={"width_ratios": [2, 1, 1]}
    )
    styles = {"items": ("tab:green", "o"), "null": ("tab:gray", "."), "cancelled": ("tab:orange", "x"),
              "error": ("tab:red", "s")}  # fmt: skip
    for outcome, (color, marker) in styles.items():
        rows = [r for r in result.records if r.outcome == outcome and r.latency_ms is not None]
        if rows:
            over_time.scatter([r.sent_s for r in rows], [r.latency_ms for r in rows], s=10, c=color,
                              marker=marker, label=f"{outcome} ({len(rows)})")  # fmt: skip
    over_time.set_xlabel("replay time (s)")
    over_time.set_ylabel("send-to-response latency (ms)")
    over_time.set_yscale("log")
    over_time.legend(loc="upper right", fontsize=8)
    answered = [
        r.latency_ms for r in result.records if r.outcome in ("items", "null") and r.latency_ms is not None
    ]
    if answered:
        dist.hist(answered, bins=40, color="tab:blue")
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            value = percentile(answered, q)
            dist.axvline(value, color="black", linestyle=style, label=f"p{q} {value:.0f} ms")
        dist.legend(fontsize=8)
    dist.set_xlabel("answered latency (ms)")
    dist.set_ylabel("requests")
    waits, count = pause_waits(result, pause_ms=pause_ms)
    plot_pause_cdf(at_pause, waits, count, color="tab:purple")
    for q, style in ((50, "-"), (90, "--")):
        value = percentile(waits, q)
        if value is not None:
            at_pause.axvline(
                value, color="black", linestyle=style, linewidth=0.8, label=f"p{q} {value:.0f} ms"
            )
    if count:
        at_pause.legend(loc="best", fontsize=8)
    style_pause_axes(at_pause, pause_ms)
    fig.suptitle(title or f"replay: {len(result.sessions)} sessions, speed {result.speed or 'max'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
