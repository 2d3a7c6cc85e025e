"""The llama.vim column of `codespec bench replay`: sessions replayed against llama.cpp's own server.

The comparison column of `codespec bench replay`: recorded edit sessions replayed against a local llama-server
the way llama.vim (ggml-org/llama.vim, autoload/llama.vim) drives it, so that the pause figures compare
codespec with the editor plugin users run today on the same GGUF.

What is reproduced of llama.vim's auto-FIM (its defaults):
- each cursor move in insert mode (CursorMovedI; every inline request of the session) first hides the hint
  and tries its response cache (the exact context, or a context up to 128 characters back whose cached
  completion starts with what was typed since), then asks for a FIM;
- at most one /infill request at a time: a FIM asked while one is in flight is retried 100 ms later (one
  timer, restarted by every newer ask), never cancelled; no other debounce;
- the request: `input_prefix` = up to 256 lines above the cursor line, `prompt` = the cursor line before
  the cursor (empty on a whitespace-only line), `input_suffix` = the rest of the cursor line and up to 64
  lines below, `input_extra` = the ring buffer of chunks, `n_predict` 128, `n_indent`, top-k 40 / top-p
  0.9 / infill samplers, `cache_prompt`, `t_max_prompt_ms` 500 and `t_max_predict_ms` 250 (1000 for the
  speculative follow-up), `id_slot` 0; no FIM when more than 8 characters follow the cursor;
- a response is cached under its context's hashes and rendered at the *current* cursor through that cache,
  unless an acceptable hint is already shown; a rendered hint starts the speculative FIM for the text as if
  accepted (its answer fills the cache for typing along);
- the render's trimming (trailing empty lines, repeats of the suffix or of the next lines, leading
  whitespace on a blank line) decides what is shown;
- the ring buffer: a chunk of each document as it opens (BufEnter, cursor on line 1), the far prefix and
  suffix chunks when the cursor moved more than 32 lines, eviction of similar chunks, and the 1 s ring
  update that moves a queued chunk in (outside insert mode or after 3 s without a move) and sends its
  n_predict 0 request to warm the cache.

What is not: yanks, saves and buffer switches (sessions carry none), the instruct mode, the info line,
accepting (the replay judges the shown text against what was typed instead), vim's byte-indexed strings
(here characters). One ReplayedRequest per inline request of the session (one per cursor state, as the LSP
columns): its answer is the first acceptable hint rendered for that cursor state, with the time since the
keystroke, so that codespec.sessions.metrics' pause figures apply unchanged; a state that never got one is
`cancelled` (superseded), or `null` when only an empty hint came.

One file for one job: a port of one plugin's client (context, ring buffer, response cache, render, and the
driver that replays sessions through them), read side by side with autoload/llama.vim.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from codespec.errors import CodespecError
from codespec.sessions.format import DID_CHANGE, DID_CLOSE, DID_OPEN, INLINE_COMPLETION, DocumentSet, Session
from codespec.sessions.replay import ReplayedRequest, ReplayResult, judge, keystroke_gaps_ms

LABEL = "llama-vim"
# llama-server flags of llama.cpp's `--fim-qwen-1.5b-default` preset, the server llama.vim's README runs
# (except the model download and --ctx-size 0: the context is set by LlamaServer).
SERVER_ARGS = ("-ub", "1024", "-b", "1024", "--cache-reuse", "256")
RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]
_WORD_SPLIT = re.compile(r"[^0-9A-Za-z_]+")  # vim's \W+ (ASCII)
_BLANK = re.compile(r"^\s*$")
HASH_MARK = "Î"  # llama.vim's separator between the prefix+middle and the suffix in its cache keys


@dataclass
class LlamaVimConfig:
    """llama.vim's defaults (g:llama_config) that the FIM path uses."""

    n_prefix: int = 256
    n_suffix: int = 64
    n_predict: int = 128
    t_max_prompt_ms: int = 500  # sent, but this llama-server ignores it (not implemented there either)
    t_max_predict_ms: int = 1000  # the speculative follow-up's limit
    t_max_predict_first_ms: int = 250  # "the first request is quick"
    max_line_suffix: int = 8
    max_cache_keys: int = 250
    ring_n_chunks: int = 16
    ring_chunk_size: int = 64
    ring_scope: int = 1024
    ring_update_ms: float = 1000.0
    retry_ms: float = 100.0  # the timer that retries a FIM asked while another is in flight
    idle_for_ring_s: float = 3.0  # the ring update runs in insert mode only after this long without a move
    speculative: bool = True


# ----------------------------------------------------------------------------------------------
# The pieces of a request, as pure functions of the buffer


def vim_lines(text: str) -> list[str]:
    """The buffer's lines as vim holds them: a final line break ends the last line rather than
    starting an empty one."""
    lines = re.split(r"\r\n|\r|\n", text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def getline(lines: list[str], first: int, last: int) -> list[str]:
    """vim's getline(first, last), 1-based and inclusive; empty when first > last."""
    first = max(first, 1)
    return lines[first - 1 : last] if first <= last else []


@dataclass
class LocalContext:
    prefix: str
    middle: str
    suffix: str
    indent: int
    line_cur: str
    line_cur_prefix: str
    line_cur_suffix: str

    def key(self) -> str:
        return self.prefix + self.middle + HASH_MARK + self.suffix


def local_context(lines: list[str], pos_x: int, pos_y: int, config: LlamaVimConfig,
                  prev: list[str] | None = None, indent_last: int = -1) -> LocalContext:  # fmt: skip
    """llama.vim's local context at (pos_x characters into line pos_y, 1-based); with `prev` (a shown
    completion) as if it had been accepted."""
    max_y = len(lines)
    line_at = lines[pos_y - 1] if 0 < pos_y <= max_y else ""
    lines_suffix = getline(lines, pos_y + 1, min(max_y, pos_y + config.n_suffix))
    if not prev:
        line_cur = line_at
        line_cur_prefix, line_cur_suffix = line_cur[:pos_x], line_cur[pos_x:]
        lines_prefix = getline(lines, max(1, pos_y - config.n_prefix), pos_y - 1)
        if _BLANK.match(line_cur):  # a blank line: the model writes the indentation itself
            indent, line_cur_prefix, line_cur_suffix = 0, "", ""
        else:
            indent = len(line_cur) - len(line_cur.lstrip())
    else:
        line_cur = line_at + prev[0] if len(prev) == 1 else prev[-1]
        line_cur_prefix, line_cur_suffix = line_cur, ""
        lines_prefix = getline(lines, max(1, pos_y - config.n_prefix + len(prev) - 1), pos_y - 1)
        if len(prev) > 1:
            lines_prefix = [*lines_prefix, line_at + prev[0], *prev[1:-1]]
        indent = indent_last
    return LocalContext(
        prefix="\n".join(lines_prefix) + "\n",
        middle=line_cur_prefix,
        suffix=line_cur_suffix + "\n" + "\n".join(lines_suffix) + "\n",
        indent=indent,
        line_cur=line_cur,
        line_cur_prefix=line_cur_prefix,
        line_cur_suffix=line_cur_suffix,
    )


def context_keys(ctx: LocalContext) -> list[str]:
    """The cache keys a response is stored under: the context, and the same with up to 3 leading prefix
    lines dropped (so that it still serves after scrolling a little)."""
    keys = [ctx.key()]
    trimmed = ctx.prefix
    for _ in range(3):
        trimmed = trimmed.split("\n", 1)[1] if "\n" in trimmed else ""
        if not trimmed:
            break
        keys.append(trimmed + ctx.middle + HASH_MARK + ctx.suffix)
    return keys


def infill_request(ctx: LocalContext, extra: list[dict[str, Any]], config: LlamaVimConfig,
                   t_max_predict_ms: int) -> dict[str, Any]:  # fmt: skip
    """The /infill body llama.vim sends for a FIM."""
    return {
        "id_slot": 0,
        "input_prefix": ctx.prefix,
        "input_suffix": ctx.suffix,
        "input_extra": extra,
        "prompt": ctx.middle,
        "n_predict": config.n_predict,
        "stop": [],
        "n_indent": ctx.indent,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": config.t_max_prompt_ms,
        "t_max_predict_ms": t_max_predict_ms,
        "response_fields": list(RESPONSE_FIELDS),
    }


def ring_update_request(extra: list[dict[str, Any]]) -> dict[str, Any]:
    """The n_predict 0 /infill llama.vim sends when a chunk enters the ring: it only fills the KV cache."""
    return {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }


def chunk_sim(c0: list[str], c1: list[str]) -> float:
    """llama.vim's similarity of two chunks: 2 * shared words / all words (1: alike, 0: nothing shared)."""
    tokens0 = [t for t in _WORD_SPLIT.split("\n".join(c0)) if t]
    tokens1 = [t for t in _WORD_SPLIT.split("\n".join(c1)) if t]
    if not tokens0 and not tokens1:
        return 1.0
    seen = set(tokens0)
    return 2.0 * sum(t in seen for t in tokens1) / (len(tokens0) + len(tokens1))


@dataclass
class Chunk:
    data: list[str]
    text: str
    time: list[int]  # vim's reltime(): [seconds, microseconds]; the server ignores it
    filename: str


@dataclass
class RingBuffer:
    """llama.vim's extra context: chunks queued as they are picked, moved into the ring by the update."""

    config: LlamaVimConfig
    rng: random.Random
    chunks: list[Chunk] = field(default_factory=list)
    queued: list[Chunk] = field(default_factory=list)
    evicted: int = 0

    def _rand(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def window(self, text: list[str]) -> list[str]:
        """A random run of chunk_size/2 + 1 lines of `text` (vim's inclusive slice)."""
        half = self.config.ring_chunk_size // 2
        l0 = self._rand(0, max(0, len(text) - half))
        return text[l0 : min(l0 + half, len(text)) + 1]

    def pick(self, text: list[str], filename: str, now: float, *, do_evict: bool) -> None:
        if self.config.ring_n_chunks <= 0 or len(text) < 3:
            return
        chunk = list(text) if len(text) + 1 < self.config.ring_chunk_size else self.window(text)
        if any(c.data == chunk for c in self.chunks) or any(c.data == chunk for c in self.queued):
            return
        for pool in (self.queued, self.chunks):
            for i in range(len(pool) - 1, 0, -1):  # llama.vim's loop never reaches index 0
                if chunk_sim(pool[i].data, chunk) > 0.9:
                    if not do_evict:
                        return
                    del pool[i]
                    self.evicted += 1
        if len(self.queued) == 16:
            self.queued.pop(0)
        seconds = int(now)
        self.queued.append(
            Chunk(chunk, "\n".join(chunk) + "\n", [seconds, int((now - seconds) * 1e6)], filename)
        )

    def evict_similar(self, chunk: list[str]) -> None:
        """Before each FIM: chunks much like the text around the cursor go (they make the model repeat)."""
        for i in range(len(self.chunks) - 1, 0, -1):
            if chunk_sim(self.chunks[i].data, chunk) > 0.5:
                del self.chunks[i]
                self.evicted += 1

    def update(self) -> bool:
        """Move the first queued chunk into the ring; True when one moved."""
        if not self.queued:
            return False
        if len(self.chunks) == self.config.ring_n_chunks:
            self.chunks.pop(0)
        self.chunks.append(self.queued.pop(0))
        return True

    def extra(self) -> list[dict[str, Any]]:
        return [{"text": c.text, "time": c.time, "filename": c.filename} for c in self.chunks]


class ResponseCache:
    """llama.vim's LRU of responses by context key."""

    def __init__(self, size: int) -> None:
        self.size, self.data = size, OrderedDict[str, str]()

    def get(self, key: str) -> str | None:
        if key not in self.data:
            return None
        self.data.move_to_end(key)
        return self.data[key]

    def insert(self, key: str, content: str) -> None:
        if key not in self.data and len(self.data) > self.size - 1:
            self.data.popitem(last=False)
        self.data[key] = content
        self.data.move_to_end(key)


def cached_completion(cache: ResponseCache, ctx: LocalContext) -> str | None:
    """What fim_try_hint finds: the completion cached for this context, or one cached up to 128 characters
    back whose text starts with what was typed since, less that start."""
    found = cache.get(ctx.key())
    if found is not None:
        return found
    typed_from = ctx.prefix + ctx.middle
    best = 0
    for i in range(128):
        if i + 1 > len(typed_from):
            break
        removed = typed_from[-(1 + i) :]
        cached = cache.get(typed_from[: -(1 + i)] + HASH_MARK + ctx.suffix)
        if not cached or cached[: i + 1] != removed:
            continue
        rest = cached[i + 1 :]
        if rest:
            if found is None:  # as llama.vim: the first match, then any later one longer than `best`
                found = rest
            elif len(rest) > best:
                best, found = len(rest), rest
    return found


@dataclass
class Hint:
    content: list[str]  # as llama.vim keeps it: the cursor line's rest appended to the last line
    can_accept: bool
    shown: str  # the text inserted at the cursor (what the replay judges)


def render(content: str, lines: list[str], pos_x: int, pos_y: int) -> Hint:
    """fim_render's decisions: the hint llama.vim shows for a completion at (pos_x, pos_y 1-based)."""
    parts = content.split("\n")
    while parts and parts[-1] == "":
        parts.pop()
    can_accept = True
    if not parts:
        parts, can_accept = [""], False
    max_y = len(lines)
    line_cur = lines[pos_y - 1] if 0 < pos_y <= max_y else ""
    if _BLANK.match(line_cur):  # a blank line: the suggestion's own indentation replaces it
        lead = min(len(parts[0]) - len(parts[0].lstrip()), len(line_cur))
        line_cur, parts[0] = parts[0][:lead], parts[0][lead:]
    line_prefix, line_suffix = line_cur[:pos_x], line_cur[pos_x:]
    if len(parts) == 1 and parts[0] == "":
        parts = [""]
    if len(parts) > 1 and parts[0] == "" and parts[1:] == getline(lines, pos_y + 1, pos_y + len(parts) - 1):
        parts = [""]
    if len(parts) == 1 and parts[0] == line_suffix:
        parts = [""]
    cmp_y = pos_y + 1
    while cmp_y < max_y and _BLANK.match(getline(lines, cmp_y, cmp_y)[0]):
        cmp_y += 1
    next_line = "".join(getline(lines, cmp_y, cmp_y))
    if line_prefix + parts[0] == next_line:  # the suggestion repeats what follows
        after = "".join(getline(lines, cmp_y + 1, cmp_y + 1))
        if len(parts) == 1:
            parts = [""]
        elif len(parts) == 2 and parts[-1] == after[: len(parts[-1])]:
            parts = [""]
        elif len(parts) > 2 and parts[1:] == getline(lines, cmp_y + 1, cmp_y + len(parts) - 1):
            parts = [""]
    shown = "\n".join(parts)
    parts[-1] += line_suffix
    if _BLANK.match("\n".join(parts)):
        can_accept = False
    return Hint(parts, can_accept, shown)


# ----------------------------------------------------------------------------------------------
# The replay


@dataclass
class InfillStats:
    """What llama-server did, over a variant's plays (in the summary as server_stats)."""

    fim_requests: int = 0
    speculative_requests: int = 0
    ring_requests: int = 0
    retries: int = 0  # FIMs deferred by the 100 ms timer because one was in flight
    cache_hits: int = 0  # cursor states answered from llama.vim's own cache at the keystroke
    skipped_line_suffix: int = 0
    errors: int = 0
    prompt_n: list[int] = field(default_factory=list)
    tokens_cached: list[int] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    evicted_chunks: int = 0

    def to_json(self) -> dict[str, Any]:
        from codespec.stats import percentile

        return {
            "fim_requests": self.fim_requests,
            "speculative_requests": self.speculative_requests,
            "ring_requests": self.ring_requests,
            "retries": self.retries,
            "cache_hits": self.cache_hits,
            "skipped_line_suffix": self.skipped_line_suffix,
            "errors": self.errors,
            "evicted_chunks": self.evicted_chunks,
            "prompt_n_p50": percentile(self.prompt_n, 50),
            "prompt_n_p90": percentile(self.prompt_n, 90),
            "tokens_cached_p50": percentile(self.tokens_cached, 50),
            "infill_latency_ms_p50": percentile(self.latency_ms, 50),
            "infill_latency_ms_p90": percentile(self.latency_ms, 90),
        }


class LlamaVimReplay:
    """Plays sessions against a llama-server at `url` as llama.vim would, one after another, filling
    `result` (records labelled `label`). `play` is a bench Variant's play."""

    def __init__(self, url: str, result: ReplayResult, *, speed: float | None = 1.0, label: str = LABEL,
                 config: LlamaVimConfig | None = None, drain_timeout_s: float = 120.0,
                 seed: int = 0) -> None:  # fmt: skip
        self.url, self.result, self.speed, self.label = url, result, speed, label
        self.config = config or LlamaVimConfig()
        self.drain_timeout_s, self.seed = drain_timeout_s, seed
        self.stats = InfillStats()
        self.play_index = -1
        self.next_id = 0
        self.epoch = time.perf_counter()
        self.client: Any = None

    async def __aenter__(self) -> LlamaVimReplay:
        import httpx

        # no read timeout of its own: llama.vim's curl waits for as long as the server takes
        self.client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(None, connect=5.0))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    async def warm_up(self) -> None:
        """One short FIM first (as the LSP columns warm up): the first forward's one-time costs."""
        ctx = local_context(["def add(a, b):", "    "], 4, 2, self.config)
        body = infill_request(ctx, [], self.config, self.config.t_max_predict_first_ms) | {"n_predict": 4}
        await self._post(body)

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.client is None:
            raise CodespecError("LlamaVimReplay used outside `async with`")
        response = await self.client.post("/infill", json=body)
        if response.status_code != 200:
            raise CodespecError(
                f"llama-server /infill answered {response.status_code}: {response.text[:300]}"
            )
        data = response.json()
        if not isinstance(data, dict):
            raise CodespecError("llama-server /infill answered something other than a JSON object")
        return data

    def clock(self) -> float:
        return time.perf_counter() - self.epoch

    async def play(self, session: Session) -> None:
        self.play_index += 1
        self.result.sessions.append(session.name)
        started = time.perf_counter()
        state = _Play(self, session)
        try:
            await state.run()
        finally:
            self.result.wall_s += time.perf_counter() - started
            await self._settle()
            self.stats.evicted_chunks += state.ring.evicted
            self.result.server_stats = self.stats.to_json()

    async def _settle(self, poll_s: float = 0.05) -> None:
        """Wait until llama-server's slots are idle (GET /slots): a request the play left (a FIM it stopped
        waiting for, a ring-buffer update) may still compute there and share the CPU with the next play, as the
        LSP servers' leftover work would (Replayer.settle). A server without /slots is not waited for."""
        import httpx

        started = time.perf_counter()
        deadline = started + self.drain_timeout_s
        while self.client is not None and time.perf_counter() < deadline:
            try:
                response = await self.client.get("/slots")
                slots = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                slots = None
            if not isinstance(slots, list) or not any(isinstance(x, dict) and x.get("is_processing") for x in slots):
                break
            await asyncio.sleep(poll_s)
        self.result.settle_s += time.perf_counter() - started


class _Play:
    """One session under llama.vim: the editor's state (buffers, hint, cache, ring, the one FIM job and its
    retry timer) and the records of its cursor states."""

    def __init__(self, owner: LlamaVimReplay, session: Session) -> None:
        self.owner, self.session, self.config = owner, session, owner.config
        self.docs = DocumentSet()
        self.ring = RingBuffer(self.config, random.Random(owner.seed ^ zlib.crc32(session.name.encode())))
        self.cache = ResponseCache(self.config.max_cache_keys)
        self.job: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.hint: Hint | None = None
        self.cursor: tuple[str, int, int] | None = None  # uri, 1-based line, character offset
        self.current: ReplayedRequest | None = None  # the record of the cursor state on screen
        self.records: list[ReplayedRequest] = []
        self.keystroke: dict[str, tuple[float, float]] = {}
        self.awaiting_next_keystroke: list[ReplayedRequest] = []
        self.pos_y_pick = -9999
        self.indent_last = -1
        self.insert_mode = False
        self.last_move = time.perf_counter()
        self.failure: BaseException | None = None

    # the session's messages, at their times

    async def run(self) -> None:
        session, owner = self.session, self.owner
        events = session.events
        t0, start = (events[0].t if events else 0.0), time.perf_counter()
        gaps = iter(keystroke_gaps_ms(session, owner.speed))
        ticker = asyncio.create_task(self._ring_ticker())
        try:
            for event in events:
                await self._sleep_until(event.t, t0, start)
                self._raise_failure()
                if event.method == DID_CLOSE and event.uri is not None:
                    await self._drain()
                try:
                    self.docs.apply(event)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise CodespecError(f"{session.name}: invalid session at t={event.t}: {exc}") from None
                if event.method == DID_OPEN and event.uri is not None:
                    self._on_open(event.uri)
                elif event.method == DID_CHANGE:
                    self._on_keystroke(event.uri or "", next(gaps))
                    typed = sum(len(c.get("text", "")) for c in event.params.get("contentChanges") or [])
                    chars = self.owner.result.typed_chars
                    chars[self.owner.label] = chars.get(self.owner.label, 0) + typed
                elif event.method == INLINE_COMPLETION:
                    self._on_cursor(event)
            await self._drain()
            self._finish_records()
        finally:
            ticker.cancel()
            if self.timer is not None:
                self.timer.cancel()
            for task in [*self.background, *([self.job] if self.job else [])]:
                task.cancel()
        self._raise_failure()

    async def _sleep_until(self, t: float, t0: float, start: float) -> None:
        if self.owner.speed is None:  # max: every FIM (and its retries) done before the next message
            await self._drain()
            return
        target = start + (t - t0) / self.owner.speed
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lag_ms = (time.perf_counter() - target) * 1000.0
        self.owner.result.max_send_lag_ms = max(self.owner.result.max_send_lag_ms, lag_ms)

    async def _drain(self) -> None:
        """Wait for the FIM job and its pending retry, as the LSP replay waits for answers at a close."""
        deadline = time.perf_counter() + self.owner.drain_timeout_s
        while (self.job is not None or self.timer is not None) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise CodespecError(f"{self.session.name}: llama-server failed: {self.failure}") from self.failure

    def _on_open(self, uri: str) -> None:
        # BufEnter with the cursor on line 1: the lines around it (a whole chunk of a short file)
        lines = self._lines(uri)
        half = self.config.ring_chunk_size // 2
        self.ring.pick(getline(lines, 1, min(1 + half, len(lines))), _filename(uri), self.owner.clock(),
                       do_evict=True)  # fmt: skip

    def _on_keystroke(self, uri: str, gap_ms: float) -> None:
        owner = self.owner
        sent = owner.clock()
        owner.result.keystrokes[owner.label] = owner.result.keystrokes.get(owner.label, 0) + 1
        for record in self.awaiting_next_keystroke:
            record.next_keystroke_s = sent
        self.awaiting_next_keystroke = []
        self.keystroke[uri] = (sent, gap_ms)

    def _on_cursor(self, event: Any) -> None:
        """CursorMovedI: on_move (hide, try the cache), then the auto FIM."""
        uri, pos = event.uri or "", event.params["position"]
        buf = self.docs.open[uri]
        offset = buf.offset_at(pos["line"], pos["character"])
        line_start = buf.line_starts[pos["line"]]
        self.cursor = (uri, pos["line"] + 1, offset - line_start)
        owner = self.owner
        owner.next_id += 1
        record = ReplayedRequest(self.session.name, owner.label, uri, owner.next_id, event.t, pos["line"],
                               pos["character"], expect=event.expect,
                               line_text=buf.text[line_start : buf._line_end(pos["line"])])  # fmt: skip
        record.play = owner.play_index
        record.sent_s = owner.clock()
        if uri in self.keystroke:  # the first cursor state since a keystroke: a pause candidate
            record.keystroke_s, record.gap_ms = self.keystroke.pop(uri)
            self.awaiting_next_keystroke.append(record)
        self.records.append(record)
        owner.result.records.append(record)
        self.current = record
        self.insert_mode = True
        self.last_move = time.perf_counter()
        self.hint = None  # fim_hide
        if self._try_hint():
            owner.stats.cache_hits += 1
        self.fim(None, [], use_cache=True)

    # llama.vim's FIM machinery

    def _lines(self, uri: str) -> list[str]:
        return vim_lines(self.docs.open[uri].text) if uri in self.docs.open else [""]

    def _try_hint(self) -> bool:
        """fim_try_hint at the current cursor: render a cached completion; True when one was rendered."""
        if self.cursor is None:
            return False
        uri, pos_y, pos_x = self.cursor
        lines = self._lines(uri)
        ctx = local_context(lines, pos_x, pos_y, self.config)
        content = cached_completion(self.cache, ctx)
        if content is None:
            return False
        self.hint = hint = render(content, lines, pos_x, pos_y)
        self._answer(hint)
        if self.config.speculative:  # what to say next if this is accepted, ready before it is
            self.fim(self.cursor, hint.content, use_cache=True)
        return True

    def _answer(self, hint: Hint) -> None:
        """The hint is on screen for the current cursor state: its record's answer (the first acceptable
        one; an empty hint only when nothing better came)."""
        record = self.current
        if record is None or record.outcome == "items":
            return
        record.latency_ms = (self.owner.clock() - record.sent_s) * 1000.0
        record.responses += 1
        if hint.can_accept and hint.shown:
            record.outcome, record.shown = "items", hint.shown
            if record.expect is not None:
                record.accepted, record.chars_saved = judge(hint.shown, record.expect)
        else:
            record.outcome = "null"

    def fim(self, pos: tuple[str, int, int] | None, prev: list[str], *, use_cache: bool) -> None:
        """llama#fim(pos or the cursor, is_auto, prev, use_cache)."""
        if self.job is not None:  # one at a time: retry in 100 ms, replacing any retry already waiting
            if self.timer is not None:
                self.timer.cancel()
            self.owner.stats.retries += 1
            self.timer = asyncio.get_running_loop().call_later(
                self.config.retry_ms / 1000.0, self._retry, pos, prev, use_cache
            )
            return
        where = pos or self.cursor
        if where is None or where[0] not in self.docs.open:
            return
        uri, pos_y, pos_x = where
        lines = self._lines(uri)
        if pos_y > len(lines):
            return
        ctx = local_context(lines, pos_x, pos_y, self.config, prev, self.indent_last)
        if len(ctx.line_cur_suffix) > self.config.max_line_suffix:
            self.owner.stats.skipped_line_suffix += 1
            return
        keys = context_keys(ctx)
        if use_cache and any(self.cache.get(key) is not None for key in keys):
            return
        self.indent_last = ctx.indent
        cursor_y = self.cursor[1] if self.cursor is not None else pos_y
        half = self.config.ring_chunk_size // 2
        self.ring.evict_similar(
            self.ring.window(getline(lines, cursor_y - half, min(cursor_y + half, len(lines))))
        )
        limit = self.config.t_max_predict_ms if prev else self.config.t_max_predict_first_ms
        body = infill_request(ctx, self.ring.extra(), self.config, limit)
        stats = self.owner.stats
        stats.fim_requests += 1
        stats.speculative_requests += bool(prev)
        self.job = asyncio.create_task(self._fim_job(body, keys))
        if abs(pos_y - self.pos_y_pick) > 32:  # the cursor went far: the far prefix and suffix as chunks
            max_y, now, name = len(lines), self.owner.clock(), _filename(uri)
            far_prefix = getline(
                lines, max(1, pos_y - self.config.ring_scope), max(1, pos_y - self.config.n_prefix)
            )
            self.ring.pick(far_prefix, name, now, do_evict=False)
            suffix_from = min(max_y, pos_y + self.config.n_suffix)
            far_suffix = getline(lines, suffix_from, min(max_y, suffix_from + self.config.ring_chunk_size))
            self.ring.pick(far_suffix, name, now, do_evict=False)
            self.pos_y_pick = pos_y

    def _retry(self, pos: tuple[str, int, int] | None, prev: list[str], use_cache: bool) -> None:
        self.timer = None
        self.fim(pos, prev, use_cache=use_cache)

    async def _fim_job(self, body: dict[str, Any], keys: list[str]) -> None:
        stats = self.owner.stats
        sent = time.perf_counter()
        try:
            data = await self.owner._post(body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the replay stops with it: a broken anchor must not look like a slow one
            stats.errors += 1
            self.failure = exc
            self.job = None
            return
        stats.latency_ms.append((time.perf_counter() - sent) * 1000.0)
        stats.prompt_n.append(int(data.get("timings/prompt_n", 0) or 0))
        stats.tokens_cached.append(int(data.get("tokens_cached", 0) or 0))
        content = data.get("content")
        if isinstance(content, str):  # fim_on_response: cache it, render unless an acceptable hint is up
            for key in keys:
                self.cache.insert(key, content)
            if self.hint is None or not self.hint.can_accept:
                self._try_hint()
        self.job = None  # fim_on_exit comes after the response callback

    async def _ring_ticker(self) -> None:
        """s:ring_update every ring_update_ms: outside insert mode, or after a while without a move, move a
        queued chunk into the ring and send its cache-filling request."""
        while True:
            await asyncio.sleep(self.config.ring_update_ms / 1000.0)
            idle = time.perf_counter() - self.last_move
            if self.insert_mode and idle < self.config.idle_for_ring_s:
                continue
            if self.ring.update():
                self.owner.stats.ring_requests += 1
                task = asyncio.create_task(self._ring_request(ring_update_request(self.ring.extra())))
                self.background.add(task)
                task.add_done_callback(self.background.discard)

    async def _ring_request(self, body: dict[str, Any]) -> None:
        try:
            await self.owner._post(body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.owner.stats.errors += 1
            self.failure = exc

    def _finish_records(self) -> None:
        """Cursor states that never got a hint: `cancelled` when a later one superseded them; the last one
        `null` when llama.vim had nothing more to do (no job, no retry), else it stays `missing`."""
        idle = self.job is None and self.timer is None
        for index, record in enumerate(self.records):
            if record.outcome == "missing":
                record.outcome = (
                    "cancelled" if index + 1 < len(self.records) else "null" if idle else "missing"
                )


def _filename(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
    return path.rsplit("/", 1)[-1] or path
