import pytest_asyncio

from tests.lsp.helpers import FAIL_MARKER, FIRST_DOC, capabilities, open_doc, session


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client():
    """One real `codespec serve --stdio` (tiny model) shared by a module's tests: a start costs
    seconds of torch import on 2 cores. Tests use their own document URIs and stats deltas."""
    async with session(
        init_options={"streaming": True, "debugFailMarker": FAIL_MARKER, "maxTokens": 24},
        caps=capabilities(progress=True),
    ) as c:
        open_doc(c, FIRST_DOC, "opened = 'while the models load'\n")  # races the eager load
        yield c
