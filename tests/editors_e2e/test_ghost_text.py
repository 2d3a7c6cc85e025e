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
