"""Keystroke -> rendered ghost text, measured in the browser: the keydown event's time and the time the ghost
text's DOM appeared (a MutationObserver) and was painted (the next animation frame), both performance.now() in
the page. The user types chunks of code key by key and pauses after each; the tiny model answers. The figures
go to build/editors-e2e/artifacts/latency.json and the test's output (docs/editors.md quotes them)."""

from __future__ import annotations

import json
import time

import pytest

from tests.editors_e2e.fixtures import OpenVSCode, tiny_settings
from tests.editors_e2e.workbench import ARTIFACTS, SERVER_WAIT_S, GhostEvent, TapClient, percentile

pytestmark = pytest.mark.editors_e2e

SOURCE = "import math\n\n\ndef circle_area(radius):\n"
LINES = [
    ["    area ", "= ", "math.pi ", "* ", "radius ", "* ", "radius"],
    ["    total ", "= ", "area ", "+ ", "offset ", "- ", "margin"],
    ["    scaled ", "= ", "total ", "* ", "factor ", "/ ", "count"],
    ["    result ", "= ", "scaled ", "+ ", "bias ", "* ", "weight"],
    ["    value ", "= ", "result ", "- ", "step ", "* ", "rate"],
]
KEY_DELAY_MS = 90  # ~11 keys/s: a fast typist
PAUSE_S = 0.8
GOAL_P50_MS = 100  # the goal for the tiny model
BOUND_P50_MS = 250  # what this test enforces on a shared 2-core CI machine (the goal is reported, see docs)


def first_new_ghost(events: list[GhostEvent], key_t: float, until: float) -> GhostEvent | None:
    shown_before = None
    for event in events:
        if event.t <= key_t:
            shown_before = event.text
    for event in events:
        if key_t < event.t <= until and event.text is not None:
            if shown_before is not None and shown_before[1:] == event.text:
                return None  # kept while typing along: not a new suggestion
            return event
    return None


def test_keystroke_to_rendered_ghost_text(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": SOURCE}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    vscode.type("    x = ")  # the first answer waits for the server and the model: not measured
    vscode.wait_ghost(SERVER_WAIT_S)
    vscode.press("Escape", "End", "Enter", "Shift+Home", "Delete")
    pauses: list[float] = []  # the last keydown before each pause (page clock)
    for line in LINES:
        for chunk in line:
            vscode.type(chunk, delay_ms=KEY_DELAY_MS)
            pauses.append(vscode.key_times()[-1])
            time.sleep(PAUSE_S)
        vscode.press("Escape", "Enter", "Shift+Home", "Delete")
    events = vscode.ghost_events()
    keys = vscode.key_times()
    origin_ms = vscode.page.evaluate("() => performance.timeOrigin")  # page clock -> epoch, as the tap's times
    exchanges = tap.inline_exchanges()
    dom_ms, paint_ms, to_request_ms, server_ms, missing = [], [], [], [], 0
    for key_t in pauses:
        later = [t for t in keys if t > key_t]
        until = later[0] if later else vscode.now()
        event = first_new_ghost(events, key_t, until)
        if event is None:
            missing += 1
            continue
        dom_ms.append(event.t - key_t)
        # Where the time went: keydown -> the request reaching the server (VS Code's debounce, the extension
        # host, the tap) -> its answer leaving the server -> the DOM.
        key_epoch_s, event_epoch_s = (origin_ms + key_t) / 1000, (origin_ms + event.t) / 1000
        sent = [e for e in exchanges if key_epoch_s < e["t"] < event_epoch_s and "answered_t" in e]
        if sent:
            to_request_ms.append((sent[0]["t"] - key_epoch_s) * 1000)
            server_ms.append((sent[-1]["answered_t"] - sent[-1]["t"]) * 1000)
        if event.paint is not None:
            paint_ms.append(event.paint - key_t)
    stats = tap.stats()
    report = {
        "pauses": len(pauses), "withGhostText": len(dom_ms), "withoutGhostText": missing,
        "keystrokeToDomMs": {"p50": percentile(dom_ms, 0.5), "p90": percentile(dom_ms, 0.9), "n": len(dom_ms)},
        "keystrokeToPaintMs": {"p50": percentile(paint_ms, 0.5), "p90": percentile(paint_ms, 0.9), "n": len(paint_ms)},
        "keystrokeToRequestMs": {"p50": percentile(to_request_ms, 0.5), "p90": percentile(to_request_ms, 0.9),
                                 "n": len(to_request_ms)},
        "requestToAnswerMs": {"p50": percentile(server_ms, 0.5), "p90": percentile(server_ms, 0.9), "n": len(server_ms)},
        "serverLatencyMs": stats["latencyMs"], "goalP50Ms": GOAL_P50_MS,
        "keyDelayMs": KEY_DELAY_MS, "pauseS": PAUSE_S, "model": "tiny",
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "latency.json").write_text(json.dumps(report, indent=2))
    print("\nkeystroke -> ghost text:", json.dumps(report, indent=2))
    assert len(dom_ms) >= len(pauses) * 0.8, report  # the tiny model answers nearly every pause
    assert report["keystrokeToPaintMs"]["p50"] < BOUND_P50_MS, report
    assert stats["errors"] == 0
