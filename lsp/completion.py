"""Per-document generation manager: the part of the server that keeps up with typing.

All state here lives on the event-loop thread. Model work runs on one dedicated worker thread
(`ThreadPoolExecutor(max_workers=1)`, not pygls's pool, which also reads stdin); the worker only
pushes engine events back with `call_soon_threadsafe`.

Words used below:
- anchor: the document text and cursor a generation was started for (virtual text when a
  selected completion item or a prefetch is assumed accepted).
- typed: text inserted at the anchor's cursor since then. A generation serves a later request when
  the document equals the anchor with `typed` inserted and `typed` is a prefix of its text.
- waiter: a pending request attached to a generation; answered once the generation has a complete
  first line beyond `typed` (early answer) or is done.

One file for one job: generations, waiters, typing along, cache, prefetch and cancellation are the
state of one manager on one thread, and each rule here depends on the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lsp.blocks import BlockPlanner
from lsp.options import ServerOptions
from lsp.stats import (
    CUT,
    DECLINED,
    DIVERGED,
    EMPTIED,
    MODEL_EMPTY,
    GenerationRecord,
    RequestRecord,
    ServerStats,
)

logger = logging.getLogger(__name__)

GENERATIONS_KEPT_PER_DOCUMENT = 4
RECENT_COMPLETIONS = 8
# A complete first line: some non-blank text followed by a line break.
_FIRST_LINE_DONE = re.compile(r"\S[^\n]*\n")


class Superseded:
    """Marker result for a request made stale by a newer request or an edit."""


SUPERSEDED_RESULT = Superseded()
# Finish reasons of a generation whose text is cut short: it answers nothing and is never reused.
ENDED_SHORT = ("cancelled", "unavailable")


class ModelError(Exception):
    """The model path raised; the request gets an error response, the server keeps serving."""

    def __init__(self, message: str, *, kind: str = "model"):
        super().__init__(message)
        self.kind = kind  # "model" | "out-of-memory" | "load" (the error response's data.kind)


@dataclass
class Anchor:
    uri: str
    version: int
    text: str
    offset: int  # cursor, index into text
    language_id: str = ""


@dataclass
class Answer:
    text: str  # what to insert at the cursor (after `typed`)
    generation: int | None
    source: str


@dataclass
class Waiter:
    record: RequestRecord
    typed: str
    future: asyncio.Future
    source: str
    # The document the request saw and its cursor: the parse check inserts the answer there. Any edit
    # supersedes the waiter, so while it waits the document is as the request saw it (edit_count checks).
    document: Any = None  # codespec.context.Document
    cursor: int = 0
    edit_count: int | None = None


@dataclass
class Generation:
    id: int
    kind: str  # "request" | "prefetch"
    anchor: Anchor
    ctx: Any  # codespec.context.CompletionContext
    prompt_ids: list[int]
    token: Any  # codespec.decode.engine.CancelToken
    record: GenerationRecord
    position: tuple[int, int]  # anchor cursor in the client's position encoding
    stream: bool = False
    parent: Generation | None = None
    text: str = ""  # raw text accepted so far
    done: bool = False
    error: ModelError | None = None
    shown: bool = False
    prefetched: bool = False
    counted: bool = False  # added to the stats' totals
    waiters: list[Waiter] = field(default_factory=list)
    served: list[RequestRecord] = field(default_factory=list)  # requests this generation's model call served
    # Target forwards whose tokens reached the worker after the cancel token was set, counted by
    # the server independently of the engine's own count (the engine promises at most one).
    forwards_after_cancel: int = 0
    created_s: float = field(default_factory=time.perf_counter)

    # ----- what the generation offers --------------------------------------------------------------

    def suggestion(self, *, postprocess: Callable[[str, Any], str], early: bool) -> str | None:
        """The post-processed suggestion from the anchor, or None while nothing is ready."""
        if self.done:
            return postprocess(self.text, self.ctx)
        if not early:
            return None
        cut = self.text.rfind("\n")
        if cut < 0 or not _FIRST_LINE_DONE.search(self.text):
            return None
        return postprocess(self.text[:cut], self.ctx)

    def typed_since(self, text: str, offset: int | None = None) -> str | None:
        """What was inserted at the anchor's cursor to turn the anchor into `text`, if that is all
        that changed. `offset` (the new cursor) is inferred from the length difference when None."""
        a = self.anchor
        grown = len(text) - len(a.text)
        if grown < 0 or (offset is not None and offset != a.offset + grown):
            return None
        end = a.offset + grown
        if text[: a.offset] != a.text[: a.offset] or text[end:] != a.text[a.offset :]:
            return None
        return text[a.offset : end]

    def consistent_with(self, typed: str, *, postprocess: Callable[[str, Any], str]) -> bool:
        """Could this generation still serve a request after `typed`?"""
        if self.error is not None or self.token.cancelled or self.record.finish_reason in ENDED_SHORT:
            return False  # a cancelled generation's text is cut short: never serve it as complete
        if self.done:
            full = postprocess(self.text, self.ctx)
            return len(full) > len(typed) and full.startswith(typed)
        return self.text.startswith(typed)


class CompletionManager:
    """Owns documents' generations, the model worker thread and the stats."""

    def __init__(
        self,
        *,
        options: Callable[[], ServerOptions],
        get_engine: Callable[[], Any],
        notify: Callable[[str, Any], None],
        stats: ServerStats,
    ):
        self._options = options
        self._get_engine = get_engine
        self._notify = notify
        self.stats = stats
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codespec-model")
        self._ids = itertools.count(1)
        self._generations: dict[str, list[Generation]] = {}
        self._waiters: dict[str, list[Waiter]] = {}
        self._recent: dict[str, deque[str]] = {}  # shown suggestions per document (with their line), for lookup
        self._activity: dict[str, int] = {}  # per document: bumped by every request and edit
        self._closed = False
        self.encoding = "utf-16"  # the negotiated position encoding, for virtual documents
        self.blocks = BlockPlanner()
        self._last_request: tuple[Any, tuple[int, int], tuple[Any, ...]] | None = None  # for idle-time work
        self._quiet = 0  # bumped by every request and edit: idle-time work starts only after a quiet spell
        self._timers = 0  # prefetch and idle-time timers not fired yet (pending_work)

    # ----- context-room functions, imported once the first completion needs them -----------------

    @staticmethod
    def _context_api():
        from codespec.context import build_context, postprocess

        return build_context, postprocess

    def postprocess(self, text: str, ctx: Any) -> str:
        text = self._context_api()[1](text, ctx)
        if self._options().multiline == "never":
            text = first_line(text)
        return text

    def build_context(self, doc: Any, position: tuple[int, int], other_docs: tuple[Any, ...] = ()) -> Any:
        """The request's context; in the anchored layout with the document's pinned block when its KV is
        cached, else the cursor window alone (the block is computed in idle time)."""
        from codespec.context.build import COLD

        engine = self._get_engine()
        config = self._context_config()
        if config.layout != "anchored":
            return self._build(doc, position, other_docs, None, config)
        block = self.blocks.block_for(doc.uri, engine, doc, position[0])
        ctx = self._build(doc, position, other_docs, block, config)
        if ctx.block is not None and not self.blocks.usable(ctx, engine):
            ctx = self._build(doc, position, other_docs, COLD, config)
        if ctx.block is None and ctx.mode != "none":
            self.blocks.counters.cold_prompts += 1
        self.blocks.remember(doc.uri, ctx.block)
        return ctx

    def _build(self, doc: Any, position: tuple[int, int], other_docs: tuple[Any, ...], block: Any,
               config: Any = None) -> Any:
        build_context, _ = self._context_api()
        return build_context(
            doc,
            *position,
            tokenizer=self._get_engine().tokenizer,
            other_docs=other_docs,
            recent_completions=tuple(self._recent.get(doc.uri, ())),
            config=config or self._context_config(),
            block=block,
        )

    def _context_config(self) -> Any:
        from codespec.context import ContextConfig

        options = self._options()
        changes: dict[str, Any] = {}
        if options.max_lines is not None:
            changes["max_block_lines"] = options.max_lines
        if options.prompt_layout is not None:
            changes["layout"] = options.prompt_layout
        if options.near_suffix_lines is not None:
            changes["near_suffix_lines"] = options.near_suffix_lines
        return self.blocks.configure(dataclasses.replace(ContextConfig(), **changes))

    # ----- requests --------------------------------------------------------------------------------

    async def complete(
        self,
        record: RequestRecord,
        *,
        doc: Any,
        anchor: Anchor,
        position: tuple[int, int],
        other_docs: tuple[Any, ...] = (),
    ) -> Answer | Superseded | None:
        """The suggestion for `anchor` (the request's cursor); None when there is none."""
        options = self._options()
        self._bump(anchor.uri)
        self._last_request = (doc, position, other_docs)
        # Inline and completion requests are separate streams (a client may send both per keystroke).
        self._supersede_waiters(anchor.uri, method=record.method)

        served = self._serve_from_existing(record, anchor, options, doc)
        if served is not None:
            return await served

        self._cancel_generations(anchor.uri)
        ctx = self.build_context(doc, position, other_docs)
        if ctx.mode == "none":  # e.g. inside an identifier: post-processing would drop any text
            record.cause, record.context_reason = DECLINED, getattr(ctx, "reason", "")
            return None
        generation = self._start_generation("request", anchor, ctx, position, options)
        return await self._attach(generation, record, typed="", source="model", doc=doc, cursor=anchor.offset)

    def _serve_from_existing(self, record: RequestRecord, anchor: Anchor, options: ServerOptions,
                             doc: Any = None):
        """An awaitable answer from a running or finished generation, or None to start a new one."""
        if not (options.cache or options.typing_along):
            return None
        for generation in reversed(self._generations.get(anchor.uri, [])):
            typed = generation.typed_since(anchor.text, anchor.offset)
            if typed is None or (typed and not options.typing_along) or (not typed and not options.cache):
                continue
            if not generation.consistent_with(typed, postprocess=self.postprocess):
                continue
            source = "prefetch" if generation.kind == "prefetch" else "typed-along" if typed else "cache"
            return self._attach(generation, record, typed=typed, source=source, doc=doc, cursor=anchor.offset)
        return None

    async def _attach(self, generation: Generation, record: RequestRecord, *, typed: str, source: str,
                      doc: Any = None, cursor: int = 0):
        loop = asyncio.get_running_loop()
        waiter = Waiter(record=record, typed=typed, future=loop.create_future(), source=source, document=doc,
                        cursor=cursor, edit_count=getattr(doc, "edit_count", None))
        record.source = source
        record.generation = generation.id
        generation.waiters.append(waiter)
        self._waiters.setdefault(generation.anchor.uri, []).append(waiter)
        self._service(generation)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            # An explicit $/cancelRequest (or shutdown): stop the model work this request asked for,
            # unless the request was already answered as superseded (editors cancel the previous
            # request right after the edit that superseded it; the edit decided the generation's fate).
            # (Task.cancel() also cancels the awaited future: only a *result* means superseded.)
            stale = waiter.future.done() and not waiter.future.cancelled()
            others = any(w is not waiter and not w.future.done() for w in generation.waiters)
            if not (stale or others or generation.done):
                generation.token.cancel()
            raise
        finally:
            self._drop_waiter(generation, waiter)

    def _drop_waiter(self, generation: Generation, waiter: Waiter) -> None:
        if waiter in generation.waiters:
            generation.waiters.remove(waiter)
        pending = self._waiters.get(generation.anchor.uri, [])
        if waiter in pending:
            pending.remove(waiter)

    def _supersede_waiters(self, uri: str, *, method: str | None = None) -> None:
        """Answer the document's pending requests (of `method`, or all) with "superseded"."""
        pending = self._waiters.get(uri, [])
        for waiter in [w for w in pending if method is None or w.record.method == method]:
            pending.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_result(SUPERSEDED_RESULT)

    # ----- edits -----------------------------------------------------------------------------------

    def document_changed(self, uri: str, text: str) -> None:
        """didChange: pending requests for the document are stale; generations the edit is not
        consistent with (anything but typing their text at their cursor) are cancelled."""
        self._supersede_waiters(uri)
        self._bump(uri)
        options = self._options()
        for generation in self._generations.get(uri, []):
            if generation.done or generation.token.cancelled:
                continue
            if not (options.cache and options.typing_along) or not self._still_useful(generation, text):
                generation.token.cancel()

    def _still_useful(self, generation: Generation, text: str) -> bool:
        typed = generation.typed_since(text)
        if typed is not None and generation.text.startswith(typed):
            return True
        parent = generation.parent  # a prefetch stays useful while its parent is being typed along
        if parent is not None:
            typed = parent.typed_since(text)
            return typed is not None and parent.consistent_with(typed, postprocess=self.postprocess)
        return False

    def document_closed(self, uri: str) -> None:
        self._supersede_waiters(uri)
        self._cancel_generations(uri)
        self._generations.pop(uri, None)
        self._recent.pop(uri, None)
        self._waiters.pop(uri, None)
        self._activity.pop(uri, None)  # a pending prefetch timer then sees a change and does nothing
        self.blocks.forget(uri)
        if self._last_request is not None and self._last_request[0].uri == uri:
            self._last_request = None

    def _cancel_generations(self, uri: str) -> None:
        for generation in self._generations.get(uri, []):
            if not generation.done:
                generation.token.cancel()

    def cancel_all(self) -> None:
        for uri in list(self._generations):
            self._supersede_waiters(uri)
            self._cancel_generations(uri)

    # ----- generations -----------------------------------------------------------------------------

    def _start_generation(
        self,
        kind: str,
        anchor: Anchor,
        ctx: Any,
        position: tuple[int, int],
        options: ServerOptions,
        parent: Generation | None = None,
    ) -> Generation:
        from codespec.decode.api import CancelToken

        engine = self._get_engine()
        prompt_ids = list(getattr(ctx, "prompt_ids", None) or encode_prompt(engine.tokenizer, ctx.prompt))
        gen_id = next(self._ids)
        record = GenerationRecord(id=gen_id, kind=kind)
        self.stats.add_generation(record)
        generation = Generation(
            id=gen_id,
            kind=kind,
            anchor=anchor,
            ctx=ctx,
            prompt_ids=prompt_ids,
            token=CancelToken(),
            record=record,
            position=position,
            stream=options.streaming and kind == "request",
            parent=parent,
        )
        kept = self._generations.setdefault(anchor.uri, [])
        kept.append(generation)
        # Forget old finished generations; unfinished ones stay until they end.
        while len(kept) > GENERATIONS_KEPT_PER_DOCUMENT and kept[0].done:
            kept.pop(0)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self.executor, self._run_on_worker, loop, engine, generation, options
        )
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "never retrieved"
        return generation

    def _run_on_worker(self, loop, engine, generation: Generation, options: ServerOptions) -> None:
        """Worker thread: stream the engine into the loop. Nothing else touches loop state here."""
        if generation.token.cancelled or self._closed:
            loop.call_soon_threadsafe(self._on_finished, generation, None, "cancelled", None)
            return
        result = None
        generation.record.phase = "prefill"
        generation.record.queued_ms = (time.perf_counter() - generation.created_s) * 1000
        try:
            if not options.cache:
                engine.reset_cache()  # cold baseline: no KV prefix reuse either
            marker = options.debug_fail_marker
            fail = bool(marker) and marker in generation.ctx.prefix
            for event in engine.stream(
                generation.prompt_ids,
                max_new_tokens=options.max_tokens,
                cancel=generation.token,
                stop=generation.ctx.stop,
                extra_streams=generation.ctx.extra_streams,
            ):
                if event.token_ids and generation.token.cancelled:
                    generation.forwards_after_cancel += 1
                if fail:
                    raise MemoryError("simulated out of memory (debugFailMarker)")
                if event.done:
                    result = event.result
                if event.text:
                    loop.call_soon_threadsafe(self._on_text, generation, event.text)
        except BaseException as exc:  # noqa: B036 - OOM and friends must not kill the worker
            logger.exception("generation %d failed", generation.id)
            _recover_engine(engine, exc)
            loop.call_soon_threadsafe(self._on_finished, generation, None, "error", exc)
            return
        reason = getattr(result, "finish_reason", "eos") if result is not None else "cancelled"
        loop.call_soon_threadsafe(self._on_finished, generation, result, reason, None)

    def _on_text(self, generation: Generation, text: str) -> None:
        generation.text += text
        generation.record.phase = "decode"
        try:
            self._stream(generation)
            self._service(generation)
        except Exception as exc:  # e.g. post-processing raised: fail this generation, not the server
            self._fail(generation, exc)

    def _fail(self, generation: Generation, exc: Exception) -> None:
        logger.exception("generation %d: handling its output failed", generation.id)
        generation.token.cancel()
        generation.error = ModelError(f"{type(exc).__name__}: {exc}")
        for waiter in generation.waiters:
            if not waiter.future.done():
                waiter.future.set_exception(generation.error)

    def _on_finished(self, generation: Generation, result: Any, reason: str, exc: BaseException | None) -> None:
        try:
            self._finish(generation, result, reason, exc)
        except Exception as error:
            self._fail(generation, error)
        finally:
            if not generation.counted:
                generation.counted = True
                self.stats.finish_generation(generation.record)

    def _finish(self, generation: Generation, result: Any, reason: str, exc: BaseException | None) -> None:
        generation.done = True
        record = generation.record
        record.finish_reason = reason
        if exc is not None:
            oom = isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()
            generation.error = ModelError(f"{type(exc).__name__}: {exc}", kind="out-of-memory" if oom else "model")
            record.error = str(generation.error)
        stats = getattr(result, "stats", None)
        if stats is not None:
            data = stats.to_dict() if hasattr(stats, "to_dict") else dict(vars(stats))
            record.prefill_tokens = int(data.get("prefill_tokens", 0))
            record.reused_tokens = int(data.get("reused_tokens", 0))
            record.target_forwards = int(data.get("target_forwards", 0))
            record.drafted = int(data.get("drafted", 0))
            record.accepted = int(data.get("accepted", 0))
            record.drafting_off = bool(data.get("drafting_off", False))
            forwards, drafted, accepted = (data.get(k) or {} for k in ("forwards_by", "drafted_by", "accepted_by"))
            record.by_source = {source: [int(forwards.get(source, 0)), int(drafted.get(source, 0)),
                                         int(accepted.get(source, 0))] for source in {*forwards, *drafted}}
            record.new_tokens = len(getattr(result, "token_ids", []) or [])
            record.prefill_ms = float(data.get("prefill_s", 0.0)) * 1000
            record.decode_ms = float(data.get("decode_s", 0.0)) * 1000
            record.draft_ms = float(data.get("draft_s", 0.0)) * 1000
            record.interrupted = int(data.get("interrupted", 0))
            record.forward_ms = {int(k): [int(n), float(s) * 1000]
                                 for k, (n, s) in (data.get("forward_s_by_tokens") or {}).items()}
            if generation.token.cancelled:
                record.engine_forwards_after_cancel = int(data.get("forwards_after_cancel", 0))
        if generation.token.cancelled:
            record.forwards_after_cancel = generation.forwards_after_cancel
        for served in [*generation.served, *(w.record for w in generation.waiters if w.source == "model")]:
            served.prefill_tokens, served.reused_tokens = record.prefill_tokens, record.reused_tokens
        generation.counted = True
        self.stats.finish_generation(record)
        self._stream(generation)
        self._service(generation)
        self._maybe_prefetch(generation)
        self._schedule_idle()

    def _stream(self, generation: Generation) -> None:
        if not generation.stream or generation.token.cancelled or generation.error is not None:
            return
        text = self.postprocess(generation.text, generation.ctx) if generation.text or generation.done else ""
        line, character = generation.position
        self._notify(
            "codespec/partialCompletion",
            {
                "uri": generation.anchor.uri,
                "version": generation.anchor.version,
                "position": {"line": line, "character": character},
                "text": text,
                "done": generation.done,
            },
        )

    def _service(self, generation: Generation) -> None:
        """Answer the waiters that can be answered now."""
        options = self._options()
        for waiter in list(generation.waiters):
            if waiter.future.done():
                continue
            if generation.error is not None:
                waiter.future.set_exception(generation.error)
                continue
            if generation.done and generation.record.finish_reason in ENDED_SHORT:
                waiter.record.cause = CUT
                waiter.future.set_result(None)
                continue
            suggestion = generation.suggestion(postprocess=self.postprocess, early=options.early_answer)
            if suggestion is None:
                if not generation.text.startswith(waiter.typed[: len(generation.text)]):
                    waiter.record.cause = DIVERGED
                    waiter.future.set_result(None)  # the model went elsewhere than what was typed
                continue
            if not suggestion.startswith(waiter.typed):
                if generation.done or not generation.text.startswith(waiter.typed):
                    waiter.record.cause = DIVERGED
                    waiter.future.set_result(None)
                continue
            rest = suggestion[len(waiter.typed) :]
            if not rest and not generation.done:
                continue  # only the typed part is complete so far: wait for more
            if not rest:
                waiter.record.cause = EMPTIED if generation.text[len(waiter.typed) :].strip() else MODEL_EMPTY
            if rest:
                rest = self._parse_checked(rest, generation, waiter)
            if waiter.source == "model":
                generation.served.append(waiter.record)  # prefill numbers are filled in at the end
            else:
                waiter.record.prefill_tokens = waiter.record.reused_tokens = 0
            if rest:
                generation.shown = True
                generation.prefetched = False  # shown again (later request): prefetch after this one
                recent = self._recent.setdefault(generation.anchor.uri, deque(maxlen=RECENT_COMPLETIONS))
                shown = _line_before(generation.anchor) + suggestion  # with its line: realigned when typed over
                if not recent or recent[-1] != shown:
                    recent.append(shown)
            waiter.future.set_result(Answer(text=rest, generation=generation.id, source=waiter.source))
        if generation.done:
            self._maybe_prefetch(generation)

    def _parse_checked(self, rest: str, generation: Generation, waiter: Waiter) -> str:
        """The answer as the parse check leaves it: `rest` inserted at the request's cursor in the document the
        request saw. Not one of the pure filters (it reads that document and the clock), so it runs here, on
        every answer, whatever its source (model, cache, typed-along, prefetch)."""
        from codespec.context.parsecheck import prefer_parsable

        ctx = generation.ctx
        return prefer_parsable(rest, waiter.document, waiter.cursor, budget_s=ctx.parse_budget_s, eol=ctx.eol,
                               edit_count=waiter.edit_count)

    # ----- prefetch --------------------------------------------------------------------------------

    def _bump(self, uri: str) -> None:
        self._activity[uri] = self._activity.get(uri, 0) + 1
        self._quiet += 1
        self.blocks.cancel_idle()  # a request or an edit pre-empts idle-time work at its next chunk

    # ----- idle time -------------------------------------------------------------------------------

    def _schedule_idle(self) -> None:
        """After `idleDelay` without requests or edits, and with nothing running: idle-time work."""
        options = self._options()
        if self._closed or not options.cache or options.idle_delay_s is None:
            return
        quiet = self._quiet
        self._later(options.idle_delay_s, self._idle_if_quiet, quiet)

    def _idle_if_quiet(self, quiet: int) -> None:
        if self._closed or quiet != self._quiet or self.blocks.running is not None or self._last_request is None:
            return
        if any(not g.done for gens in self._generations.values() for g in gens):
            return  # a generation's end schedules this again
        doc, position, other_docs = self._last_request
        engine = self._get_engine()
        try:
            job = self.blocks.idle_job(
                doc, position, engine, lambda d, p, block: self._build(d, p, other_docs, block))
        except Exception:
            logger.exception("idle-time work: building the prompt failed")
            return
        if job is None:
            return
        self.blocks.running = job
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self._run_idle, loop, engine, job)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _run_idle(self, loop, engine, job) -> None:
        complete = False if job.token.cancelled or self._closed else self.blocks.run(job, engine)
        loop.call_soon_threadsafe(self._idle_finished, job, complete)

    def _idle_finished(self, job, complete: bool) -> None:
        self.blocks.finished(job, complete)
        if complete:
            self._schedule_idle()  # more may be due (the document changed during this one)

    def _maybe_prefetch(self, generation: Generation) -> None:
        """After a shown suggestion's generation ended: after `prefetchDelay` without activity on the
        document, generate what follows accepting it. The delay keeps a prefetch's prefill (cancellable only
        between chunks, engine.PREFILL_CHUNK) out of the way of the next keystroke when the user types on."""
        options = self._options()
        if not (options.prefetch and options.cache) or self._closed:
            return
        if not (generation.done and generation.shown) or generation.prefetched or generation.error:
            return
        if generation.record.finish_reason == "cancelled":
            return
        generation.prefetched = True
        uri = generation.anchor.uri
        activity = self._activity.get(uri, 0)
        self._later(options.prefetch_delay_s, self._prefetch_if_idle, generation, uri, activity)

    def _prefetch_if_idle(self, generation: Generation, uri: str, activity: int) -> None:
        if self._closed or self._activity.get(uri, 0) != activity:
            return  # typed on, asked again or closed since: the prefetch would be stale
        if any(not g.done for g in self._generations.get(uri, [])):
            return  # something newer is already running for this document
        from codespec.context.parsecheck import parse_checked

        # What follows accepting the suggestion as shown from this anchor (the check runs while its document
        # is unchanged, as for the answer).
        suggestion = parse_checked(self.postprocess(generation.text, generation.ctx), generation.ctx)
        if not suggestion:
            return
        try:
            self._start_prefetch(generation, suggestion, self._options())
        except Exception:
            logger.exception("prefetch after generation %d failed", generation.id)

    def _start_prefetch(self, parent: Generation, suggestion: str, options: ServerOptions) -> None:
        from codespec.context import Document

        a = parent.anchor
        text = a.text[: a.offset] + suggestion + a.text[a.offset :]
        offset = a.offset + len(suggestion)
        doc = Document(a.uri, a.language_id, text, version=a.version, encoding=self.encoding)
        position = doc.position_at(offset)
        ctx = self.build_context(doc, position)
        if ctx.mode == "none":
            return
        anchor = Anchor(uri=a.uri, version=a.version, text=text, offset=offset, language_id=a.language_id)
        self._start_generation("prefetch", anchor, ctx, position, options, parent=parent)

    def _later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        """A timer that may start background work (a prefetch, idle-time work), counted until it fires."""
        self._timers += 1

        def fire() -> None:
            self._timers -= 1
            callback(*args)

        asyncio.get_running_loop().call_later(delay_s, fire)

    def pending_work(self) -> int:
        """What the worker will still do without another edit or request: generations queued or running,
        idle-time work running, and timers that may start either. 0: the server stays idle until the client
        acts (a benchmark waits for it before the next play, whose CPU it would otherwise share)."""
        running = sum(not g.done for gens in self._generations.values() for g in gens)
        return running + self._timers + (self.blocks.running is not None)

    # ----- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel everything and let the worker go; never blocks on a running generation."""
        self._closed = True
        self.cancel_all()
        self.executor.shutdown(wait=False, cancel_futures=True)


def first_line(text: str) -> str:
    """Up to the end of the first line with content (a suggestion may start with a line break)."""
    match = _FIRST_LINE_DONE.search(text)
    return text[: match.end() - 1] if match else text


def encode_prompt(tokenizer: Any, prompt: str) -> list[int]:
    return list(tokenizer.encode(prompt, add_special_tokens=False))


def _recover_engine(engine: Any, exc: BaseException) -> None:
    """After a failure the KV cache may be half-written: drop it; free accelerator memory on OOM."""
    try:
        engine.reset_cache()
    except Exception:
        logger.exception("engine.reset_cache() failed")
    if "out of memory" in str(exc).lower() or isinstance(exc, MemoryError):
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass


def _line_before(anchor: Anchor) -> str:
    """The anchor's line up to the cursor: an earlier suggestion is kept with it, so that a later request on
    that line can realign it to what was typed (codespec/context/repeat.py)."""
    start = anchor.text.rfind("\n", 0, anchor.offset) + 1
    return anchor.text[start : anchor.offset]
