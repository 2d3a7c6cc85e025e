"""Counters behind the `codespec/stats` request: what happened to each request and each generation."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, TextIO

from codespec.stats import percentile

# Request outcomes (one per request, recorded when its single response is sent).
ANSWERED = "answered"  # a non-empty suggestion was returned
EMPTY = "empty"  # null / no suggestion (mode "none", nothing generated, unknown document)
SUPERSEDED = "superseded"  # a newer request or a didChange for the document made it stale -> null
CANCELLED = "cancelled"  # explicit $/cancelRequest (or shutdown) -> -32800
ERROR = "error"  # the model path raised -> error response
OUTCOMES = (ANSWERED, EMPTY, SUPERSEDED, CANCELLED, ERROR)

RECENT_REQUESTS = 64

# Where the user was when a request came (set by ServerStats.begin_request):
TYPING = "typing"  # the same document, the previous request's line or the next / previous one
JUMP = "jump"  # the same document, another line (more than one away from the previous request's)
SWITCH = "switch"  # another document than the previous request's
OPEN = "open"  # the document's first request since its didOpen
CATEGORIES = (TYPING, JUMP, SWITCH, OPEN)

# Why a request got no suggestion (RequestRecord.cause; "" for a request answered with one):
DECLINED = "declined"  # the context decided "no suggestion here" (context_reason says which rule)
PENDING_QUEUED = "pending-queued"  # superseded / cancelled before the model worker took up its generation
PENDING_PREFILL = "pending-prefill"  # ... while its generation was prefilling the prompt
PENDING_DECODE = "pending-decode"  # ... while it was decoding, the suggestion not ready yet
PENDING_CONTEXT = "pending-context"  # ... before a generation was attached (models loading, context)
EMPTIED = "emptied"  # the model wrote text, post-processing left nothing past what was typed
MODEL_EMPTY = "model-empty"  # the model wrote nothing (or only whitespace)
DIVERGED = "diverged"  # the generation it was served from went elsewhere than what was typed since
CUT = "generation-cut"  # the generation ended short (cancelled, engine unavailable)
NO_DOCUMENT = "no-document"  # unknown document and other early nulls
FAILED = "error"
REQUEST_LOG_ENV = "CODESPEC_REQUEST_LOG"  # a file: each request's record appended as one JSON line
GENERATIONS_REMEMBERED = 512  # finished generations kept by id, for their requests' prefill numbers
PREFILL_WINDOW = 4096  # prefill percentiles per category are over the most recent requests

logger = logging.getLogger(__name__)


@dataclass
class RequestRecord:
    id: Any
    method: str
    uri: str
    outcome: str = ""
    latency_ms: float | None = None
    source: str = ""  # "model" (a new generation) | "typed-along" | "cache" | "prefetch" | ""
    generation: int | None = None  # the generation that served it, if any
    prefill_tokens: int | None = None
    reused_tokens: int | None = None
    text_len: int = 0
    line: int | None = None  # the request's cursor line
    category: str = ""  # TYPING | JUMP | SWITCH | OPEN (begin_request)
    phase: str = ""  # its generation's phase when it was answered or dropped: queued | prefill | decode | done
    cause: str = ""  # why no suggestion (DECLINED, PENDING_*, EMPTIED, ...); "" when it had one
    context_reason: str = ""  # the context's rule for a DECLINED request

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "method": self.method,
            "uri": self.uri,
            "outcome": self.outcome,
            "latencyMs": self.latency_ms,
            "source": self.source,
            "modelCall": self.source == "model",
            "generation": self.generation,
            "prefillTokens": self.prefill_tokens,
            "reusedTokens": self.reused_tokens,
            "textLength": self.text_len,
            "line": self.line,
            "category": self.category,
            "phase": self.phase,
            "cause": self.cause,
            "contextReason": self.context_reason,
        }


@dataclass
class GenerationRecord:
    id: int
    kind: str  # "request" | "prefetch"
    finish_reason: str = ""
    prefill_tokens: int = 0
    reused_tokens: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    # Target forwards that completed after the cancel token was set (the engine promises <= 1).
    forwards_after_cancel: int | None = None
    engine_forwards_after_cancel: int | None = None  # the engine's own count, for comparison
    drafted: int = 0
    accepted: int = 0
    # Per draft source (lookup = the prompt and the output, files, suggestions, repeat-line, realigned, model):
    # forwards that verified its drafts, and its tokens drafted and accepted.
    by_source: dict[str, list[int]] = field(default_factory=dict)  # source -> [forwards, drafted, accepted]
    drafting_off: bool = False  # no draft could pay on this machine's cost curve: decoded plain
    error: str | None = None
    phase: str = "queued"  # queued -> prefill (the worker took it up) -> decode (first text) -> done
    # Where its time went (ms): waiting for the worker, prefill, decode (of which drafting's own work).
    # The worker is busy for prefill + decode: what a request behind this one waits for.
    queued_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    draft_ms: float | None = None
    interrupted: int = 0  # forwards the cancel stopped part-way (the worker freed at once)
    # Decode forwards by the tokens in them: tokens -> [forwards, ms in all] (steps at 1, verifies above), to
    # set beside the runtime's cost curve. On the wire a list of [tokens, forwards, ms]: JSON keys that are
    # numbers do not survive every client (pygls' own renames them).
    forward_ms: dict[int, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "finishReason": self.finish_reason,
            "prefillTokens": self.prefill_tokens,
            "reusedTokens": self.reused_tokens,
            "newTokens": self.new_tokens,
            "targetForwards": self.target_forwards,
            "forwardsAfterCancel": self.forwards_after_cancel,
            "engineForwardsAfterCancel": self.engine_forwards_after_cancel,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "draftingOff": self.drafting_off,
            "error": self.error,
            "phase": self.phase,
            "queuedMs": _ms(self.queued_ms),
            "prefillMs": _ms(self.prefill_ms),
            "decodeMs": _ms(self.decode_ms),
            "draftMs": _ms(self.draft_ms),
            "interrupted": self.interrupted,
            "forwardMs": [[k, int(n), round(ms, 3)] for k, (n, ms) in sorted(self.forward_ms.items())],
        }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


LATENCY_WINDOW = 4096  # percentiles are over the most recent answered requests


@dataclass
class GenerationTotals:
    """Running sums over finished generations (kept instead of the records: bounded memory)."""

    finished: int = 0
    by_finish_reason: Counter = field(default_factory=Counter)
    prefill_tokens: int = 0
    reused_tokens: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    by_source: dict[str, list[int]] = field(default_factory=dict)  # source -> [forwards, drafted, accepted]
    drafting_off: int = 0
    max_forwards_after_cancel: int | None = None
    busy_ms: float = 0.0  # prefill + decode: the worker's time on generations
    draft_ms: float = 0.0

    def add(self, g: GenerationRecord) -> None:
        self.finished += 1
        self.by_finish_reason[g.finish_reason] += 1
        self.prefill_tokens += g.prefill_tokens
        self.reused_tokens += g.reused_tokens
        self.new_tokens += g.new_tokens
        self.target_forwards += g.target_forwards
        self.drafted += g.drafted
        self.accepted += g.accepted
        self.drafting_off += g.drafting_off
        self.busy_ms += (g.prefill_ms or 0.0) + (g.decode_ms or 0.0)
        self.draft_ms += g.draft_ms or 0.0
        for source, counts in g.by_source.items():
            total = self.by_source.setdefault(source, [0, 0, 0])
            for i, n in enumerate(counts):
                total[i] += n
        if g.forwards_after_cancel is not None:
            self.max_forwards_after_cancel = max(self.max_forwards_after_cancel or 0, g.forwards_after_cancel)


@dataclass
class ServerStats:
    """Counters for `codespec/stats`. Memory stays bounded however long the server runs: running
    totals, plus bounded windows of recent requests, generations and latencies."""

    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)
    sources: Counter = field(default_factory=Counter)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    latency_count: int = 0
    shown: int = 0
    accepted: int = 0
    rejected: int = 0
    accepted_chars: int = 0
    generations_started: int = 0
    totals: GenerationTotals = field(default_factory=GenerationTotals)
    recent_generations: deque = field(default_factory=lambda: deque(maxlen=RECENT_REQUESTS))
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_REQUESTS))
    causes: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)
    prefill_by_category: dict[str, deque] = field(
        default_factory=lambda: {c: deque(maxlen=PREFILL_WINDOW) for c in CATEGORIES}
    )
    request_log: TextIO | None = None  # each finished request's record as a JSON line (REQUEST_LOG_ENV)
    _opened: set[str] = field(default_factory=set)  # documents opened and not asked about yet
    _previous: tuple[str, int | None] | None = None  # (uri, line) of the previous request
    _live: dict[int, GenerationRecord] = field(default_factory=dict)
    _finished: OrderedDict = field(default_factory=OrderedDict)  # generation id -> its record
    _held: dict[int, list[RequestRecord]] = field(default_factory=dict)  # waiting for their generation

    def __post_init__(self) -> None:
        path = os.environ.get(REQUEST_LOG_ENV)
        if path and self.request_log is None:
            try:
                self.request_log = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
            except OSError as exc:
                logger.warning("cannot open the request log %s: %s", path, exc)

    def document_opened(self, uri: str) -> None:
        """didOpen: the document's next request is categorized OPEN."""
        self._opened.add(uri)

    def begin_request(self, record: RequestRecord) -> None:
        self.requests += 1
        self.recent.append(record)
        if record.uri in self._opened:
            self._opened.discard(record.uri)
            record.category = OPEN
        elif self._previous is not None and self._previous[0] != record.uri:
            record.category = SWITCH
        elif self._previous is not None and record.line is not None and self._previous[1] is not None \
                and abs(record.line - self._previous[1]) > 1:  # fmt: skip
            record.category = JUMP
        else:
            record.category = TYPING
        self._previous = (record.uri, record.line)
        self.categories[record.category] += 1

    def finish_request(self, record: RequestRecord, outcome: str, latency_ms: float) -> None:
        if record.outcome:  # already counted: every request is finished exactly once
            return
        record.outcome = outcome
        record.latency_ms = round(latency_ms, 3)
        self.outcomes[outcome] += 1
        if record.source:
            self.sources[record.source] += 1
        if outcome in (ANSWERED, EMPTY):
            self.latencies_ms.append(latency_ms)
            self.latency_count += 1
        if outcome == ANSWERED:
            self.shown += 1
        generation = self._generation(record.generation)
        if generation is not None and not record.phase:
            record.phase = generation.phase
        if outcome == ANSWERED:
            record.cause = ""
        elif not record.cause:
            record.cause = {
                SUPERSEDED: _pending_cause(record), CANCELLED: _pending_cause(record), ERROR: FAILED,
            }.get(outcome, NO_DOCUMENT)  # fmt: skip
        if record.cause:
            self.causes[record.cause] += 1
        if record.source == "model" and record.generation is not None and record.generation in self._live:
            self._held.setdefault(record.generation, []).append(record)  # prefill numbers come at its end
            return
        if record.source == "model" and generation is not None:
            record.prefill_tokens, record.reused_tokens = generation.prefill_tokens, generation.reused_tokens
        elif record.source:  # served from a generation already running or done: nothing to prefill
            record.prefill_tokens = record.reused_tokens = 0
        self._settle(record)

    def _generation(self, gen_id: int | None) -> GenerationRecord | None:
        if gen_id is None:
            return None
        return self._live.get(gen_id) or self._finished.get(gen_id)

    def _settle(self, record: RequestRecord) -> None:
        """The request's numbers are final: count its prefill, append it to the request log."""
        if record.prefill_tokens is not None and record.category:
            self.prefill_by_category[record.category].append(record.prefill_tokens)
        self._log(record.to_dict())

    def _log(self, entry: dict[str, Any]) -> None:
        """One line of the request log: a request's record, or {"generation": ...} for a finished generation."""
        if self.request_log is not None:
            try:
                self.request_log.write(json.dumps(entry, separators=(",", ":")) + "\n")
                self.request_log.flush()
            except (OSError, ValueError) as exc:
                logger.warning("request log: %s; no longer written", exc)
                self.request_log = None

    def add_generation(self, record: GenerationRecord) -> None:
        """A generation started (or, with its finish_reason set, one that already ended)."""
        self.generations_started += 1
        self.recent_generations.append(record)
        if record.finish_reason:
            self.totals.add(record)
            self._remember(record)
        else:
            self._live[record.id] = record

    def finish_generation(self, record: GenerationRecord) -> None:
        """Its fields are final now: add them to the totals (once)."""
        self.totals.add(record)
        record.phase = "done"
        self._log({"generation": record.to_dict()})
        self._live.pop(record.id, None)
        self._remember(record)
        for request in self._held.pop(record.id, []):
            request.prefill_tokens, request.reused_tokens = record.prefill_tokens, record.reused_tokens
            self._settle(request)

    def _remember(self, record: GenerationRecord) -> None:
        self._finished[record.id] = record
        while len(self._finished) > GENERATIONS_REMEMBERED:
            self._finished.popitem(last=False)

    def close(self) -> None:
        if self.request_log is not None:
            self.request_log.close()
            self.request_log = None

    def to_dict(self, recent: int = RECENT_REQUESTS) -> dict[str, Any]:
        """All counters; `recent` limits the per-request and per-generation lists (0: none)."""
        last = max(0, min(recent, RECENT_REQUESTS))
        t = self.totals
        lat = list(self.latencies_ms)
        generations = list(self.recent_generations)[len(self.recent_generations) - last :] if last else []
        requests = list(self.recent)[len(self.recent) - last :] if last else []
        return {
            "requests": self.requests,
            "answered": self.outcomes[ANSWERED],
            "empty": self.outcomes[EMPTY],
            "cancelled": self.outcomes[CANCELLED],
            "superseded": self.outcomes[SUPERSEDED],
            "errors": self.outcomes[ERROR],
            "pending": self.requests - sum(self.outcomes.values()),
            "typedAlongHits": self.sources["typed-along"],
            "cacheHits": self.sources["cache"],
            "prefetchHits": self.sources["prefetch"],
            "modelCalls": self.sources["model"],
            "latencyMs": {
                "count": self.latency_count,
                "window": len(lat),  # percentiles are over the last `window` answered requests
                "p50": percentile(lat, 50),
                "p90": percentile(lat, 90),
                "p99": percentile(lat, 99),
            },
            "shown": self.shown,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "acceptanceRate": (self.accepted / self.shown) if self.shown else None,
            "acceptedChars": self.accepted_chars,
            "generations": {
                "started": self.generations_started,
                "finished": t.finished,
                "byFinishReason": dict(t.by_finish_reason),
                "prefillTokens": t.prefill_tokens,
                "reusedTokens": t.reused_tokens,
                "newTokens": t.new_tokens,
                "targetForwards": t.target_forwards,
                # tau: tokens produced per target forward (1.0 = no speculation win).
                "tau": (t.new_tokens / t.target_forwards) if t.target_forwards else None,
                "drafted": t.drafted,
                "draftAccepted": t.accepted,
                "draftAcceptanceRate": (t.accepted / t.drafted) if t.drafted else None,
                # Per draft source: tokens per forward that verified its drafts ((accepted + forwards) /
                # forwards), forwards, drafted and accepted tokens.
                "bySource": {source: {"tokensPerForward": (a + f) / f if f else None, "forwards": f,
                                      "drafted": d, "accepted": a}
                             for source, (f, d, a) in sorted(t.by_source.items())},
                "draftingOff": t.drafting_off,
                "busyMs": round(t.busy_ms, 1),  # the worker's time on generations (prefill + decode)
                "draftMs": round(t.draft_ms, 1),  # of it, drafting's own work
                "maxForwardsAfterCancel": t.max_forwards_after_cancel,
                "recent": [g.to_dict() for g in generations],
            },
            "recentRequests": [r.to_dict() for r in requests],
            # why requests got no suggestion (RequestRecord.cause) and where the user was when they came
            "causes": dict(self.causes),
            "categories": dict(self.categories),
            "prefillByCategory": {
                name: {"count": len(values), "p50": percentile(list(values), 50),
                       "p90": percentile(list(values), 90), "max": max(values, default=None)}
                for name, values in self.prefill_by_category.items()
            },  # fmt: skip
        }


def _pending_cause(record: RequestRecord) -> str:
    """The cause of a request dropped before its answer: where its generation was."""
    return {"queued": PENDING_QUEUED, "prefill": PENDING_PREFILL, "decode": PENDING_DECODE,
            "done": PENDING_DECODE}.get(record.phase, PENDING_CONTEXT)  # fmt: skip
