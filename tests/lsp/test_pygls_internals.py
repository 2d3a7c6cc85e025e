"""lsp/protocol.py is the one module that touches pygls's private attributes; this fails loudly when a pygls
upgrade moves one of them (instead of a server that silently leaks futures or never stops)."""

from __future__ import annotations

import pytest

from lsp.options import ServerOptions
from lsp.protocol import PYGLS_INTERNALS, reading_stopped, release_server, start_reading
from lsp.server import create_server


@pytest.fixture
def server():
    return create_server(ServerOptions(load_models="lazy"))


@pytest.mark.parametrize(("owner", "attribute"), PYGLS_INTERNALS)
def test_the_pygls_internals_we_use_exist(server, owner, attribute):
    target = server.protocol if owner == "protocol" else server
    assert hasattr(target, attribute), f"pygls no longer has {owner}.{attribute}: update lsp/protocol.py"


def test_the_wrappers_read_and_stop_what_they_say(server):
    assert server.protocol.shutdown_requested is False and server.protocol.requests_in_flight == 0
    start_reading(server)
    assert not reading_stopped(server)
    release_server(server)
    assert reading_stopped(server)
