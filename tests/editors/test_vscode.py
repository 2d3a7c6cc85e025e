"""The VS Code extension's own checks (editors/vscode): `npm ci`, `npm run compile`, `npm test` (unit
tests of the vscode-free modules, then the end-to-end test against the real server over stdio)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"
STEP_TIMEOUT_S = 240


def npm() -> str:
    if not shutil.which("node"):
        pytest.skip("node is not installed: the VS Code extension's tests need node >= 20 and npm")
    found = shutil.which("npm")
    if not found:
        pytest.skip("npm is not installed: the VS Code extension's tests need node >= 20 and npm")
    return found


def run_npm(*args: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", npm_config_audit="false",
               npm_config_fund="false", npm_config_update_notifier="false")
    # The e2e test launches this checkout's server (python -m codespec.cli) when no .venv is beside it.
    env.setdefault("CODESPEC_PYTHON", sys.executable)
    done = subprocess.run([npm(), *args], cwd=EXTENSION, env=env, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"npm {' '.join(args)} failed ({done.returncode}):\n{output[-6000:]}"
    return output


def test_vscode_extension_compiles_and_passes_its_tests() -> None:
    run_npm("ci")
    run_npm("run", "compile")
    output = run_npm("test")
    # node's test runner summary: every test ran and passed.
    assert "# fail 0" in output and "# cancelled 0" in output, output[-3000:]
    assert "# pass 0" not in output
