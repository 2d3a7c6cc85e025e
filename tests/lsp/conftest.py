import contextlib

import pytest
import pytest_asyncio

from tests.lsp.helpers import FAIL_MARKER, FIRST_DOC, capabilities, open_doc, session, tiny_llama_server

BACKENDS = ("local", "engine")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def client(request, tmp_path_factory):
    """One real `codespec serve --stdio` (tiny model) shared by a module's tests: a start costs seconds
    of torch import on 2 cores. Tests use their own document URIs and stats deltas. Every test runs
    twice: on the local engine, and with `--engine` against llama.cpp's llama-server serving the same
    tiny model as a GGUF (the LSP side must not know which one generates)."""
    extra: tuple[str, ...] = ()
    engine = request.param == "engine"
    with tiny_llama_server(tmp_path_factory.mktemp("engine")) if engine else contextlib.nullcontext() as url:
        if url is not None:
            extra = ("--engine", url)
        async with session(
            *extra,
            init_options={"streaming": True, "debugFailMarker": FAIL_MARKER, "maxTokens": 24},
            caps=capabilities(progress=True),
        ) as c:
            c.backend = request.param
            open_doc(c, FIRST_DOC, "opened = 'while the models load'\n")  # races the eager load
            yield c


@pytest.fixture
def local_only(client):
    if client.backend != "local":
        pytest.skip("measures the local engine's own decode loop")
