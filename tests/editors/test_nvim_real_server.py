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
    return [*base, "serve", "--stdio", "--model", "tiny", "--draft-model", "none", "--draft", "lookup", *extra]


@pytest.fixture
def nvim(tmp_path: Path) -> Iterator[Nvim]:
    started = Nvim.start(tmp_path, server_cmd())
    started.open(tmp_path / "geometry.py", SOURCE)
    yield started
    started.close()


def wait_for_suggestion(nvim: Nvim) -> dict:
    return nvim.wait(nvim.suggestion, "a suggestion from the real server", timeout_s=MODEL_WAIT_S)


def test_real_server_ghost_text_is_what_the_server_answered_and_tab_inserts_it(nvim: Nvim) -> None:
    nvim.nvim.command("normal! G")
    nvim.input("o    return")
    shown = wait_for_suggestion(nvim)
    item = shown["item"]
    line = nvim.buffer_lines()[-1]
    assert shown["row"] == 4 and shown["col"] == len(line) == len("    return")
    # The item's range starts at the cursor: everything in insertText is still to be typed.
    assert item["range"]["start"] == {"line": 4, "character": len(line)}
    assert shown["text"] == item["insertText"] != ""
    tab = " " * nvim.lua("return vim.bo.tabstop")
    assert nvim.ghost_text() == shown["text"].replace("\t", tab)
    assert item["command"]["command"] == "codespec.accept"

    before = nvim.buffer_lines()
    nvim.input("<Tab>")
    expected = "\n".join(before) + shown["text"]
    nvim.wait(lambda: "\n".join(nvim.buffer_lines()) == expected, "the suggestion in the buffer")
    # The server got the accept command for this item and its copy of the document is the buffer.
    nvim.wait(lambda: nvim.server_stats()["accepted"] == 1, "the server to count the acceptance")
    uri = nvim.lua("return vim.uri_from_bufnr(0)")
    server_copy = nvim.lua("return require('codespec').get_client():request_sync("
                           "'codespec/documentText', {uri = ...}, 5000).result", uri)
    assert server_copy["text"] == "\n".join(nvim.buffer_lines()) + "\n"

    nvim.input("<Esc>")
    nvim.wait(lambda: nvim.mode() == "n", "normal mode")
    assert nvim.ghost_marks() == []


def test_real_server_typing_on_cancels_and_only_the_latest_answer_shows(tmp_path: Path) -> None:
    # A slow simulated model (stepDelay) keeps each generation running while we type on.
    nvim = Nvim.start(tmp_path, server_cmd(), init_options={"stepDelay": 0.05})
    try:
        nvim.open(tmp_path / "slow.py", SOURCE)
        nvim.nvim.command("normal! G")
        nvim.input("o    total = ")
        nvim.wait(lambda: nvim.lua("return require('codespec.ghost').pending_request()"),
                  "a request in flight", timeout_s=MODEL_WAIT_S)
        nvim.wait(lambda: nvim.server_stats()["engine"]["loaded"], "the model", timeout_s=MODEL_WAIT_S)
        nvim.input("radius")
        stats = nvim.wait(lambda: (s := nvim.server_stats())["cancelled"] + s["superseded"] >= 1 and s,
                          "the server to drop the stale request", timeout_s=MODEL_WAIT_S)
        assert nvim.counters()["cancelled"] >= 1  # the plugin sent $/cancelRequest itself
        shown = wait_for_suggestion(nvim)
        assert (shown["row"], shown["col"]) == nvim.cursor() == (4, len("    total = radius"))
        assert stats["errors"] == 0
        nvim.input("<Esc>")
        nvim.wait(lambda: nvim.mode() == "n", "normal mode")
        assert nvim.ghost_marks() == [] and nvim.lua("return require('codespec.ghost').pending_request()") is None
    finally:
        nvim.close()
