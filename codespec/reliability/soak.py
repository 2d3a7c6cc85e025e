"""Load soak of the real `codespec serve --stdio` process: sustained typing-like load, checked for loss.

Load soak of the real `codespec serve --stdio` process (tiny model): N requests per second for
S seconds over D documents, as typing: each request follows a keystroke (`didChange`) in its
document, and a share of requests is cancelled (`$/cancelRequest`) a few milliseconds after it
was sent. Sending is time-bounded: a server that reads its input slowly (stdin is a pipe, so
writes block) gets fewer requests, and the rate it held is reported. Checked: every request is
answered (a result, null when superseded, or -32800 when cancelled), the server answers afterwards
(no deadlock), every document's text equals what was typed (nothing lost), RSS growth (< 100 MB
over the measured run, which follows an unmeasured warm-up run on other documents; the warm-up's
own growth is reported too). Reported: the rate held, latencies, cancellation latency (cancel
sent -> response) percentiles.

    python -m codespec.reliability.soak --rate 200 --seconds 30 --documents 20 [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from codespec.reliability import procinfo
from codespec.reliability.fuzz import emit_report
from codespec.reliability.rpc import (
    WAIT_S,
    NoResponse,
    ServerGone,
    StdioServer,
    did_change,
    did_open,
    document_text,
    id_key,
    inline_params,
    warm_up,
)
from codespec.stats import percentile

SOAK_OPTIONS = {"maxTokens": 16}
RSS_LIMIT_BYTES = 100 * 1024 * 1024
TYPED = "    total = sum(value for value in values if value > 0)\n    return total\n"


@dataclass
class SoakReport:
    rate: float
    seconds: float
    documents: int
    requests: int = 0
    keystrokes: int = 0
    cancels_sent: int = 0
    achieved_rate: float = 0.0
    max_send_lag_ms: float = 0.0  # how far the sender fell behind its schedule
    load_average: list[float] = field(default_factory=list)  # of the machine, when the sending ended
    outcomes: dict[str, int] = field(default_factory=dict)  # items / empty / null / cancelled / error
    unanswered: int = 0
    answered_twice: int = 0
    errors: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    cancel_latency_ms: dict[str, float] = field(default_factory=dict)
    cancelled_while_pending: int = 0
    probe_after_ok: bool = False
    documents_intact: int = 0
    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_growth_mb: float = 0.0
    server_stats: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.unanswered == 0
            and self.answered_twice == 0
            and not self.errors
            and self.probe_after_ok
            and self.documents_intact == self.documents
            and self.rss_growth_mb * 1024 * 1024 < RSS_LIMIT_BYTES
        )

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["errors"] = data["errors"][:20]
        data["ok"] = self.ok
        return data


class Sampler(threading.Thread):
    """RSS of the server every 0.2 s (the peak)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self._stop_event = pid, 0, threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            try:
                self.peak = max(self.peak, procinfo.rss_bytes(self.pid))
            except OSError:
                return

    def stop(self) -> None:
        self._stop_event.set()


def document_texts(count: int) -> list[str]:
    return [f"def function_{i}(values):\n    '''Document {i} of the soak.'''\n" for i in range(count)]


def end_of(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


def run_soak(
    server: StdioServer,
    *,
    rate: float = 200.0,
    seconds: float = 30.0,
    documents: int = 20,
    cancel_share: float = 0.2,
    seed: int = 0,
    uri_prefix: str = "file:///soak",
) -> SoakReport:
    """Drive an initialized server; the caller owns its process."""
    rng = random.Random(seed)
    report = SoakReport(rate=rate, seconds=seconds, documents=documents)
    uris = [f"{uri_prefix}/doc{i}.py" for i in range(documents)]
    texts = document_texts(documents)
    for uri, text in zip(uris, texts, strict=True):
        did_open(server, uri, text)
    typed_index = [0] * documents
    versions = [1] * documents
    report.rss_start_mb = procinfo.rss_bytes(server.pid) / 2**20
    sampler = Sampler(server.pid)
    sampler.start()

    sent: dict[str, float] = {}
    cancel_at: list[tuple[float, str, Any]] = []  # heap: (when, key, id)
    cancel_sent: dict[str, float] = {}
    started = time.perf_counter()
    for k in itertools.count():
        due = started + k / rate
        if due >= started + seconds or time.perf_counter() >= started + seconds:
            break  # time-bounded: a server that reads slowly gets fewer requests, not a longer run
        _send_due_cancels(server, cancel_at, cancel_sent)
        lag = time.perf_counter() - due
        if lag < 0:
            time.sleep(-lag)
        report.max_send_lag_ms = max(report.max_send_lag_ms, lag * 1000.0)
        doc = k % documents if rng.random() < 0.7 else rng.randrange(documents)
        # the keystroke, then the request at the new cursor
        char = TYPED[typed_index[doc] % len(TYPED)]
        typed_index[doc] += 1
        line, character = end_of(texts[doc])
        texts[doc] += char
        versions[doc] += 1
        at = {"line": line, "character": character}
        did_change(server, uris[doc], versions[doc], [{"range": {"start": at, "end": at}, "text": char}])
        report.keystrokes += 1
        line, character = end_of(texts[doc])
        msg_id = server.request("textDocument/inlineCompletion", inline_params(uris[doc], line, character, 2))
        sent[id_key(msg_id)] = time.perf_counter()
        report.requests += 1
        if rng.random() < cancel_share:
            heapq.heappush(cancel_at, (time.perf_counter() + rng.uniform(0.0, 0.02), id_key(msg_id), msg_id))
    _send_due_cancels(server, cancel_at, cancel_sent, all_of_them=True)
    send_wall = time.perf_counter() - started
    report.achieved_rate = round(report.requests / send_wall, 1)
    report.load_average = [round(x, 2) for x in os.getloadavg()]
    report.cancels_sent = len(cancel_sent)

    server.wait_until(lambda r: all(r.responses.get(k) for k in sent), WAIT_S)
    _tally(server, report, sent, cancel_sent)
    report.probe_after_ok = _probe(server, report)
    report.documents_intact = sum(
        1 for uri, text, version in zip(uris, texts, versions, strict=True)
        if _text_of(server, uri) == {"text": text, "version": version}
    )
    sampler.stop()
    report.rss_end_mb = procinfo.rss_bytes(server.pid) / 2**20
    report.rss_peak_mb = max(sampler.peak / 2**20, report.rss_end_mb)
    report.rss_growth_mb = report.rss_end_mb - report.rss_start_mb
    for name in ("rss_start_mb", "rss_peak_mb", "rss_end_mb", "rss_growth_mb"):
        setattr(report, name, round(getattr(report, name), 1))
    report.wall_s = round(time.perf_counter() - started, 2)
    for uri in uris:
        server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return report


def _send_due_cancels(server, cancel_at, cancel_sent, *, all_of_them: bool = False) -> None:
    """Send the cancels that are due (all of them, each at its time, with `all_of_them`); a request
    answered already gets none."""
    while cancel_at:
        when, key, msg_id = cancel_at[0]
        wait = when - time.perf_counter()
        if wait > 0:
            if not all_of_them:
                return
            time.sleep(wait)
        heapq.heappop(cancel_at)
        if not server.responses_for(msg_id):
            cancel_sent[key] = time.perf_counter()
            server.notify("$/cancelRequest", {"id": msg_id})


def _tally(server: StdioServer, report: SoakReport, sent: dict[str, float], cancel_sent: dict[str, float]) -> None:
    latencies, cancel_latencies = [], []
    arrival = server.received.arrival
    for key, at in sent.items():
        answers = server.received.responses.get(key, [])
        if not answers:
            report.unanswered += 1
            continue
        if len(answers) > 1:
            report.answered_twice += 1
        outcome = _outcome(answers[0])
        report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        if outcome == "error":
            report.errors.append(json.dumps(answers[0].get("error"))[:300])
        latencies.append((arrival[key] - at) * 1000.0)
        if key in cancel_sent:
            report.cancelled_while_pending += 1
            cancel_latencies.append((arrival[key] - cancel_sent[key]) * 1000.0)
    report.latency_ms = _percentiles(latencies)
    report.cancel_latency_ms = _percentiles(cancel_latencies)


def _outcome(answer: dict[str, Any]) -> str:
    if "error" in answer:
        return "cancelled" if answer["error"].get("code") == -32800 else "error"
    result = answer.get("result")
    if result is None:
        return "null"
    return "items" if result.get("items") else "empty"


def _percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {}
    return {"count": len(values), "p50": round(percentile(values, 50), 2), "p90": round(percentile(values, 90), 2),
            "p99": round(percentile(values, 99), 2), "max": round(values[-1], 2)}


def _probe(server: StdioServer, report: SoakReport) -> bool:
    try:
        stats = server.result("codespec/stats", {}, WAIT_S)
    except (NoResponse, ServerGone, RuntimeError) as exc:
        report.errors.append(f"probe after the load: {exc}")
        return False
    report.server_stats = {key: stats.get(key) for key in ("requests", "answered", "empty", "cancelled",
                                                          "superseded", "errors", "pending", "latencyMs",
                                                          "handlersInFlight")}
    report.server_stats["maxForwardsAfterCancel"] = stats.get("generations", {}).get("maxForwardsAfterCancel")
    return True


def _text_of(server: StdioServer, uri: str) -> Any:
    try:
        return document_text(server, uri)
    except (NoResponse, ServerGone, RuntimeError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codespec.reliability.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--cancel-share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0,
                        help="the same load first, on other documents, not measured (allocator and cache warm-up)")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)
    with StdioServer() as server:
        server.initialize(SOAK_OPTIONS)
        warm_up(server)
        idle_rss_mb = round(procinfo.rss_bytes(server.pid) / 2**20, 1)
        warmup = None
        if args.warmup_seconds > 0:
            warmup = run_soak(server, rate=args.rate, seconds=args.warmup_seconds, documents=args.documents,
                              cancel_share=args.cancel_share, seed=args.seed + 1, uri_prefix="file:///soak-warmup")
        report = run_soak(server, rate=args.rate, seconds=args.seconds, documents=args.documents,
                          cancel_share=args.cancel_share, seed=args.seed)
        code = server.shutdown_and_exit()
        left = procinfo.group_members(server.pid)
    data = report.to_dict()
    data["idle_rss_mb"] = idle_rss_mb
    if warmup is not None:
        data["warmup"] = {key: warmup.to_dict()[key] for key in (
            "seconds", "requests", "achieved_rate", "unanswered", "rss_start_mb", "rss_end_mb", "rss_growth_mb", "ok")}
    data["ok"] = report.ok and (warmup is None or warmup.unanswered == 0)
    data["exit_code"], data["processes_left"] = code, left
    emit_report(data, args.json)
    return 0 if data["ok"] and code == 0 and not left else 1


if __name__ == "__main__":
    sys.exit(main())
