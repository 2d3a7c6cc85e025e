"""The codespec language server: thin pygls handlers over the completion manager, engine and context room.

Options, custom methods and error codes are documented in docs/server.md."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time
from collections import OrderedDict
from typing import Any

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from codespec import __version__
from codespec.decode.api import CompletionEngine
from lsp.completion import SUPERSEDED_RESULT, Anchor, Answer, CompletionManager, ModelError
from lsp.options import ServerOptions
from lsp.protocol import CodespecProtocol, release_server
from lsp.stats import ANSWERED, CANCELLED, EMPTY, ERROR, SUPERSEDED, RequestRecord, ServerStats

logger = logging.getLogger(__name__)

ACCEPT_COMMAND = "codespec.accept"
REJECT_COMMAND = "codespec.reject"
STATS_METHOD = "codespec/stats"
DOCUMENT_TEXT_METHOD = "codespec/documentText"
PARTIAL_METHOD = "codespec/partialCompletion"

MODEL_ERROR_CODE = -32603  # JSON-RPC internal error, with data.kind "model" | "out-of-memory" | "load"
SHOWN_KEPT = 512
RECENT_DEFAULT = 64  # codespec/stats: how many recent requests / generations to list by default
PROGRESS_CREATE_TIMEOUT_S = 5.0


class CodespecServer(LanguageServer):
    def __init__(self, options: ServerOptions):
        super().__init__(
            "codespec",
            __version__,
            protocol_cls=CodespecProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.options = options
        self.documents: dict[str, Any] = {}  # uri -> codespec.context.Document
        self.encoding = "utf-16"
        self.terminated = False  # set by the stdin loop on SIGTERM (lsp/stdio.py): exit 0
        self.stats = ServerStats()
        self.engine: CompletionEngine | None = None
        self._engine_key: tuple[Any, ...] | None = None
        self._loading: asyncio.Future | None = None
        self._loading_key: tuple[Any, ...] | None = None
        self._latest_request: dict[tuple[str, str], RequestRecord] = {}  # (uri, method) -> newest
        self._shown: OrderedDict[str, int] = OrderedDict()  # completion id -> suggestion length
        self._completion_ids = itertools.count(1)
        self._progress_ids = itertools.count(1)
        self.manager = CompletionManager(
            options=lambda: self.options,
            get_engine=lambda: self.engine,
            notify=self.protocol.notify,
            stats=self.stats,
        )

    # ----- lifecycle ------------------------------------------------------------------------------

    def shutdown(self):
        """Called by pygls when the connection ends: stop model work, never wait for a thread
        (the stdin reader may be blocked in read() for good)."""
        self.manager.close()
        release_server(self)

    def apply_options(self, settings: Any) -> None:
        new = self.options.updated(settings)
        if new.model_key() != self.options.model_key() and self.engine is not None:
            logger.info("model options changed: the engine is rebuilt on the next request")
            self.manager.cancel_all()
            self.engine = None
        elif self.engine is not None:
            self.engine.step_delay_s = new.step_delay_s  # applied live: tests slow the model per test
        self.options = new
        set_log_level(new.log_level)

    # ----- models ---------------------------------------------------------------------------------

    async def ensure_engine(self) -> Any:
        key = self.options.model_key()
        if self.engine is not None and self._engine_key == key:
            return self.engine
        if self._loading is None or self._loading_key != key:
            self._loading_key = key
            self._loading = asyncio.ensure_future(self._load_engine(self.options))
        loading = self._loading
        try:
            engine = await asyncio.shield(loading)  # a cancelled request must not abort the load
        except (ModelError, Exception) as exc:
            if self._loading is loading:
                self._loading = None  # the next request tries again
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"loading models failed: {exc}", kind="load") from exc
        if self._loading_key == key:
            self.engine, self._engine_key = engine, key
            self.manager.blocks.set_budget(engine)  # the prompt's budgets follow the measured prefill speed
            _freeze_what_is_loaded()
            engine.step_delay_s = self.options.step_delay_s  # may have changed during the load
        return engine

    async def _load_engine(self, options: ServerOptions) -> Any:
        token = await self._begin_progress("codespec: loading models", options.resolved_models()[0])
        # Import on this thread first: transformers' lazy modules are not safe to import from two
        # threads at once, and a didOpen during the load imports the context room (measured: an
        # ImportError of PreTrainedTokenizerBase, the document lost). A serving engine needs neither.
        import codespec.context  # noqa: F401

        if not options.engine:
            import codespec.decode.engine  # noqa: F401

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.manager.executor, build_engine, options)
        finally:
            self._end_progress(token)

    async def _begin_progress(self, title: str, message: str) -> str | None:
        window = getattr(self.client_capabilities, "window", None)
        if not (window and window.work_done_progress):
            return None
        token = f"codespec-load-{next(self._progress_ids)}"
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), PROGRESS_CREATE_TIMEOUT_S)
        except Exception:
            logger.warning("client did not accept progress token %s", token)
            return None
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message))
        return token

    def report_load_failure(self, task: asyncio.Future) -> None:
        """Eager loading failed: tell the user once (requests will retry the load and get -32603)."""
        if task.cancelled() or task.exception() is None:
            return
        logger.error("%s", task.exception())
        self.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Error, message=f"codespec: {task.exception()}")
        )

    def _end_progress(self, token: str | None) -> None:
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message="models ready"))

    # ----- completion -----------------------------------------------------------------------------

    async def suggest(
        self,
        method: str,
        uri: str,
        position: types.Position,
        *,
        selected: types.SelectedCompletionInfo | None = None,
    ) -> tuple[Answer, types.Position, types.Range | None] | None | str:
        """Run one completion request. Returns (answer, cursor, selected range), None (nothing to
        suggest) or "superseded"; raises CancelledError on $/cancelRequest, JsonRpcException on errors."""
        record = RequestRecord(id=self.protocol.msg_id, method=method, uri=uri, line=position.line)
        self.stats.begin_request(record)
        self._latest_request[uri, method] = record
        started = time.perf_counter()
        outcome = ERROR
        try:
            result = await self._suggest(record, uri, position, selected=selected)
            if result == "superseded":
                outcome = SUPERSEDED
            elif result is None:
                outcome = EMPTY
            else:
                outcome = ANSWERED
                record.text_len = len(result[0].text)
            return result
        except asyncio.CancelledError:
            outcome = CANCELLED
            raise
        except ModelError as exc:
            raise JsonRpcException(message=str(exc), code=MODEL_ERROR_CODE, data={"kind": exc.kind}) from exc
        finally:
            self.stats.finish_request(record, outcome, (time.perf_counter() - started) * 1000.0)

    async def _suggest(self, record, uri, position, *, selected):
        doc = self.documents.get(uri)
        if doc is None:
            return None
        version = doc.version
        await self.ensure_engine()
        if self._latest_request.get((uri, record.method)) is not record or doc.version != version:
            return "superseded"  # something newer arrived while the models loaded
        offset = doc.offset_at(position.line, position.character)
        cursor = types.Position(*doc.position_at(offset))
        context_doc, anchor_text, anchor_offset, selected_range = doc, doc.text, offset, None
        if selected is not None:
            # Complete as if the selected popup item were accepted; the answer must extend it.
            context_doc, anchor_offset, selected_range = self._with_selected(doc, selected)
            anchor_text = context_doc.text
        anchor = Anchor(
            uri=uri, version=version, text=anchor_text, offset=anchor_offset, language_id=doc.language_id
        )
        others = tuple(d for u, d in self.documents.items() if u != uri)
        answer = await self.manager.complete(
            record,
            doc=context_doc,
            anchor=anchor,
            position=context_doc.position_at(anchor_offset),
            other_docs=others,
        )
        if answer is SUPERSEDED_RESULT:
            return "superseded"
        if answer is None or not answer.text:
            return None
        if selected is not None:
            answer = Answer(text=selected.text + answer.text, generation=answer.generation, source=answer.source)
        return answer, cursor, selected_range

    def _with_selected(self, doc: Any, selected: types.SelectedCompletionInfo):
        from codespec.context import Document

        start = doc.offset_at(selected.range.start.line, selected.range.start.character)
        end = doc.offset_at(selected.range.end.line, selected.range.end.character)
        start, end = min(start, end), max(start, end)
        text = doc.text[:start] + selected.text + doc.text[end:]
        virtual = Document(doc.uri, doc.language_id, text, version=doc.version, encoding=self.encoding)
        clamped = types.Range(
            start=types.Position(*doc.position_at(start)), end=types.Position(*doc.position_at(end))
        )
        return virtual, start + len(selected.text), clamped

    def accept_command(self, text: str) -> types.Command:
        completion_id = str(next(self._completion_ids))
        self._shown[completion_id] = len(text)
        while len(self._shown) > SHOWN_KEPT:
            self._shown.popitem(last=False)
        return types.Command(title="codespec: suggestion accepted", command=ACCEPT_COMMAND, arguments=[completion_id])

    def record_feedback(self, accepted: bool, args: tuple[Any, ...]) -> dict[str, Any]:
        completion_id = str(args[0]) if args else ""
        length = self._shown.pop(completion_id, None)
        if length is None:
            return {"known": False}
        if accepted:
            self.stats.accepted += 1
            self.stats.accepted_chars += length
        else:
            self.stats.rejected += 1
        return {"known": True}

    def stats_report(self, recent: int) -> dict[str, Any]:
        report = self.stats.to_dict(recent)
        engine: CompletionEngine | None = self.engine
        if engine is None:  # not loaded yet (resolving the device profile would import torch here)
            o = self.options
            models = {"model": o.model or "default", "draftModel": o.draft_model, "drafting": o.drafting}
            report["engine"] = {"loaded": False, **models}
        else:
            # What serves; the runtime (its cost curve) and the acceptance the cost-aware draft length works
            # from, or the remote engine's health.
            described = engine.describe()
            kv = described.pop("kv", None)
            report["engine"] = {"loaded": True, **engine.served, **described}
        # The anchored layout: the budget and why, the pinned blocks, idle-time work, the cached prompts (KV).
        report["prompt"] = self.manager.blocks.describe(kv if engine is not None else None)
        report["positionEncoding"] = self.encoding
        # Handlers pygls holds a future for: requests in flight (a leak would show here first).
        report["handlersInFlight"] = self.protocol.requests_in_flight
        # Work the server will do before the client acts again (generations, idle-time work, their timers).
        report["pendingWork"] = self.manager.pending_work()
        # Objects kept out of the garbage collector's full passes since the load (_freeze_what_is_loaded).
        report["gcFrozenObjects"] = gc.get_freeze_count()
        return report


def build_engine(options: ServerOptions) -> Any:
    """Model worker thread: load the target (and draft) and build the engine."""
    from codespec.engine_options import load_engine, remote_engine

    o = options
    if o.engine:
        return remote_engine(o.engine, o.resolved_models()[0], o.engine_model)
    return load_engine(o.model, o.draft_model, o.drafting, device=o.device, dtype=o.dtype, threads=o.threads,
                       runtime=o.runtime, step_delay_s=o.step_delay_s, degrade=True)


def set_log_level(level: str) -> None:
    logging.getLogger("codespec").setLevel(level.upper())
    logging.getLogger("lsp").setLevel(level.upper())
    # pygls logs every message at INFO: keep it at WARNING unless debugging.
    logging.getLogger("pygls").setLevel("DEBUG" if level == "debug" else "WARNING")


def _as_position(position: types.Position) -> types.Position:
    if position.line < 0 or position.character < 0:
        raise JsonRpcInvalidParams(message="Invalid params: negative position")
    return position


def create_server(options: ServerOptions) -> CodespecServer:
    server = CodespecServer(options)

    @server.feature(types.INITIALIZE)
    def initialize(ls: CodespecServer, params: types.InitializeParams) -> None:
        ls.apply_options(params.initialization_options)
        encoding = ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities)
        ls.encoding = str(getattr(encoding, "value", encoding))
        ls.manager.encoding = ls.encoding

    @server.feature(types.INITIALIZED)
    def initialized(ls: CodespecServer, params: types.InitializedParams) -> None:
        if ls.options.load_models == "eager":
            task = asyncio.ensure_future(ls.ensure_engine())
            task.add_done_callback(ls.report_load_failure)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: CodespecServer, *args: Any) -> None:
        ls.manager.cancel_all()

    @server.feature(types.EXIT)
    def exit_(ls: CodespecServer, *args: Any) -> None:
        ls.manager.close()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: CodespecServer, params: types.DidOpenTextDocumentParams) -> None:
        from codespec.context import Document

        item = params.text_document
        ls.manager.document_closed(item.uri)  # a re-open replaces the document
        ls.stats.document_opened(item.uri)
        ls.documents[item.uri] = Document(item.uri, item.language_id, item.text, item.version, ls.encoding)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: CodespecServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.documents.get(uri)
        if doc is None:
            logger.warning("didChange for a document that is not open: %s", uri)
            return
        for change in params.content_changes:
            span = getattr(change, "range", None)
            if span is None:
                doc.apply_change(None, change.text)
            else:
                doc.apply_change(
                    ((span.start.line, span.start.character), (span.end.line, span.end.character)), change.text
                )
        doc.version = params.text_document.version
        ls.manager.document_changed(uri, doc.text)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: CodespecServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.manager.document_closed(uri)
        ls.documents.pop(uri, None)
        for key in [k for k in ls._latest_request if k[0] == uri]:
            del ls._latest_request[key]

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: CodespecServer, params: types.DidChangeConfigurationParams) -> None:
        ls.apply_options(params.settings)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: CodespecServer, params: types.InlineCompletionParams):
        result = await ls.suggest(
            types.TEXT_DOCUMENT_INLINE_COMPLETION,
            params.text_document.uri,
            _as_position(params.position),
            selected=params.context.selected_completion_info,
        )
        if result == "superseded" or (result is None and params.text_document.uri not in ls.documents):
            return None
        if result is None:
            return types.InlineCompletionList(items=[])
        answer, cursor, selected_range = result
        span = selected_range or types.Range(start=cursor, end=cursor)
        item = types.InlineCompletionItem(
            insert_text=answer.text, range=span, command=ls.accept_command(answer.text)
        )
        return types.InlineCompletionList(items=[item])

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[]))
    async def completion(ls: CodespecServer, params: types.CompletionParams):
        result = await ls.suggest(
            types.TEXT_DOCUMENT_COMPLETION, params.text_document.uri, _as_position(params.position)
        )
        if result == "superseded" or (result is None and params.text_document.uri not in ls.documents):
            return None
        if result is None:
            return types.CompletionList(is_incomplete=True, items=[])
        answer, cursor, _ = result
        first_line = answer.text.strip().splitlines()[0] if answer.text.strip() else answer.text
        item = types.CompletionItem(
            label=first_line[:80],
            kind=types.CompletionItemKind.Text,
            detail="codespec",
            sort_text="0",
            filter_text="",
            insert_text_format=types.InsertTextFormat.PlainText,
            text_edit=types.TextEdit(range=types.Range(start=cursor, end=cursor), new_text=answer.text),
            command=ls.accept_command(answer.text),
        )
        return types.CompletionList(is_incomplete=True, items=[item])

    @server.command(ACCEPT_COMMAND)
    def accept(ls: CodespecServer, *args: Any) -> dict[str, Any]:
        return ls.record_feedback(True, args)

    @server.command(REJECT_COMMAND)
    def reject(ls: CodespecServer, *args: Any) -> dict[str, Any]:
        return ls.record_feedback(False, args)

    @server.feature(STATS_METHOD)
    def stats(ls: CodespecServer, params: Any) -> dict[str, Any]:
        recent = _param(params, "recent")
        if recent is None:
            recent = RECENT_DEFAULT
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 0:
            raise JsonRpcInvalidParams(message="Invalid params: recent must be an integer >= 0")
        return ls.stats_report(recent)

    @server.feature(DOCUMENT_TEXT_METHOD)
    def document_text(ls: CodespecServer, params: Any) -> dict[str, Any] | None:
        uri = _param(params, "uri")
        if not isinstance(uri, str):
            raise JsonRpcInvalidParams(message="Invalid params: expected {uri: string}")
        doc = ls.documents.get(uri)
        return None if doc is None else {"text": doc.text, "version": doc.version}

    return server


def _param(params: Any, name: str) -> Any:
    if isinstance(params, dict):
        return params.get(name)
    return getattr(params, name, None)


def _freeze_what_is_loaded() -> None:
    """Keep what the load made (modules, model, tokenizer: ~200,000 objects the collector tracks) out of
    Python's cyclic garbage collector. Each full collection walked them all, ~0.1 s holding the GIL, at
    moments no one chose: the worker could not pass between two forwards nor the event loop answer
    (measured in experiments/replay-control/log.md, run5). Frozen objects are still freed by reference
    counting; a new engine (options changed) unfreezes first, so the old one's cycles are collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
