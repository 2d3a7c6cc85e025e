"""The Neovim plugin (editors/nvim) in a real headless Neovim 0.11, against the stand-in server, whose
fixed suggestion lets the tests check exact ghost text and buffer contents."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.editors.nvim_driver import ROOT, Nvim, standin_cmd
from tests.editors.standin_server import SUGGESTION

FIRST_LINE, REST = SUGGESTION.split("\n", 1)


@pytest.fixture(scope="module")
def shared_nvim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nvim]:
    """One nvim and one stand-in server for the module (starting them is most of a test's time)."""
    nvim = Nvim.start(tmp_path_factory.mktemp("nvim"), standin_cmd(0.05))
    yield nvim
    nvim.close()


@pytest.fixture
def make_nvim(shared_nvim: Nvim, tmp_path: Path) -> Iterator:
    """The shared nvim reset for one test: normal mode, no buffers, the plugin on with zeroed
    counters, a new Python file open, and the server configured and with zeroed counters."""

    def make(delay_s: float = 0.05, streaming: bool = False) -> Nvim:
        nvim = shared_nvim
        nvim.input("<Esc>")
        nvim.wait(lambda: nvim.mode() == "n", "normal mode")
        nvim.nvim.command("silent! %bwipeout!")
        nvim.lua("require('codespec').set_enabled(true) "
                 "local c = require('codespec.ghost').counters for k in pairs(c) do c[k] = 0 end")
        nvim.open(tmp_path / "example.py")
        configured = nvim.lua("return require('codespec').get_client():request_sync('standin/configure', "
                              "{delay = ..., streaming = ...}, 5000)", delay_s, streaming)
        assert configured is not None and not (isinstance(configured, dict) and configured.get("err")), configured
        return nvim

    yield make


def wait_for_ghost(nvim: Nvim, expected: str) -> None:
    nvim.wait(lambda: nvim.ghost_text() == expected, f"ghost text {expected!r}")


def test_ghost_text_is_inline_text_plus_virtual_lines_and_tab_accepts(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)
    [mark] = nvim.ghost_marks()
    assert (mark["row"], mark["col"], mark["pos"]) == (0, len("def add"), "inline")
    assert mark["inline"] == FIRST_LINE and mark["lines"] == REST.split("\n")
    command_arguments = nvim.suggestion()["item"]["command"]["arguments"]

    nvim.input("<Tab>")
    nvim.wait(lambda: nvim.buffer_lines() == ["def add" + FIRST_LINE, *REST.split("\n")], "the accepted text")
    assert nvim.cursor() == (1, len(REST.split("\n")[-1]))
    # The item's command reports the acceptance to the server (workspace/executeCommand).
    stats = nvim.wait(lambda: (s := nvim.server_stats())["accepted"] == 1 and s, "the accept command")
    assert stats["acceptedArgs"] == command_arguments
    assert nvim.mode() == "i"


def test_tab_without_a_suggestion_is_a_plain_tab(make_nvim) -> None:
    nvim = make_nvim(delay_s=30)  # the answer never comes within the test
    nvim.nvim.command("setlocal noexpandtab softtabstop=0")
    nvim.input("ix<Tab>y")
    nvim.wait(lambda: nvim.buffer_lines() == ["x\ty"], "a literal tab in the buffer")
    assert nvim.ghost_marks() == []


def test_accept_word_then_line_then_rest(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)

    nvim.input("<M-Right>")  # next word: "("
    nvim.wait(lambda: nvim.buffer_lines() == ["def add("], "one word accepted")
    wait_for_ghost(nvim, SUGGESTION[1:])

    nvim.input("<M-C-Right>")  # the rest of the line
    nvim.wait(lambda: nvim.buffer_lines() == ["def add" + FIRST_LINE], "the line accepted")
    # Only the virtual lines are left: the first line of the ghost text is now empty.
    nvim.wait(lambda: [(m["inline"], m["lines"]) for m in nvim.ghost_marks()] == [("", REST.split("\n"))],
              "the remaining virtual line")

    nvim.input("<M-C-Right>")  # the next line (with its line break)
    nvim.wait(lambda: nvim.buffer_lines() == ["def add" + FIRST_LINE, *REST.split("\n")], "all accepted")
    # One item, one acceptance report, however many pieces it was taken in.
    nvim.wait(lambda: nvim.server_stats()["accepted"] == 1, "one accept command")


def test_typing_the_suggestion_keeps_it_without_a_new_request(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)
    requests = nvim.counters()["requests"]
    nvim.input("(a")
    wait_for_ghost(nvim, SUGGESTION[2:])
    assert nvim.counters()["requests"] == requests
    nvim.input("X")  # leaves the suggestion: it goes, and a new request follows
    nvim.wait(lambda: nvim.counters()["requests"] > requests, "a new request")
    wait_for_ghost(nvim, SUGGESTION)
    assert nvim.suggestion()["col"] == len("def add(aX")


def test_typing_on_cancels_the_request_in_flight(make_nvim) -> None:
    nvim = make_nvim(delay_s=1.0)
    nvim.input("idef ad")
    nvim.wait(lambda: nvim.lua("return require('codespec.ghost').pending_request()"), "a request in flight")
    nvim.input("d")
    # The plugin cancelled it ($/cancelRequest) and the server saw the cancellation.
    nvim.wait(lambda: nvim.server_stats()["cancelled"] >= 1, "the server to see the cancel")
    assert nvim.counters()["cancelled"] >= 1
    # The answer shown is the one for where the cursor is now, never the cancelled one.
    wait_for_ghost(nvim, SUGGESTION)
    assert nvim.suggestion()["col"] == len("def add")
    assert nvim.server_stats()["completed"] == 1


def test_escape_and_cursor_moves_dismiss(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)
    command_arguments = nvim.suggestion()["item"]["command"]["arguments"]
    nvim.input("<Esc>")
    nvim.wait(lambda: nvim.mode() == "n", "normal mode")
    assert nvim.ghost_marks() == [] and nvim.suggestion() is None
    assert nvim.buffer_lines() == ["def add"]
    # A dismissed item is reported as rejected (codespec.reject with the item's arguments).
    stats = nvim.wait(lambda: (s := nvim.server_stats())["rejected"] == 1 and s, "the reject command")
    assert stats["rejectedArgs"] == command_arguments and stats["accepted"] == 0

    nvim.input("A")
    wait_for_ghost(nvim, SUGGESTION)
    nvim.input("<Left>")  # a cursor move away from the suggestion's place
    nvim.wait(lambda: nvim.suggestion() is None or nvim.suggestion()["col"] == len("def ad"),
              "the suggestion to go or follow the cursor")
    assert all(mark["col"] == len("def ad") for mark in nvim.ghost_marks())


def test_dismiss_key_and_toggle(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)
    nvim.input("<C-]>")
    nvim.wait(lambda: nvim.ghost_marks() == [], "the ghost text to go")
    nvim.nvim.command("CodespecToggle")
    requests = nvim.counters()["requests"]
    nvim.input("x")
    nvim.nvim.command("sleep 200m")
    assert nvim.counters()["requests"] == requests and nvim.ghost_marks() == []
    assert nvim.buffer_lines() == ["def addx"]


def test_streaming_shows_partial_text_before_the_answer(make_nvim) -> None:
    nvim = make_nvim(delay_s=1.5, streaming=True)
    nvim.input("idef add")
    seen: list[str] = []

    def final_shown() -> bool:
        text = nvim.ghost_text()
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        return text == SUGGESTION and nvim.suggestion()["item"] is not None

    nvim.wait(final_shown, "the final suggestion")
    partials = seen[:-1]
    assert partials, "no partial ghost text was shown"
    assert all(SUGGESTION.startswith(text) and text != SUGGESTION for text in partials), seen
    assert nvim.counters()["partial"] >= 1


def test_help_file_has_its_tags(tmp_path: Path) -> None:
    nvim = Nvim.start(tmp_path, standin_cmd(0.05))  # no file opened: no server started
    doc = tmp_path / "doc"
    shutil.copytree(ROOT / "editors" / "nvim" / "doc", doc)
    try:
        nvim.nvim.command(f"helptags {doc}")
    finally:
        nvim.close()
    tags = {line.split("\t")[0] for line in (doc / "tags").read_text().splitlines()}
    assert {"codespec.txt", "codespec-keys", "codespec-options", ":CodespecStats", ":CodespecToggle"} <= tags


def test_native_inline_completion_branch(tmp_path: Path) -> None:
    """With vim.lsp.inline_completion present (Neovim >= 0.12; faked here on 0.11) the plugin enables
    it, configures the client without streaming, and maps a Tab that accepts only when shown."""
    nvim = Nvim.start(tmp_path, standin_cmd(0.05), streaming=True, fake_native=True)
    try:
        assert nvim.lua("return require('codespec').uses_native()") is True
        assert nvim.lua("return _G.fake_native.enabled") is True
        config = nvim.lua("local c = vim.lsp.config.codespec return {cmd = c.cmd, init = c.init_options}")
        assert config["cmd"] == standin_cmd(0.05)
        assert config["init"]["streaming"] is False  # partial text needs the plugin's own ghost text
        nvim.nvim.command("enew | setlocal noexpandtab softtabstop=0")
        nvim.input("ia<Tab>")  # nothing shown: a plain Tab
        nvim.wait(lambda: nvim.buffer_lines() == ["a\t"], "a literal tab")
        nvim.lua("_G.fake_native.shown = true")
        nvim.input("<Tab>b")  # shown: Tab accepts (the native code inserts), no tab typed
        nvim.wait(lambda: nvim.buffer_lines() == ["a\tb"], "b typed after the accept")
        assert nvim.lua("return _G.fake_native.accepted") == 1
        assert nvim.ghost_marks() == []  # the plugin's own ghost text is not used
    finally:
        nvim.close()


def test_stats_command_and_checkhealth(make_nvim) -> None:
    nvim = make_nvim()
    nvim.input("idef add")
    wait_for_ghost(nvim, SUGGESTION)
    nvim.input("<Esc>")
    output = nvim.nvim.command_output("CodespecStats")
    assert "latency p50" in output and "completed: 1" in output and "plugin:" in output

    nvim.nvim.command("checkhealth codespec")
    report = "\n".join(nvim.buffer_lines())
    assert "server command:" in report and "attached: client" in report
    assert "model loaded: standin" in report
    assert "model standin (loaded)" in output


@pytest.mark.parametrize(
    ("text", "word", "line"),
    [
        ("(a, b):\n    return", "(", "(a, b):"),
        ("  total = 1", "  total", "  total = 1"),
        ("\n    return a", "\n    ", "\n    return a"),
        (":=", ":=", ":="),
        ("   ", "   ", "   "),
        ("éa b", "éa", "éa b"),
        ("->λx", "->", "->λx"),
    ],
)
def test_next_word_and_next_line(shared_nvim: Nvim, text: str, word: str, line: str) -> None:
    ghost = "require('codespec.ghost')"
    assert shared_nvim.lua(f"return {ghost}.next_word(...)", text) == word
    assert shared_nvim.lua(f"return {ghost}.next_line(...)", text) == line
