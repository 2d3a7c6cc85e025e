"""Ghost text in a real VS Code from the real server (tiny random model): what is rendered is what the
server answered, Tab inserts exactly that, typing along keeps it, Escape dismisses it, typing on cancels."""

from __future__ import annotations

import pytest

from tests.editors_e2e.fixtures import OpenVSCode, tiny_settings
from tests.editors_e2e.workbench import SERVER_WAIT_S, TapClient, as_rendered, wait_for

pytestmark = pytest.mark.editors_e2e

PYTHON = "import math\n\n\ndef circle_area(radius):\n"
TYPESCRIPT = "export function circleArea(radius: number): number {\n"


def last_answer(tap: TapClient) -> str:
    texts = tap.answered_texts()
    assert texts, "the server answered no suggestion"
    return texts[-1]


@pytest.mark.parametrize(("name", "source", "typed"), [
    ("geometry.py", PYTHON, "    area = math.pi * radius"),
    ("geometry.ts", TYPESCRIPT, "  const area = Math.PI * radius"),
])
def test_ghost_text_is_the_answer_and_tab_inserts_exactly_it(open_vscode: OpenVSCode, tap: TapClient, name: str,
                                                             source: str, typed: str) -> None:
    vscode = open_vscode({name: source}, tiny_settings(tap))
    vscode.open_file(name)
    vscode.type(typed)
    ghost = vscode.wait_ghost(SERVER_WAIT_S)
    answer = wait_for(lambda: (texts := tap.answered_texts()) and as_rendered(texts[-1]) == ghost and texts[-1],
                      f"the rendered ghost text {ghost!r} to be the server's last answer", 5)
    vscode.press("Tab")
    wait_for(lambda: vscode.ghost() is None, "the ghost text to go")
    assert vscode.saved_text(name) == source + typed + answer
    commands = wait_for(tap.client_commands, "the accept command")
    assert [c["command"] for c in commands] == ["codespec.accept"]
    assert wait_for(lambda: tap.stats()["accepted"] == 1, "the server to count the acceptance")
    assert tap.stats()["errors"] == 0 and vscode.extension_host_errors() == []


def test_typing_along_keeps_the_suggestion_and_tab_inserts_the_rest(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    typed = "    area = math.pi * radius"
    vscode.type(typed)
    ghost = vscode.wait_ghost()
    answer = wait_for(lambda: (texts := tap.answered_texts()) and as_rendered(texts[-1]) == ghost and texts[-1],
                      "the rendered ghost text to be the server's last answer", 5)
    # Type the suggestion's first two characters: it stays on screen, shortened by them.
    along = answer[:2]
    assert "\n" not in along, f"pick a prompt whose suggestion starts on the cursor line: {answer!r}"
    vscode.type(along)
    wait_for(lambda: vscode.ghost() == as_rendered(answer[2:]), f"the ghost text to be the rest {answer[2:]!r}", 10)
    vscode.press("Tab")
    wait_for(lambda: vscode.ghost() is None, "the ghost text to go")
    assert vscode.saved_text("geometry.py") == PYTHON + typed + answer


def test_escape_dismisses_and_inserts_nothing(open_vscode: OpenVSCode, tap: TapClient) -> None:
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap))
    vscode.open_file("geometry.py")
    typed = "    area = math.pi * radius"
    vscode.type(typed)
    vscode.wait_ghost()
    vscode.press("Escape")
    wait_for(lambda: vscode.ghost() is None, "Escape to dismiss the ghost text", 5)
    assert vscode.saved_text("geometry.py") == PYTHON + typed
    assert tap.client_commands() == []  # nothing accepted
    assert tap.stats()["accepted"] == 0


def test_a_keystroke_while_a_request_runs_cancels_it(open_vscode: OpenVSCode, tap: TapClient) -> None:
    # A slow simulated model (the server's hidden --step-delay: seconds per decode step) keeps the
    # generation running while the user types on.
    vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap, "--step-delay", "0.3"))
    vscode.open_file("geometry.py")
    vscode.type("    area = ")
    running = wait_for(lambda: [e for e in tap.inline_exchanges() if "answered_t" not in e],
                       "an inline completion request in flight", SERVER_WAIT_S)[-1]
    before = tap.stats()
    vscode.type("r")
    after = wait_for(lambda: (s := tap.stats())["cancelled"] + s["superseded"] > before["cancelled"] + before["superseded"]
                     and s, "the server to drop the request the keystroke made stale")
    exchange = wait_for(lambda: next((e for e in tap.inline_exchanges() if e["id"] == running["id"]
                                      and "answered_t" in e), None), "the stale request's answer")
    # VS Code cancelled it ($/cancelRequest -> -32800) or the change superseded it (null): no suggestion.
    assert exchange["cancelled"] or exchange.get("result") is None, exchange
    assert not (exchange.get("result") or {}).get("items")
    # The suggestion shown at the end is for the text typed last.
    latest = wait_for(lambda: (e := tap.inline_exchanges()[-1]) and e["params"]["position"]["character"] == len("    area = r")
                      and e, "a request at the new cursor")
    assert latest["id"] != running["id"]
    assert after["errors"] == 0
