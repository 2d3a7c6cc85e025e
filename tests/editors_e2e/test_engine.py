"""The codespec.engine setting pointed at llama.cpp's llama-server (built by `make llama-server`, serving the tiny model as a
GGUF): the suggestions VS Code shows are generated there."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from codespec.llama_server import LlamaServer
from tests.editors_e2e.fixtures import OpenVSCode, tiny_settings
from tests.editors_e2e.workbench import SERVER_WAIT_S, TapClient, as_rendered, wait_for
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.editors_e2e

PYTHON = "import math\n\n\ndef circle_area(radius):\n"


def predicted_tokens(url: str) -> float:
    """llama-server's own count of the tokens it generated (its Prometheus /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(r"^llamacpp:tokens_predicted_total\s+(\S+)", text, re.MULTILINE)
    assert match, text[:500]
    return float(match.group(1))


def test_suggestions_come_from_the_engine(open_vscode: OpenVSCode, tap: TapClient, tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", merges=True)
    with LlamaServer(gguf, threads=1, context=2048, extra_args=["--metrics"]) as engine:
        before = predicted_tokens(engine.url)
        vscode = open_vscode({"geometry.py": PYTHON}, tiny_settings(tap, **{"codespec.engine": engine.url}))
        vscode.open_file("geometry.py")
        typed = "    area = math.pi * radius"
        vscode.type(typed)
        ghost = vscode.wait_ghost(SERVER_WAIT_S)
        answer = wait_for(lambda: (texts := tap.answered_texts()) and as_rendered(texts[-1]) == ghost and texts[-1],
                          f"the rendered ghost text {ghost!r} to be the server's last answer", 5)
        stats = tap.stats()
        assert stats["engine"]["engine"] == engine.url and stats["engine"]["drafting"] == "engine", stats["engine"]
        assert stats["engine"]["remote"]["trouble"] == [], stats["engine"]
        assert predicted_tokens(engine.url) > before, "llama-server generated nothing"
        vscode.press("Tab")
        assert vscode.saved_text("geometry.py") == PYTHON + typed + answer
