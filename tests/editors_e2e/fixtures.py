"""Fixtures of the VS Code end-to-end tests: one code-server and one Chromium for the session, a fresh
window on a fresh workspace folder per test (its own extension host and codespec server)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.editors_e2e.workbench import (
    ARTIFACTS,
    CHROMIUM,
    TINY_ARGS,
    CodeServer,
    TapClient,
    Workbench,
    check_environment,
    write_workspace,
)

OpenVSCode = Callable[..., Workbench]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def code_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CodeServer]:
    check_environment()
    server = CodeServer(tmp_path_factory.mktemp("code-server")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def tap(tmp_path: Path) -> TapClient:
    return TapClient(tmp_path / "tap")


def tiny_settings(tap: TapClient, *server_args: str, **settings: Any) -> dict[str, Any]:
    """The extension launches the real server (tiny random model) through the tap."""
    return {"codespec.server.path": sys.executable, "codespec.server.args": tap.args(*TINY_ARGS, *server_args),
            "codespec.model": "tiny", "codespec.draftModel": "none", "codespec.drafting": "lookup",
            "codespec.statsIntervalSeconds": 1, **settings}


@pytest.fixture
def open_vscode(browser: Browser, code_server: CodeServer, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[OpenVSCode]:
    opened: list[Workbench] = []

    def open_(files: dict[str, str], settings: dict[str, Any]) -> Workbench:
        folder = tmp_path / "workspace"
        write_workspace(folder, files, settings)
        workbench = Workbench(browser, code_server, folder)
        opened.append(workbench)
        return workbench.open()

    yield open_
    failed = getattr(request.node, "report_call", None) is not None and request.node.report_call.failed
    for workbench in opened:
        if failed:  # what the screen showed and what the extension logged, for the CI log's reader
            where = ARTIFACTS / "failures" / request.node.name
            try:
                workbench.screenshot(where / "screen.png")
            except Exception as error:  # the page may be gone
                print(f"no screenshot: {error}")
            (where / "codespec-output.log").write_text(code_server.codespec_output())
            tap_dir = tmp_path / "tap"
            if tap_dir.exists():
                shutil.copytree(tap_dir, where / "tap", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
        workbench.close()
