"""Counters behind the `codespec/stats` request: what happened to each request and each generation."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from codespec.stats import percentile

# Request outcomes (one per request, recorded when its single response is sent).
ANSWERED = "answered"  # a non-empty suggestion was returned
EMPTY = "empty"  # null / no suggestion (mode "none", nothing generated, unknown document)
SUPERSEDED = "superseded"  # a newer request or a didChange for the document made it stale -> null
CANCELLED = "cancelled"  # explicit $/cancelRequest (or shutdown) -> -32800
ERROR = "error"  # the model path raised -> error response
OUTCOMES = (ANSWERED, EMPTY, SUPERSEDED, CANCELLED, ERROR)

RECENT_REQUESTS = 64


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
    error: str | None = None

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
            "error": self.error,
        }


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
    max_forwards_after_cancel: int | None = None

    def add(self, g: GenerationRecord) -> None:
        self.finished += 1
        self.by_finish_reason[g.finish_reason] += 1
        self.prefill_tokens += g.prefill_tokens
        self.reused_tokens += g.reused_tokens
        self.new_tokens += g.new_tokens
        self.target_forwards += g.target_forwards
        self.drafted += g.drafted
        self.accepted += g.accepted
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

    def begin_request(self, record: RequestRecord) -> None:
        self.requests += 1
        self.recent.append(record)

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

    def add_generation(self, record: GenerationRecord) -> None:
        """A generation started (or, with its finish_reason set, one that already ended)."""
        self.generations_started += 1
        self.recent_generations.append(record)
        if record.finish_reason:
            self.totals.add(record)

    def finish_generation(self, record: GenerationRecord) -> None:
        """Its fields are final now: add them to the totals (once)."""
        self.totals.add(record)

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
                "maxForwardsAfterCancel": t.max_forwards_after_cancel,
                "recent": [g.to_dict() for g in generations],
            },
            "recentRequests": [r.to_dict() for r in requests],
        }
