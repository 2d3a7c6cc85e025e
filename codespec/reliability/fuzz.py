"""Byte-level fuzz of the real `codespec serve --stdio` process.

Each case is raw bytes for stdin: well-formed requests, unknown methods, wrong param types, huge
params, requests without ids, notifications with ids, invalid JSON, bad or lying Content-Length
headers, truncated frames, header garbage. A model of the server's framing (the rules of
`codespec/framing.py`: header lines, the last `Content-Length: N`, a blank line, N bytes, a restart at a
header found inside a body) tells the driver which bodies the server will see, so the
expectations are exact: every body that is a JSON-RPC 2.0 request with an int or string id must
get exactly one response, and nothing else may be answered more than once. After a case that leaves the parser mid-frame the driver sends the
bytes that finish it (filler for a body, a line end), as a client that recovers would.
After each batch the server must answer a valid request. One file for one job: the framing model, the
case generator and the driver exist only for each other (the model is how the driver knows what to expect).

    python -m codespec.reliability.fuzz --cases 10000 --seconds 120 [--edit-sequences 1000]
        [--local-sequences 2000] [--seed 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from codespec import framing
from codespec.reliability.rpc import WAIT_S, NoResponse, ServerGone, StdioServer, frame, id_key, warm_up
from codespec.stats import percentile

FUZZ_URIS = [f"file:///fuzz/doc{i}.py" for i in range(6)]
SAFE_REQUESTS = ["textDocument/inlineCompletion", "textDocument/completion", "workspace/executeCommand",
                 "codespec/stats", "codespec/documentText", "textDocument/hover", "completionItem/resolve"]
# Notifications the server handles; sent with an id they are requests, which must be answered.
NOTIFICATIONS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didClose",
                 "textDocument/didSave", "$/cancelRequest", "$/setTrace", "initialized",
                 "workspace/didChangeWatchedFiles", "window/workDoneProgress/cancel"]
# Never generated: they end the session or change its configuration, which is not what is fuzzed.
EXCLUDED = {"exit", "shutdown", "initialize", "workspace/didChangeConfiguration"}
HUGE_BYTES = 1_000_000
SERVER_OPTIONS = {"maxTokens": 8, "prefetch": False}


# ----- the server's framing, modelled ---------------------------------------------------------


class FramingModel:
    """What the server's reader (`codespec/framing.py`) makes of a byte stream, written from its rules,
    not from its code: lines end with `\\n`; a line ending in `Content-Length: N` (any case, blanks
    allowed, ASCII digits, N <= MAX_BODY) sets the length, the last such line winning; a blank line
    while a length is set starts an N-byte body; a body in which `Content-Length: N` (<= 16 blanks) + line break
    appears is abandoned and parsing restarts at that header; a header line over MAX_HEADER_LINE
    bytes without a line break keeps only its last HEADER_TAIL_KEPT bytes."""

    LINE_HEADER = re.compile(rb"(?i)content-length:[ \t]*([0-9]{1,20})[ \t]*\r?\n\Z")
    BODY_HEADER = re.compile(rb"(?i)content-length:[ \t]{0,16}[0-9]{1,20}[ \t]{0,16}\r?\n")
    MAX_BODY = 512 * 1024 * 1024
    MAX_HEADER_LINE = 64 * 1024
    HEADER_TAIL_KEPT = 256

    def __init__(self) -> None:
        self.buffer = b""
        self.length: int | None = None
        self.in_body = False

    def feed(self, data: bytes) -> list[bytes]:
        """The bodies the server will try to parse after `data`."""
        self.buffer += data
        bodies: list[bytes] = []
        while True:
            if self.in_body:
                assert self.length is not None
                header = self.BODY_HEADER.search(self.buffer, 0, self.length)
                if header:
                    self.buffer = self.buffer[header.start():]
                    self.in_body, self.length = False, None
                    continue
                if len(self.buffer) < self.length:
                    return bodies
                bodies.append(self.buffer[: self.length])
                self.buffer = self.buffer[self.length :]
                self.in_body, self.length = False, None
                continue
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) > self.MAX_HEADER_LINE:
                    self.buffer = self.buffer[-self.HEADER_TAIL_KEPT :]
                return bodies
            line, self.buffer = self.buffer[: end + 1], self.buffer[end + 1 :]
            if line in (b"\n", b"\r\n"):
                self.in_body = self.length is not None
            elif (match := self.LINE_HEADER.search(line)) and int(match.group(1)) <= self.MAX_BODY:
                self.length = int(match.group(1))

    @property
    def clean(self) -> bool:
        return not self.buffer and self.length is None and not self.in_body

    def recovery(self) -> bytes:
        """Bytes that bring the reader back to a frame boundary: filler that completes a pending
        body (spaces; the body is then whatever JSON the fragment makes), a line end, a blank line."""
        if self.in_body:
            assert self.length is not None
            return b" " * (self.length - len(self.buffer))
        return b"\r\n" if self.buffer or self.length is not None else b""


def classify(body: bytes) -> tuple[str, Any]:
    """("request", id) for a body that must get exactly one response, ("maybe", id) for an odd one
    that may get at most one, ("none", None) for anything that must get none."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return "none", None
    if not isinstance(message, dict) or "id" not in message:
        return "none", None
    msg_id = message["id"]
    strict = (
        message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and (isinstance(msg_id, str) or (isinstance(msg_id, int) and not isinstance(msg_id, bool)))
    )
    if strict:
        return "request", msg_id
    return "maybe", msg_id


# ----- cases ----------------------------------------------------------------------------------


@dataclass
class Case:
    kind: str
    data: bytes


class CaseGenerator:
    """Deterministic cases from a seed; ids are unique across the run."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        # Ids far from the client's own (small ints) and from other seeds' runs on the same server.
        self._ids = iter(range((seed % 100_000 + 1) * 1_000_000_000, 1 << 62))
        self.seed = seed
        self.kinds: list[tuple[str, float, Callable[[], bytes]]] = [
            ("valid-request", 6, self.valid_request),
            ("valid-notification", 4, self.valid_notification),
            ("unknown-method", 4, self.unknown_method),
            ("wrong-types", 8, self.wrong_types),
            ("notification-with-id", 4, self.notification_with_id),
            ("request-without-id", 4, self.request_without_id),
            ("odd-id", 3, self.odd_id),
            ("invalid-json", 6, self.invalid_json),
            ("not-an-object", 3, self.not_an_object),
            ("bad-content-length", 6, self.bad_content_length),
            ("lying-content-length", 5, self.lying_content_length),
            ("truncated-frame", 5, self.truncated_frame),
            ("header-garbage", 4, self.header_garbage),
            ("random-bytes", 3, self.random_bytes),
            ("huge-params", 0.4, self.huge_params),
            ("deep-nesting", 0.4, self.deep_nesting),
            ("several-frames", 3, self.several_frames),
        ]
        self._weights = [weight for _, weight, _ in self.kinds]

    def cases(self, count: int) -> Iterator[Case]:
        for _ in range(count):
            kind, _, make = self.rng.choices(self.kinds, weights=self._weights)[0]
            yield Case(kind, make())

    # ----- building blocks ----------------------------------------------------------------------

    def new_id(self) -> Any:
        n = next(self._ids)
        return n if self.rng.random() < 0.6 else f"f{self.seed}-{n}"

    def uri(self) -> str:
        return self.rng.choice(FUZZ_URIS)

    def position(self) -> dict[str, int]:
        return {"line": self.rng.choice([0, 1, 2, 5, 100]), "character": self.rng.choice([0, 1, 3, 8, 1000])}

    def text(self, limit: int = 60) -> str:
        alphabet = "abc xyz_()[]{}:=.,\n\r\t\"'\\#é中😀\U0001f9ea\u200b\x00"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, limit)))

    def json_value(self, depth: int = 0) -> Any:
        choice = self.rng.randint(0, 9 if depth < 3 else 6)
        if choice == 0:
            return None
        if choice == 1:
            return self.rng.choice([True, False])
        if choice == 2:
            return self.rng.choice([0, -1, 1, 2**31, -(2**63), 2**64, 7])
        if choice == 3:
            return self.rng.choice([0.5, -1e308, 1e-300, 3.0])
        if choice in (4, 5, 6):
            return self.text(20)
        if choice in (7, 8):
            return [self.json_value(depth + 1) for _ in range(self.rng.randint(0, 4))]
        keys = ["uri", "textDocument", "position", "line", "character", "context", "triggerKind", "text",
                "version", "contentChanges", "range", "start", "end", "id", "command", "arguments", "value"]
        return {self.rng.choice(keys): self.json_value(depth + 1) for _ in range(self.rng.randint(0, 4))}

    def good_params(self, method: str) -> Any:
        uri = self.uri()
        if method in ("textDocument/inlineCompletion", "textDocument/completion", "textDocument/hover"):
            params: dict[str, Any] = {"textDocument": {"uri": uri}, "position": self.position()}
            if method == "textDocument/inlineCompletion":
                params["context"] = {"triggerKind": self.rng.choice([1, 2])}
            return params
        if method == "workspace/executeCommand":
            return {"command": self.rng.choice(["codespec.accept", "codespec.reject", "nope"]),
                    "arguments": [str(self.rng.randint(0, 9))]}
        if method == "codespec/documentText":
            return {"uri": uri}
        if method == "completionItem/resolve":
            return {"label": "x"}
        if method == "textDocument/didOpen":
            return {"textDocument": {"uri": uri, "languageId": self.rng.choice(["python", "rust", "", "x"]),
                                     "version": self.rng.randint(0, 9), "text": self.text()}}
        if method == "textDocument/didChange":
            start = self.position()
            change: dict[str, Any] = {"text": self.text(10)}
            if self.rng.random() < 0.8:
                change["range"] = {"start": start, "end": self.position()}
            return {"textDocument": {"uri": uri, "version": self.rng.randint(0, 99)}, "contentChanges": [change]}
        if method in ("textDocument/didClose", "textDocument/didSave"):
            return {"textDocument": {"uri": uri}}
        if method == "$/cancelRequest":
            return {"id": self.rng.randint(0, 50)}
        if method == "$/setTrace":
            return {"value": self.rng.choice(["off", "messages", "verbose"])}
        if method == "workspace/didChangeWatchedFiles":
            return {"changes": [{"uri": uri, "type": 2}]}
        if method == "window/workDoneProgress/cancel":
            return {"token": "t"}
        return {}

    def mutate(self, value: Any) -> Any:
        """Replace one leaf or subtree by a value of another type."""
        if isinstance(value, dict) and value and self.rng.random() < 0.7:
            key = self.rng.choice(list(value))
            copy = dict(value)
            if self.rng.random() < 0.2:
                del copy[key]
            else:
                copy[key] = self.mutate(value[key])
            return copy
        if isinstance(value, list) and value and self.rng.random() < 0.7:
            copy = list(value)
            index = self.rng.randrange(len(copy))
            copy[index] = self.mutate(copy[index])
            return copy
        return self.json_value()

    @staticmethod
    def body_frame(body: bytes) -> bytes:
        return framing.frame(body)

    def message(self, method: str, params: Any, msg_id: Any = None, with_id: bool = True) -> bytes:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if with_id:
            message["id"] = self.new_id() if msg_id is None else msg_id
        if params is not None or self.rng.random() < 0.9:
            message["params"] = params
        return frame(message)

    # ----- kinds ----------------------------------------------------------------------------------

    def valid_request(self) -> bytes:
        method = self.rng.choice(SAFE_REQUESTS)
        return self.message(method, self.good_params(method))

    def valid_notification(self) -> bytes:
        method = self.rng.choice(NOTIFICATIONS[:5])
        return self.message(method, self.good_params(method), with_id=False)

    def unknown_method(self) -> bytes:
        method = self.rng.choice(["", "foo", "textDocument/foo", "$/x", "codespec/", "codespec/nope",
                                  "workspace/executeCommandX", "é/😀", "a" * 300])
        return self.message(method, self.json_value())

    def wrong_types(self) -> bytes:
        method = self.rng.choice(SAFE_REQUESTS + NOTIFICATIONS)
        params = self.mutate(self.good_params(method))
        return self.message(method, params, with_id=method in SAFE_REQUESTS or self.rng.random() < 0.3)

    def notification_with_id(self) -> bytes:
        method = self.rng.choice(NOTIFICATIONS)
        return self.message(method, self.good_params(method))

    def request_without_id(self) -> bytes:
        method = self.rng.choice(SAFE_REQUESTS)
        return self.message(method, self.good_params(method), with_id=False)

    def odd_id(self) -> bytes:
        n = next(self._ids)  # odd ids are unique too (but null and true), so duplicates show
        odd = self.rng.choice([None, n + 0.5, True, [n], {"a": n}, -n, 2**70 + n, f"é😀{n}"])
        message: dict[str, Any] = {"jsonrpc": self.rng.choice(["2.0", "2.0", "1.0", 2]), "id": odd,
                                   "method": "codespec/stats", "params": {}}
        return frame(message)

    def invalid_json(self) -> bytes:
        good = json.dumps({"jsonrpc": "2.0", "id": self.new_id(), "method": "codespec/stats", "params": {}})
        body = self.rng.choice([
            good[: self.rng.randint(0, len(good) - 1)].encode(),  # a truncated object, honest length
            good.replace('"', "'").encode(),
            good.encode() + b",",
            b"{" + self.text(30).encode("utf-8", "surrogatepass") + b"}",
            b"\xff\xfe\xfa" + good.encode(),
            good.encode()[:10] + b"\x00" + good.encode()[10:],
            b"NaN", b"", b"   ", b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": }}',
            "\ufeff".encode() + good.encode(),
        ])
        return self.body_frame(body) if body else b"Content-Length: 0\r\n\r\n"

    def not_an_object(self) -> bytes:
        value = self.rng.choice([[], [{"jsonrpc": "2.0", "id": 1, "method": "codespec/stats"}], 1, "s", None,
                                 {"jsonrpc": "2.0"}, {"id": self.new_id()}, {"result": 1, "id": 424242}])
        return frame(value)

    def bad_content_length(self) -> bytes:
        body = json.dumps({"jsonrpc": "2.0", "id": self.new_id(), "method": "codespec/stats", "params": {}}).encode()
        header = self.rng.choice([
            b"Content-Length: -%d\r\n" % len(body), b"Content-Length: %d.0\r\n" % len(body),
            b"Content-Length: 0x%x\r\n" % len(body), b"content-length: %d\r\n" % len(body),
            b"Content-Length:%d\r\n" % len(body), b"Content-Length: %d \r\n" % len(body),
            b"Content-Length: \r\n", b"Content-Length: abc\r\n", b"Content-Length: %d\n" % len(body),
            b"Content-Length: 0\r\n", b"Content-Length: \xd9\xa3\r\n",
        ])
        return header + b"\r\n" + body

    def lying_content_length(self) -> bytes:
        body = json.dumps({"jsonrpc": "2.0", "id": self.new_id(), "method": "codespec/stats", "params": {}}).encode()
        delta = self.rng.choice([-len(body) + 1, -5, -1, 1, 5, 300, 4096])
        return b"Content-Length: %d\r\n\r\n" % max(1, len(body) + delta) + body

    def truncated_frame(self) -> bytes:
        method = self.rng.choice(SAFE_REQUESTS)
        whole = self.message(method, self.good_params(method))
        return whole[: self.rng.randint(1, len(whole) - 1)]

    def header_garbage(self) -> bytes:
        body = json.dumps({"jsonrpc": "2.0", "id": self.new_id(), "method": "codespec/stats", "params": {}}).encode()
        extra = self.rng.choice([
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n", b"X: y\r\n", b"garbage\r\n",
            b"Content-Length: 3\r\nContent-Length: 9999\r\n", b": \r\n", b"\x00\x01\r\n", b"\t\r\n",
        ])
        order = self.rng.random() < 0.5
        length = b"Content-Length: %d\r\n" % len(body)
        return (extra + length if order else length + extra) + b"\r\n" + body

    def random_bytes(self) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 200)))

    def huge_params(self) -> bytes:
        big = "x" * self.rng.randint(HUGE_BYTES // 2, HUGE_BYTES)
        which = self.rng.randint(0, 2)
        if which == 0:
            return self.message("codespec/nope", {"blob": big})
        if which == 1:
            return self.message("textDocument/didOpen", {"textDocument": {
                "uri": self.uri(), "languageId": "python", "version": 1, "text": big}}, with_id=False)
        return self.message("textDocument/inlineCompletion", {
            "textDocument": {"uri": self.uri()}, "position": {"line": 0, "character": 1},
            "context": {"triggerKind": 1}, "extra": big})

    def deep_nesting(self) -> bytes:
        depth = self.rng.choice([100, 5000, 100_000])
        inner = b"[" * depth + b"]" * depth
        return self.body_frame(b'{"jsonrpc": "2.0", "id": %d, "method": "codespec/stats", "params": '
                               % next(self._ids) + inner + b"}")

    def several_frames(self) -> bytes:
        parts = [self.valid_request(), self.valid_notification(), self.request_without_id()]
        self.rng.shuffle(parts)
        return b"".join(parts[: self.rng.randint(2, 3)])


# ----- the driver -----------------------------------------------------------------------------


@dataclass
class FuzzReport:
    seed: int
    cases: int = 0
    bytes_sent: int = 0
    bodies_parsed: int = 0
    requests: int = 0  # bodies that must get exactly one response
    answered_once: int = 0
    missing: list[Any] = field(default_factory=list)
    missing_by_kind: dict[str, int] = field(default_factory=dict)
    missing_examples: list[str] = field(default_factory=list)
    request_bodies: dict[str, bytes] = field(default_factory=dict, repr=False)  # id key -> body (truncated)
    sent_at: dict[str, float] = field(default_factory=dict, repr=False)
    earlier: set[str] = field(default_factory=set, repr=False)
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50 / p99 / max, send to response
    slowest: str = ""
    duplicated: list[Any] = field(default_factory=list)
    unexpected: list[Any] = field(default_factory=list)  # answers to ids never sent
    odd_answered_twice: list[Any] = field(default_factory=list)
    batches: int = 0
    probes_ok: int = 0
    probes_failed: int = 0
    violations: list[str] = field(default_factory=list)  # bad bytes on the server's stdout
    kinds: dict[str, int] = field(default_factory=dict)
    server_alive: bool = True
    seconds: float = 0.0
    stopped_by: str = "cases"
    first_failure: str = ""

    @property
    def ok(self) -> bool:
        return (
            not (self.missing or self.duplicated or self.unexpected or self.odd_answered_twice or self.violations)
            and self.probes_failed == 0
            and self.server_alive
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("missing", "duplicated", "unexpected", "odd_answered_twice", "violations"):
            data[name] = data[name][:20]
        data.pop("request_bodies")
        data.pop("sent_at")
        data.pop("earlier")
        data["ok"] = self.ok
        return data


def run_fuzz(
    cases: int,
    *,
    seconds: float | None = None,
    seed: int = 1,
    batch: int = 100,
    server: StdioServer | None = None,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Fuzz one server process (started here unless given) with `cases` cases or for `seconds`."""
    own = server is None
    server = server or StdioServer()
    report = FuzzReport(seed=seed)
    started = time.perf_counter()
    try:
        if own:
            server.initialize(SERVER_OPTIONS)
            warm_up(server)
        _drive(server, report, cases, seconds, seed, batch, progress, started)
    finally:
        report.seconds = round(time.perf_counter() - started, 2)
        if own:
            server.close()
    return report


def _drive(server, report, cases, seconds, seed, batch, progress, started) -> None:
    model = FramingModel()
    must: dict[str, str] = {}  # id key -> the case kind that sent it
    maybe: set[str] = set()
    probes: set[str] = set()
    report.earlier = set(server.received.responses)  # answers from before this run (initialize, ...)
    generator = CaseGenerator(seed)
    pending: list[Case] = []
    for case in generator.cases(cases):
        pending.append(case)
        if len(pending) >= batch:
            if not _run_batch(server, report, model, pending, must, maybe, probes):
                return
            pending = []
            if progress:
                progress(report)
            if seconds is not None and time.perf_counter() - started > seconds:
                report.stopped_by = "seconds"
                break
    if pending and not _run_batch(server, report, model, pending, must, maybe, probes):
        return
    _final_check(server, report, must, maybe, probes)


def _run_batch(server, report, model, batch, must, maybe, probes) -> bool:
    for case in batch:
        report.cases += 1
        report.kinds[case.kind] = report.kinds.get(case.kind, 0) + 1
        _send(server, report, model, case.data, must, maybe, kind=case.kind)
        while not model.clean:
            _send(server, report, model, model.recovery(), must, maybe, kind=case.kind)
    report.batches += 1
    probe_id = f"probe-{report.seed}-{report.batches}"
    probes.add(id_key(probe_id))
    _send(server, report, model, frame({"jsonrpc": "2.0", "id": probe_id, "method": "codespec/stats",
                                        "params": {}}), must, maybe, count=False)
    try:
        answer = server.wait_response(probe_id, WAIT_S)
        good = isinstance(answer.get("result"), dict) and "requests" in answer["result"]
    except (NoResponse, ServerGone) as exc:
        good = False
        report.first_failure = report.first_failure or f"batch {report.batches}: {exc}"
    if good:
        report.probes_ok += 1
        return True
    report.probes_failed += 1
    report.server_alive = server.proc.poll() is None
    report.first_failure = report.first_failure or f"batch {report.batches}: probe answered {answer}"
    _final_check(server, report, must, maybe, probes, wait=1.0)
    return False


def _send(server, report, model, data, must, maybe, count=True, kind="") -> None:
    bodies = report.request_bodies
    for body in model.feed(data):
        if count:
            report.bodies_parsed += 1
        expectation, msg_id = classify(body)
        if expectation == "request" and count:
            must[id_key(msg_id)] = kind
            bodies[id_key(msg_id)] = body[:400]
            report.sent_at[id_key(msg_id)] = time.perf_counter()
            report.requests += 1
        elif expectation == "maybe":
            maybe.add(id_key(msg_id))
    try:
        server.send_bytes(data)
        report.bytes_sent += len(data)
    except (BrokenPipeError, OSError):
        report.server_alive = False


def _final_check(server, report, must, maybe, probes, wait: float = 10.0) -> None:
    server.wait_until(lambda received: all(received.responses.get(k) for k in must), wait)
    time.sleep(0.3)  # a late duplicate would arrive now
    answered, report.violations = server.answer_counts()
    report.missing = [json.loads(k) for k in sorted(must) if not answered.get(k)]
    report.missing_by_kind = {}
    for key in (k for k in must if not answered.get(k)):
        report.missing_by_kind[must[key]] = report.missing_by_kind.get(must[key], 0) + 1
        if len(report.missing_examples) < 5:
            report.missing_examples.append(report.request_bodies[key].decode("utf-8", "replace"))
    _latency(report, server, must)
    report.duplicated = [json.loads(k) for k in sorted(set(must) | probes) if answered.get(k, 0) > 1]
    report.answered_once = sum(1 for k in must if answered.get(k) == 1)
    # ids null and true repeat across cases: several answers to them are not duplicates
    report.odd_answered_twice = [json.loads(k) for k in sorted(maybe - {"null", "true"}) if answered.get(k, 0) > 1]
    known = set(must) | maybe | probes | report.earlier
    report.unexpected = [json.loads(k) for k in sorted(answered) if k not in known]
    report.server_alive = report.server_alive and server.proc.poll() is None


def _latency(report: FuzzReport, server: StdioServer, must: dict[str, str]) -> None:
    arrival = server.received.arrival
    pairs = sorted((arrival[k] - report.sent_at[k], k) for k in must if k in arrival and k in report.sent_at)
    if not pairs:
        return
    values = [seconds * 1000.0 for seconds, _ in pairs]
    report.latency_ms = {"p50": round(percentile(values, 50), 1), "p99": round(percentile(values, 99), 1),
                         "max": round(values[-1], 1)}
    slowest = pairs[-1][1]
    report.slowest = f"{must[slowest]}: {report.request_bodies[slowest][:160].decode('utf-8', 'replace')}"


def emit_report(data: dict[str, Any], json_path: str | None) -> None:
    """A driver's report: printed, and written to `json_path` when given."""
    text = json.dumps(data, indent=2)
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as out:
            out.write(text + "\n")
    print(text)


def main(argv: list[str] | None = None) -> int:
    from codespec.reliability.edits import run_edit_sequences

    parser = argparse.ArgumentParser(prog="python -m codespec.reliability.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=None, help="stop the byte fuzz after this long (at a batch end)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100, help="cases between two health probes")
    parser.add_argument("--edit-sequences", type=int, default=0, help="then this many edit sequences through the server")
    parser.add_argument("--local-sequences", type=int, default=0, help="and this many against the in-process Document")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)

    def show(report: FuzzReport) -> None:
        print(f"\rfuzz: {report.cases} cases, {report.requests} requests, {report.probes_ok} probes ok",
              end="", file=sys.stderr, flush=True)

    with StdioServer() as server:
        server.initialize(SERVER_OPTIONS)
        warm_up(server)
        report = run_fuzz(args.cases, seconds=args.seconds, seed=args.seed, batch=args.batch, server=server,
                          progress=show)
        print(file=sys.stderr)
        data: dict[str, Any] = {"bytes": report.to_dict()}
        ok = report.ok
        if args.edit_sequences and report.server_alive:
            edits = run_edit_sequences(server, args.edit_sequences, seed=args.seed)
            data["edits_server"] = edits.to_dict()
            ok = ok and edits.ok
        data["exit_code"] = server.shutdown_and_exit()
        ok = ok and data["exit_code"] == 0
    if args.local_sequences:
        local = run_edit_sequences(None, args.local_sequences, seed=args.seed)
        data["edits_local"] = local.to_dict()
        ok = ok and local.ok
    data["ok"] = ok
    emit_report(data, args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
