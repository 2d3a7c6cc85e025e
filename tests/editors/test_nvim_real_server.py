"""The Neovim plugin in a real headless Neovim 0.11 against the real `codespec serve --stdio` with the
tiny random model: what the plugin shows and inserts must be exactly what the server answered."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.editors.nvim_driver import Nvim

MODEL_WAIT_S = 90  # the first answer includes starting the server and building the tiny model
SOURCE = "import math\n\n\ndef circle_area(radius):\n"


def server_cmd(*extra: str) -> list[str]:
    codespec = shutil.which("codespec", path=str(Path(sys.executable).parent))
    base = [codespec] if codespec else [sys.executable, "-m", "codespec.cli"]
    return [*base, "serve", "--stdio", "--model", "tiny", "--draft-model", "none", "--drafting", "lookup", *extra]


@pytest.fixture(scope="module")
def shared_nvim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nvim]:
    # One server for the module: starting it (torch, the tiny model) is most of the time.
    started = Nvim.start(tmp_path_factory.mktemp("nvim-real"), server_cmd(), init_options={"maxTokens": 24})
    yield started
    started.close()


@pytest.fixture
def nvim(shared_nvim: Nvim, tmp_path: Path) -> Nvim:
    shared_nvim.input("<Esc>")
    shared_nvim.wait(lambda: shared_nvim.mode() == "n", "normal mode")
    shared_nvim.nvim.command("silent! %bwipeout!")
    shared_nvim.open(tmp_path / "geometry.py", SOURCE)
    configure(shared_nvim, stepDelay=0, streaming=False)
    return shared_nvim


def configure(nvim: Nvim, **settings: object) -> None:
    """Server options applied live (workspace/didChangeConfiguration), e.g. the hidden stepDelay."""
    nvim.lua("require('codespec').get_client():notify('workspace/didChangeConfiguration', "
             "{settings = {codespec = ...}})", settings)


def as_displayed(text: str, tab: str) -> str:
    def caret(ch: str) -> str:
        code = ord(ch)
        if ch == "\n" or (code >= 32 and code != 127):
            return ch
        return "^?" if code == 127 else "^" + chr(code + 64)

    return "".join(caret(ch) for ch in text.replace("\t", tab))


def wait_for_suggestion(nvim: Nvim) -> dict:
    return nvim.wait(nvim.suggestion, "a suggestion from the real server", timeout_s=MODEL_WAIT_S)


def test_real_server_ghost_text_is_what_the_server_answered_and_tab_inserts_it(nvim: Nvim) -> None:
    nvim.nvim.command("normal! G")
    nvim.input("oreturn")  # the Python indent plugin indents the new line
    shown = wait_for_suggestion(nvim)
    item = shown["item"]
    line = nvim.buffer_lines()[-1]
    assert line.strip() == "return"
    assert (shown["row"], shown["col"]) == nvim.cursor() == (4, len(line))
    # The item's range starts at the cursor: everything in insertText is still to be typed.
    assert item["range"]["start"] == {"line": 4, "character": len(line)}
    assert shown["text"] == item["insertText"] != ""
    # A random model writes any bytes: the ghost text shows tabs as spaces, and Neovim shows control
    # characters in virtual text in caret notation (^K).
    tab = " " * nvim.lua("return vim.bo.tabstop")
    assert nvim.ghost_text() == as_displayed(shown["text"], tab)
    assert item["command"]["command"] == "codespec.accept"

    before = nvim.buffer_lines()
    accepted_before = nvim.server_stats()["accepted"]
    nvim.input("<Tab>")
    expected = "\n".join(before) + shown["text"]
    nvim.wait(lambda: "\n".join(nvim.buffer_lines()) == expected, "the suggestion in the buffer")
    # The server got the accept command for this item and its copy of the document is the buffer.
    nvim.wait(lambda: nvim.server_stats()["accepted"] == accepted_before + 1, "the server to count the acceptance")
    uri = nvim.lua("return vim.uri_from_bufnr(0)")
    server_copy = nvim.lua("return require('codespec').get_client():request_sync("
                           "'codespec/documentText', {uri = ...}, 5000).result", uri)
    assert server_copy["text"] == "\n".join(nvim.buffer_lines()) + "\n"

    nvim.input("<Esc>")
    nvim.wait(lambda: nvim.mode() == "n", "normal mode")
    assert nvim.ghost_marks() == []


def test_real_server_typing_on_cancels_and_only_the_latest_answer_shows(nvim: Nvim) -> None:
    # A slow simulated model (the hidden stepDelay option, applied live) keeps each generation
    # running while we type on.
    configure(nvim, stepDelay=0.05)
    before = nvim.server_stats()
    nvim.nvim.command("normal! G")
    nvim.input("ototal = ")
    nvim.wait(lambda: nvim.lua("return require('codespec.ghost').pending_request()"),
              "a request in flight", timeout_s=MODEL_WAIT_S)
    cancelled_before = nvim.counters()["cancelled"]
    nvim.input("radius")
    stats = nvim.wait(
        lambda: (s := nvim.server_stats())["cancelled"] + s["superseded"] > before["cancelled"] + before["superseded"]
        and s,
        "the server to drop the stale request", timeout_s=MODEL_WAIT_S)
    assert nvim.counters()["cancelled"] > cancelled_before  # the plugin sent $/cancelRequest itself
    shown = wait_for_suggestion(nvim)
    line = nvim.buffer_lines()[-1]
    assert line.strip() == "total = radius"
    assert (shown["row"], shown["col"]) == nvim.cursor() == (4, len(line))
    assert stats["errors"] == 0
    nvim.input("<Esc>")
    nvim.wait(lambda: nvim.mode() == "n", "normal mode")
    assert nvim.ghost_marks() == [] and nvim.lua("return require('codespec.ghost').pending_request()") is None


def test_real_server_streaming_shows_partial_text_then_the_answer(nvim: Nvim) -> None:
    configure(nvim, streaming=True, stepDelay=0.05)
    partial_before = nvim.counters()["partial"]
    nvim.nvim.command("normal! G")
    nvim.input("oarea = ")
    final = nvim.wait(lambda: (s := nvim.suggestion()) and s.get("item") and s,
                      "the final answer", timeout_s=MODEL_WAIT_S)
    # codespec/partialCompletion notifications (uri, version, position in utf-8) were shown first.
    assert nvim.counters()["partial"] > partial_before
    assert final["text"] == final["item"]["insertText"]
    line = nvim.buffer_lines()[-1]
    assert (final["row"], final["col"]) == nvim.cursor() == (4, len(line))
