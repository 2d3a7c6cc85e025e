"""The extension's own behaviour in a real VS Code: the status bar, the settings that reach the server, the
server killed, a bad server path, a server that fails at start or answers garbage, a document edited while a
suggestion is on screen, two windows on the same file. The server is real (tiny random model) unless the test
is about a broken one."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import pytest
from playwright.sync_api import Browser

from tests.editors_e2e.fixtures import OpenVSCode, tiny_settings
from tests.editors_e2e.workbench import (
    FAKE_SERVER,
    SERVER_WAIT_S,
    CodeServer,
    TapClient,
    Workbench,
    as_rendered,
    wait_for,
    write_settings,
)

pytestmark = pytest.mark.editors_e2e

PYTHON = "import math\n\n\ndef circle_area(radius):\n"
TYPED = "    area = math.pi * radius"
QUIET_S = 3.0  # after a message, how long no second one may come


def shown_answer(vscode, tap: TapClient) -> str:
    ghost = vscode.wait_ghost()
    return wait_for(lambda: (texts := tap.answered_texts()) and as_rendered(texts[-1]) == ghost and texts[-1],
                    f"the rendered ghost text {ghost!r} to be the server's last answer", 5)


def settle_messages(vscode, wait_s: float = QUIET_S) -> list[str]:
    time.sleep(wait_s)
    return vscode.notifications()


def test_status_bar_shows_the_servers_latency_and_acceptance(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    vscode.type(TYPED)
    shown_answer(vscode, tap)
    vscode.press("Tab")
    wait_for(lambda: tap.stats()["accepted"] == 1, "the acceptance")
    vscode.press("Escape")

    def status_matches_stats() -> bool:
        stats = tap.stats()  # VS Code may ask again after the accept: compare with the stats of now
        expected = f"{round(stats['latencyMs']['p50'])} ms · {round(stats['acceptanceRate'] * 100)}%"
        return vscode.status_text() == expected

    wait_for(status_matches_stats, "the status bar to show the server's p50 latency and acceptance rate", 10)
    # Clicking it shows the summary (codespec: Show Stats).
    vscode.status_item().click()
    summary = wait_for(lambda: [m for m in vscode.notifications() if m.startswith("latency p50")], "the stats summary")
    assert re.search(r"acceptance \d+% \(1 accepted of \d+ shown", summary[0]), summary


def test_settings_reach_the_server_and_a_change_restarts_it(open_vscode: OpenVSCode, tap: TapClient) -> None:
    settings = tiny_settings(tap, **{"codespec.model": "tiny:3", "codespec.drafting": "none"})
    vscode = open_vscode({"geometry.py": PYTHON}, settings)
    wait_for(tap.server_pid, "the server to start", SERVER_WAIT_S)
    engine = wait_for(lambda: (s := tap.stats())["engine"]["loaded"] and s["engine"], "the model to load", SERVER_WAIT_S)
    assert (engine["model"], engine["drafting"]) == ("tiny:3", "none"), engine
    first_pid = tap.server_pid()
    # Changed while the window is open: the extension restarts the server with the new options.
    write_settings(vscode.folder, {**settings, "codespec.model": "tiny:5", "codespec.drafting": "lookup"})
    wait_for(lambda: tap.server_pid() != first_pid, "a new server", SERVER_WAIT_S)
    engine = wait_for(lambda: (s := tap.stats())["engine"]["loaded"] and s["engine"], "the model to load", SERVER_WAIT_S)
    assert (engine["model"], engine["drafting"]) == ("tiny:5", "lookup"), engine
    vscode.open_file("geometry.py")
    vscode.type(TYPED)
    shown_answer(vscode, tap)
    assert settle_messages(vscode, 0) == []


def test_server_killed_is_reported_once_and_restarted(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    vscode.type(TYPED)
    shown_answer(vscode, tap)
    vscode.press("Escape")
    killed = tap.server_pid()
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: (pid := tap.server_pid()) and pid != killed, "the extension to start the server again", SERVER_WAIT_S)
    messages = wait_for(vscode.notifications, "a message about the crash")
    assert settle_messages(vscode) == messages and len(messages) == 1, messages
    assert "codespec" in messages[0] and "restart" in messages[0].lower(), messages
    # Suggestions again, from the new server.
    vscode.press("Escape")
    vscode.type(" * radius")
    shown_answer(vscode, tap)


def test_a_bad_server_path_gives_one_clear_message(open_vscode: OpenVSCode, tap: TapClient) -> None:
    missing = "/nonexistent/bin/codespec"
    vscode = open_vscode({"geometry.py": PYTHON}, {"codespec.server.path": missing})
    messages = wait_for(vscode.notifications, "a message about the missing server", 20)
    assert settle_messages(vscode) == messages and len(messages) == 1, messages
    assert missing in messages[0] and "codespec.server.path" in messages[0], messages
    assert "(no such file)" in messages[0], messages
    assert vscode.status_text() == "codespec: not running"
    # The editor stays usable: typing and Tab behave as without the extension.
    vscode.open_file("geometry.py")
    vscode.type("    x = 1")
    vscode.press("Tab")
    assert vscode.saved_text("geometry.py").startswith(PYTHON + "    x = 1")
    assert vscode.saved_text("geometry.py")[len(PYTHON + "    x = 1"):].strip(" \t") == ""


def test_a_server_that_fails_at_start_gives_one_message(open_vscode: OpenVSCode) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, {"codespec.server.path": sys.executable,
                                                   "codespec.server.args": [str(FAKE_SERVER), "exit-at-start"]})
    messages = wait_for(vscode.notifications, "a message about the failed start", 30)
    assert settle_messages(vscode, 6) == messages and len(messages) == 1, messages
    assert "could not start the server" in messages[0] and "exited during start-up" in messages[0], messages
    assert vscode.status_text() == "codespec: not running"


def test_a_server_answering_garbage_inserts_nothing(open_vscode: OpenVSCode) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, {"codespec.server.path": sys.executable,
                                                   "codespec.server.args": [str(FAKE_SERVER), "garbage"]})
    vscode.open_file("geometry.py")
    vscode.type("    x = ra", delay_ms=120)
    time.sleep(1.5)
    assert vscode.ghost() is None
    vscode.press("Tab")
    text = vscode.saved_text("geometry.py")
    assert text.startswith(PYTHON + "    x = ra") and text[len(PYTHON + "    x = ra"):].strip(" \t") == "", text
    messages = settle_messages(vscode)
    # One message for the first thing that went wrong (an answer that is no inline completion, or a frame that
    # is not JSON; the next ones are only logged), and one when the extension stops a server that keeps sending
    # malformed frames; nothing said twice, nothing thrown into VS Code.
    assert messages and ("a suggestion request failed" in messages[0] or "malformed message" in messages[0]), messages
    assert len(messages) <= 2 and len(set(messages)) == len(messages), messages
    if len(messages) == 2:
        assert "keeps sending malformed messages and was stopped" in messages[1], messages
        assert vscode.status_text() == "codespec: not running"
    assert vscode.extension_host_errors() == []


def test_a_document_edited_under_the_suggestion(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    vscode.type(TYPED)
    stale = shown_answer(vscode, tap)
    # An edit elsewhere while the ghost text is on screen, then back to the end of the file.
    vscode.press("Control+Home")
    vscode.type("# edited\n")
    vscode.press("Control+End")
    time.sleep(1.0)
    ghost = vscode.ghost()
    vscode.press("Tab")
    text = vscode.saved_text("geometry.py")
    base = "# edited\n" + PYTHON + TYPED
    if ghost is None:  # nothing shown: Tab indents
        assert text.startswith(base) and text[len(base):].strip(" \t") == "", text
    else:  # what was shown, answered for the edited document, is what Tab inserted
        answer = next(t for t in reversed(tap.answered_texts()) if as_rendered(t) == ghost)
        assert text == base + answer
    # The suggestion shown before the edit was never inserted on its own.
    assert stale not in text[len(base):] or (ghost is not None and as_rendered(stale) == ghost)


def test_two_windows_on_the_same_file(open_vscode: OpenVSCode, tap: TapClient, browser: Browser,
                                      code_server: CodeServer) -> None:
    first = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    first.open_file("geometry.py")
    first.type(TYPED)
    answer = shown_answer(first, tap)
    first.press("Tab")
    expected = PYTHON + TYPED + answer
    assert first.saved_text("geometry.py") == expected
    # A second window (its own extension host and server) on the same folder: it sees the saved file.
    second = Workbench(browser, code_server, first.folder)
    try:
        second.open()
        second.open_file("geometry.py")
        # The cursor opens wherever VS Code restores it (the first window's view state may not be stored yet;
        # one CI run waited 120 s for ghost text there): go to the end, where the test means to type.
        second.press("Control+End")
        second.press("Enter")
        second.type("    total = ")
        ghost = second.wait_ghost(SERVER_WAIT_S)
        second_answer = wait_for(lambda: (t := tap.answered_texts()) and as_rendered(t[-1]) == ghost and t[-1],
                                 "the second window's ghost text to be its server's answer", 5)
        second.press("Tab")
        text = second.saved_text("geometry.py")
        assert text.startswith(expected + "\n") and text.endswith("total = " + second_answer), text
        assert second.extension_host_errors() == []
    finally:
        second.close()
    # The first window took the file from disk (it had no unsaved change): Tab there inserts nothing twice.
    wait_for(lambda: first.page.locator(".view-lines").inner_text().replace("\u00a0", " ").count("total = ") == 1,
             "the first window to show the second window's edit")
    first.press("Control+End")
    first.type("\n    done = ")
    ghost = first.wait_ghost(SERVER_WAIT_S)
    third = wait_for(lambda: (t := tap.answered_texts()) and as_rendered(t[-1]) == ghost and t[-1], "the answer", 5)
    first.press("Tab")
    final = first.saved_text("geometry.py")
    assert final.startswith(text + "\n") and final.endswith("done = " + third), final
    assert final.count(answer) == text.count(answer) and first.extension_host_errors() == []
