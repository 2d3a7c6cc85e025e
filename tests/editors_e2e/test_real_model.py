"""The install steps of docs/editors.md, checked: the VSIX that `npm run package` wrote is what is installed
(`make editors-e2e` runs `code-server --install-extension editors/vscode/codespec.vsix`), the documented
settings are the extension's, and with `codespec.server.path` set as documented (default args, default model:
the bundled Qwen2.5-Coder-1.5B on this CPU machine) a real suggestion shows, Tab inserts it, and the screenshot
in docs/ is taken (CODESPEC_E2E_UPDATE_DOCS=1 writes docs/vscode-ghost-text.png)."""

from __future__ import annotations

import json
import os
import re
import zipfile

import pytest

from tests.editors_e2e.fixtures import OpenVSCode
from tests.editors_e2e.workbench import ARTIFACTS, CODESPEC, EXTENSIONS, ROOT, STATUS_RE, wait_for

pytestmark = pytest.mark.editors_e2e

MODEL_WAIT_S = 240.0  # the first answer loads the 1.5B (llama.cpp, 2 CPU cores)
SOURCE = '''import math


def circle_area(radius: float) -> float:
    """Return the area of a circle with the given radius."""
    return math.pi * radius ** 2


def circle_circumference(radius: float) -> float:
    """Return the circumference of a circle with the given radius."""
'''
EXTENSION = ROOT / "editors" / "vscode"


def documented_settings() -> dict[str, object]:
    """The settings.json block of docs/editors.md's VS Code section (JSONC: comments dropped)."""
    text = (ROOT / "docs" / "editors.md").read_text()
    block = re.search(r"## VS Code.*?```jsonc\n(.*?)```", text, re.DOTALL)
    assert block, "docs/editors.md: no ```jsonc settings block in the VS Code section"
    plain = re.sub(r"\s//.*", "", block.group(1))
    return json.loads(re.sub(r",(\s*})", r"\1", plain))


def test_documented_settings_are_the_extensions_and_the_vsix_is_installed() -> None:
    manifest = json.loads((EXTENSION / "package.json").read_text())
    properties = manifest["contributes"]["configuration"]["properties"]
    current = {key for key, spec in properties.items() if "deprecationMessage" not in spec}
    documented = documented_settings()
    assert set(documented) <= set(properties), set(documented) - set(properties)
    assert current - set(documented) <= {"codespec.enabled", "codespec.statsIntervalSeconds"}, current - set(documented)
    for key, value in documented.items():
        if key != "codespec.server.path":  # documented as a path to fill in
            assert properties[key]["default"] == value, (key, value, properties[key]["default"])
    # What is installed is the VSIX the docs build (same version, same compiled extension).
    installed = next(EXTENSIONS.glob(f"codespec.codespec-{manifest['version']}"))
    with zipfile.ZipFile(EXTENSION / "codespec.vsix") as vsix:
        packaged = vsix.read("extension/out/extension.js")
    assert (installed / "out" / "extension.js").read_bytes() == packaged


def test_the_bundled_model_suggests_real_code(open_vscode: OpenVSCode) -> None:
    # As docs/editors.md says: only the path to codespec set; the server's defaults for the rest.
    vscode = open_vscode({"geometry.py": SOURCE}, {"codespec.server.path": str(CODESPEC)})
    vscode.open_file("geometry.py")
    vscode.type("    return ", delay_ms=80)
    ghost = vscode.wait_ghost(MODEL_WAIT_S)
    assert "radius" in ghost and "pi" in ghost, ghost  # 2 * math.pi * radius, or close
    # The status bar shows the server's latency and acceptance (refreshed every 5 s by default).
    wait_for(lambda: STATUS_RE.fullmatch(vscode.status_text()), "latency and acceptance in the status bar", 15)
    assert vscode.ghost() == ghost
    shot = vscode.screenshot(ARTIFACTS / "vscode-ghost-text.png")
    if os.environ.get("CODESPEC_E2E_UPDATE_DOCS") == "1":
        (ROOT / "docs" / "vscode-ghost-text.png").write_bytes(shot.read_bytes())
    vscode.press("Tab")
    wait_for(lambda: vscode.ghost() is None, "the ghost text to go")
    assert vscode.saved_text("geometry.py") == SOURCE + "    return " + ghost
    # The status bar and Show Stats report the model that answered.
    vscode.run_command("codespec: Show Stats")
    summary = wait_for(lambda: [m for m in vscode.notifications() if m.startswith("latency p50")], "the stats summary")
    assert "model bundled:qwen2.5-coder-1.5b" in summary[0] and "1 accepted" in summary[0], summary
    assert vscode.extension_host_errors() == []
