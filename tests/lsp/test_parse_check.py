"""Every answer goes through the parse check, whatever its source: a fresh generation's and a typed-along one's
alike (the completion manager with a scripted engine, no model)."""

from __future__ import annotations

import asyncio
import dataclasses

from codespec.context import ContextConfig
from codespec.decode.api import GenerationResult, GenerationStats, StepEvent
from codespec.tiny import tiny_tokenizer
from lsp.completion import Anchor, CompletionManager
from lsp.options import ServerOptions
from lsp.stats import RequestRecord, ServerStats
from tests.context.helpers import doc_at

SOURCE = "def f(x):\n    ┃\n\nprint(1)\n"
# What the model writes: the pure filters keep all of it; its last line does not parse ("else" without ":").
RAW = "x = 1\n    y = 2\n    if x:\n        return 1\n    else"
PARSABLE = "x = 1\n    y = 2\n    if x:\n        return 1"
# One generation, answered when it is done (no early answer), nothing in idle time.
OPTIONS = dataclasses.replace(ServerOptions(), early_answer=False, prefetch=False, idle_delay_s=None,
                              prompt_layout="psm", streaming=False)


class ScriptedEngine:
    """Writes `text` for every prompt and counts the calls."""

    def __init__(self, text: str = RAW) -> None:
        self.tokenizer = tiny_tokenizer()
        self.text = text
        self.calls = 0

    def stream(self, prompt_ids, **_):
        self.calls += 1
        yield StepEvent(text=self.text, token_ids=[1])
        yield StepEvent(text="", token_ids=[], done=True,
                        result=GenerationResult(self.text, [1], "eos", GenerationStats()))

    def reset_cache(self) -> None:
        pass


def _manager(engine: ScriptedEngine) -> CompletionManager:
    manager = CompletionManager(options=lambda: OPTIONS, get_engine=lambda: engine, notify=lambda *_: None,
                                stats=ServerStats())
    # A generous parse budget: on a loaded machine the default 3 ms could run out and skip the check.
    config = dataclasses.replace(ContextConfig(), layout="psm", parse_budget_s=0.5)
    manager._context_config = lambda: config  # type: ignore[method-assign]
    return manager


async def _request(manager: CompletionManager, doc, offset: int, request_id: int):
    anchor = Anchor(uri=doc.uri, version=doc.version, text=doc.text, offset=offset, language_id=doc.language_id)
    record = RequestRecord(id=request_id, method="textDocument/inlineCompletion", uri=doc.uri)
    return await asyncio.wait_for(
        manager.complete(record, doc=doc, anchor=anchor, position=doc.position_at(offset)), 30)


async def test_fresh_and_typed_along_answers_drop_the_line_that_does_not_parse() -> None:
    engine = ScriptedEngine()
    manager = _manager(engine)
    try:
        doc, line, character = doc_at(SOURCE)
        cursor = doc.offset_at(line, character)
        fresh = await _request(manager, doc, cursor, 1)
        assert fresh.source == "model" and fresh.text == PARSABLE
        # The pure filters alone keep the broken line: the parse check is what dropped it.
        generation = manager._generations[doc.uri][-1]
        assert manager.postprocess(generation.text, generation.ctx) == RAW

        # The user types the suggestion's first line; the server's document changes as on didChange.
        doc.apply_change((doc.position_at(cursor), doc.position_at(cursor)), "x = 1")
        manager.document_changed(doc.uri, doc.text)
        along = await _request(manager, doc, cursor + len("x = 1"), 2)
        assert along.source == "typed-along" and along.generation == fresh.generation
        assert along.text == PARSABLE[len("x = 1"):]  # checked in the document as it is now, not skipped
        assert engine.calls == 1
    finally:
        manager.close()


async def test_a_suggestion_that_adds_no_error_is_answered_whole() -> None:
    whole = "x = 1\n    return x"
    engine = ScriptedEngine(whole)
    manager = _manager(engine)
    try:
        # The document has an error of its own further down: only errors the suggestion adds count.
        doc, line, character = doc_at("def f(x):\n    ┃\n\nprint(1\n")
        answer = await _request(manager, doc, doc.offset_at(line, character), 1)
        assert answer.text == whole
    finally:
        manager.close()
