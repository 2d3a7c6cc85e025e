"""Counters behind the `codespec/stats` request: what happened to each request and each generation."""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

# Request outcomes (one per request, recorded when its single response is sent).
ANSWERED = "answered"  # a non-empty suggestion was returned
EMPTY = "empty"  # null / no suggestion (mode "none", nothing generated, unknown document)
SUPERSEDED = "superseded"  # a newer request or a didChange for the document made it stale -> null
CANCELLED = "cancelled"  # explicit $/cancelRequest (or shutdown) -> -32800
ERROR = "error"  # the model path raised -> error response
OUTCOMES = (ANSWERED, EMPTY, SUPERSEDED, CANCELLED, ERROR)

RECENT_REQUESTS = 64


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank style percentile via statistics.quantiles; None when there is no data."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[max(0, min(98, round(q) - 1))]


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


@dataclass
class ServerStats:
    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)
    sources: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    shown: int = 0
    accepted: int = 0
    rejected: int = 0
    accepted_chars: int = 0
    generations: list[GenerationRecord] = field(default_factory=list)
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
        if outcome == ANSWERED:
            self.shown += 1

    def to_dict(self, recent: int = RECENT_REQUESTS) -> dict[str, Any]:
        """All counters; `recent` limits the per-request and per-generation lists (0: none)."""
        finished = [g for g in self.generations if g.finish_reason]
        last = max(0, min(recent, RECENT_REQUESTS))
        forwards = sum(g.target_forwards for g in finished)
        new_tokens = sum(g.new_tokens for g in finished)
        drafted = sum(g.drafted for g in finished)
        accepted_drafts = sum(g.accepted for g in finished)
        after_cancel = [g.forwards_after_cancel for g in finished if g.forwards_after_cancel is not None]
        lat = self.latencies_ms
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
                "count": len(lat),
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
                "started": len(self.generations),
                "finished": len(finished),
                "byFinishReason": dict(Counter(g.finish_reason for g in finished)),
                "prefillTokens": sum(g.prefill_tokens for g in finished),
                "reusedTokens": sum(g.reused_tokens for g in finished),
                "newTokens": new_tokens,
                "targetForwards": forwards,
                # tau: tokens produced per target forward (1.0 = no speculation win).
                "tau": (new_tokens / forwards) if forwards else None,
                "drafted": drafted,
                "draftAccepted": accepted_drafts,
                "draftAcceptanceRate": (accepted_drafts / drafted) if drafted else None,
                "maxForwardsAfterCancel": max(after_cancel) if after_cancel else None,
                "recent": [g.to_dict() for g in self.generations[len(self.generations) - last :]] if last else [],
            },
            "recentRequests": [r.to_dict() for r in list(self.recent)[len(self.recent) - last :]] if last else [],
        }
