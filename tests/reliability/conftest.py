import os
import tempfile

import pytest

from codespec.reliability.fuzz import SERVER_OPTIONS
from codespec.reliability.rpc import StdioServer, warm_up


@pytest.fixture(scope="session")
def audit_path():
    handle, path = tempfile.mkstemp(prefix="codespec-audit-", suffix=".jsonl")
    os.close(handle)
    yield path
    os.unlink(path)


@pytest.fixture(scope="session")
def shared(audit_path):
    """One real `codespec serve --stdio` (tiny model, fault markers armed, audit log on) for the
    fuzz, edit, load, fault and security tests: each start costs seconds of torch import on 2
    cores. Tests use their own document URIs."""
    with StdioServer(launcher_args=("--faults", "--audit", audit_path)) as server:
        server.initialize(SERVER_OPTIONS)
        warm_up(server)
        yield server
