"""A generation backend that completes on a shared serving engine (llama-server, vLLM, SGLang) over HTTP.

It backs `codespec serve --engine URL` and answers what the LSP side asks of the local Engine (`tokenizer`,
`stream`, `reset_cache`), so context, typing-along, prefetch, post-processing and cancellation stay one
implementation.

Protocol: OpenAI-compatible `/v1/completions` with the FIM prompt built here (markers in the prompt text;
vLLM refuses a `suffix` field), streamed as server-sent events. Where the engine is llama-server (its
`/v1/models` says `owned_by: llamacpp`), its native `/completion` with `cache_prompt`, and the prompt sent
as token ids when its tokenizer and ours agree. A cancel closes the connection: the engines abort a
request whose client went away. Engine trouble never reaches the editor as an error storm: the request
ends with nothing (finish "unavailable"), one log line per condition, and the next request after a short
back-off tries again."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from codespec import fim
from codespec.decode.api import (
    CancelToken,
    GenerationResult,
    GenerationStats,
    StepEvent,
    StopFn,
    final_result,
)
from codespec.errors import CodespecError

logger = logging.getLogger(__name__)

API_KEY_ENV = "CODESPEC_ENGINE_API_KEY"
UNAVAILABLE = "unavailable"  # finish reason: the engine could not answer (the request gets no suggestion)
LLAMA_SERVER, OPENAI = "llama-server", "openai"
# The probe text for "does the engine tokenize like us": FIM markers, indentation, a non-ASCII character.
_TOKENIZER_PROBE = f"{fim.FIM_PREFIX}def f(x):\n    return x  # é{fim.FIM_SUFFIX}\n{fim.FIM_MIDDLE}"
_BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # between retries while the engine is down; the last one repeats


class EngineTrouble(Exception):
    """One condition of the engine (unreachable, bad answer, ...): `condition` keys the once-only log line."""

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(message)
        self.condition = condition


@dataclass
class EngineTimeouts:
    connect_s: float = 2.0  # a local or LAN engine answers a connect at once; longer means down
    read_s: float = 30.0  # the longest wait for the next streamed chunk (the first one waits on a busy prefill)


class RemoteEngine:
    """`RemoteEngine("http://gpu-box:8000", tokenizer=tok, model="Qwen/Qwen2.5-Coder-7B")`."""

    def __init__(
        self,
        url: str,
        *,
        tokenizer: Any,
        stop_token_ids: Sequence[int] = (),
        stop_strings: Sequence[str] = (),
        model: str | None = None,
        api_key: str | None = None,
        timeouts: EngineTimeouts | None = None,
        max_connections: int = 4,
    ) -> None:
        import httpx

        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise CodespecError(f"--engine {url!r}: expected an http:// or https:// URL")
        self.url, self.tokenizer, self.requested_model = url, tokenizer, model
        self.stop_token_ids, self.stop_strings = set(stop_token_ids), list(stop_strings)
        self.timeouts = timeouts or EngineTimeouts()
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        t = self.timeouts
        # TLS follows the URL's scheme; one pool, reused by every request of this server. A failed connect is
        # tried once more at once (a restarting engine); anything longer is the back-off's job.
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.client = httpx.Client(
            base_url=url, headers=headers,
            timeout=httpx.Timeout(connect=t.connect_s, read=t.read_s, write=t.connect_s, pool=t.connect_s),
            transport=httpx.HTTPTransport(retries=1, limits=limits),
        )
        self.kind: str | None = None  # detected on the first request: LLAMA_SERVER or OPENAI
        self.model: str | None = None  # the model name sent (the requested one, or the engine's only one)
        self.send_token_ids = False  # llama-server with our tokenizer: the prompt goes as ids, exactly
        self.step_delay_s = 0.0  # tests: a pause after each streamed chunk
        self._cache_prompt = True
        self._conditions: dict[str, str] = {}  # current trouble -> its message; logged when it first appears
        self._retry_at = 0.0
        self._failures = 0
        self.served: dict[str, Any] = {"engine": url, "engineModel": model, "engineKind": None, "runtime": "remote"}
        self.max_positions: int | None = None  # the engine's; it refuses a prompt that does not fit
        self.prefills_ahead = False  # the KV lives in the engine, which caches the prompts it saw itself

    # ----- what the LSP side calls ------------------------------------------------------------------

    def reset_cache(self) -> None:
        """The cold baseline (`cache: false`): the next request asks the engine not to reuse its prompt cache."""
        self._cache_prompt = False

    def close(self) -> None:
        self.client.close()

    def cached_prefix(self, prompt_ids: Sequence[int]) -> int:
        return 0  # the engine's cache is not visible from here

    def prefill(self, prompt_ids: Sequence[int], *, cancel: CancelToken | None = None,
                chunk: int | None = None) -> int:
        return 0  # not done from here: the engine caches the prompts of the requests it serves

    def prefill_tokens_per_s(self) -> float | None:
        return None

    def cost_points(self) -> tuple[tuple[int, float], ...]:
        return ()

    def describe(self) -> dict[str, Any]:
        return {"remote": self.health()}

    def generate(self, prompt_ids: Sequence[int], **kwargs: Any) -> GenerationResult:
        return final_result(self.stream(prompt_ids, **kwargs))

    def stream(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 128,
        cancel: CancelToken | None = None,
        stop: StopFn | None = None,
        max_time_s: float | None = None,
        **_local_only: Any,  # extra_streams, drafting, sampling: the engine drafts and samples itself
    ) -> Iterator[StepEvent]:
        stats = GenerationStats(prompt_tokens=len(prompt_ids))
        output = _Output(self, stop)
        finish = UNAVAILABLE
        try:
            if time.monotonic() < self._retry_at:
                raise EngineTrouble("down", "")  # still backing off: no request, no new log line
            self._connect()
            started = time.perf_counter()
            for event in self._generate(list(prompt_ids), max_new_tokens, cancel, max_time_s, output, stats):
                if event is not None:
                    yield event
            stats.decode_s = time.perf_counter() - started
            finish = output.finish or "max_tokens"
            self._healthy()
        except EngineTrouble as trouble:
            if cancel is not None and cancel.cancelled:
                finish = "cancelled"  # the cancel closed the stream: that is not trouble
            else:
                self._trouble(trouble)
        stats.new_tokens = len(output.token_ids)
        result = GenerationResult(text=output.text, token_ids=output.token_ids, finish_reason=finish, stats=stats)
        yield StepEvent(text="", token_ids=[], done=True, result=result)

    # ----- one request -------------------------------------------------------------------------------

    def _generate(self, prompt: list[int], max_new_tokens: int, cancel: CancelToken | None,
                  max_time_s: float | None, output: _Output, stats: GenerationStats) -> Iterator[StepEvent | None]:
        import httpx

        def cancelled() -> bool:
            return cancel is not None and cancel.cancelled

        path, body = self._request_body(prompt, max_new_tokens)
        started = time.perf_counter()
        try:
            with self.client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise _http_trouble(response.status_code, response.text, self.model)
                watcher = _CancelWatcher(response, cancel)
                try:
                    for data in _server_sent_events(response):
                        if cancelled():
                            break
                        yield self._chunk(data, output, stats)
                        if self.step_delay_s:
                            time.sleep(self.step_delay_s)
                        if output.finish:
                            return  # closing the stream stops the engine (a stop rule or our stop token)
                        if max_time_s is not None and time.perf_counter() - started > max_time_s:
                            output.finish = "time"
                            return
                finally:
                    watcher.stop()
        except httpx.TimeoutException as exc:
            raise EngineTrouble("slow", f"engine at {self.url} timed out ({type(exc).__name__})") from None
        except (httpx.TransportError, httpx.StreamError) as exc:
            if not cancelled():  # a cancel closes the connection on purpose
                condition, what = ("mid-stream", "stream cut") if output.chunks else ("unreachable", "unreachable")
                raise EngineTrouble(condition, f"engine at {self.url}: {what} ({type(exc).__name__}: {exc})") from None
        if not output.finish:  # the engine's last event sets a finish: without it the stream was cut
            if not cancelled():
                raise EngineTrouble("mid-stream", f"engine at {self.url}: the stream ended without its last event")
            output.finish = "cancelled"

    def _request_body(self, prompt: list[int], max_new_tokens: int) -> tuple[str, dict[str, Any]]:
        cache, self._cache_prompt = self._cache_prompt, True
        if self.kind == LLAMA_SERVER:
            text_or_ids: Any = prompt if self.send_token_ids else self._prompt_text(prompt)
            return "/completion", {
                "prompt": text_or_ids, "n_predict": max_new_tokens, "stream": True, "cache_prompt": cache,
                "temperature": 0.0, "top_k": 1, "samplers": ["top_k"],  # greedy, as the local engine
            }
        body: dict[str, Any] = {
            "model": self.model, "prompt": self._prompt_text(prompt), "max_tokens": max_new_tokens,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
        }
        if self.stop_strings:
            body["stop"] = self.stop_strings
        return "/v1/completions", body

    def _prompt_text(self, prompt: list[int]) -> str:
        return self.tokenizer.decode(prompt, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _chunk(self, data: dict[str, Any], output: _Output, stats: GenerationStats) -> StepEvent | None:
        """One streamed event -> the text it adds (None when it adds none)."""
        output.chunks += 1
        if self.kind == LLAMA_SERVER:
            if "content" not in data and "tokens" not in data:
                raise EngineTrouble("garbage", f"engine at {self.url} streamed an event without content: "
                                               f"{json.dumps(data)[:200]}")
            timings = data.get("timings")
            if isinstance(timings, dict):
                stats.prefill_tokens = int(timings.get("prompt_n", 0) or 0)
                stats.reused_tokens = int(timings.get("cache_n", 0) or 0)
                stats.prefill_s = float(timings.get("prompt_ms", 0.0) or 0.0) / 1000.0
            if data.get("stop"):
                output.end(limit=data.get("stop_type") == "limit")
            if self.send_token_ids:
                return output.add_tokens([int(t) for t in data.get("tokens") or []])
            return output.add_text(str(data.get("content") or ""))
        choices = data.get("choices")
        usage = data.get("usage")
        if isinstance(usage, dict):
            stats.prefill_tokens = int(usage.get("prompt_tokens", 0) or 0)
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            stats.reused_tokens = int(cached or 0)
            stats.prefill_tokens -= stats.reused_tokens
        if not isinstance(choices, list):
            raise EngineTrouble("garbage", f"engine at {self.url} streamed a non-OpenAI event: "
                                           f"{json.dumps(data)[:200]}")
        if not choices:
            return None  # the usage-only event at the end
        choice = choices[0]
        if choice.get("finish_reason"):
            output.end(limit=choice.get("finish_reason") == "length")
        return output.add_text(str(choice.get("text") or ""))

    # ----- which engine, and its health ----------------------------------------------------------------

    def _connect(self) -> None:
        """Detect the engine kind and the model name once (again after an outage)."""
        if self.kind is not None:
            return
        import httpx

        try:
            response = self.client.get("/v1/models", timeout=self.timeouts.connect_s * 2)
        except httpx.TransportError as exc:
            raise EngineTrouble("unreachable", f"engine at {self.url} unreachable ({type(exc).__name__}: {exc})"
                                ) from None
        if response.status_code != 200:
            raise _http_trouble(response.status_code, response.text, self.requested_model)
        try:
            models = response.json()["data"]
            names = [str(m["id"]) for m in models]
        except (ValueError, KeyError, TypeError):
            raise EngineTrouble("garbage", f"engine at {self.url} is not OpenAI-compatible: GET /v1/models "
                                           f"answered {response.text[:200]!r}") from None
        if self.requested_model is not None and self.requested_model not in names:
            raise EngineTrouble("model", f"engine at {self.url} serves {names}, not {self.requested_model!r} "
                                         "(--engine-model)")
        if self.requested_model is None and not names:
            raise EngineTrouble("model", f"engine at {self.url} serves no model")
        self.model = self.requested_model or names[0]
        owners = {str(m.get("owned_by", "")) for m in models if isinstance(m, dict)}
        self.kind = LLAMA_SERVER if "llamacpp" in owners else OPENAI
        self.send_token_ids = self.kind == LLAMA_SERVER and self._same_tokenizer()
        self.served.update(engineKind=self.kind, engineModel=self.model, tokenIds=self.send_token_ids)
        logger.info("engine at %s: %s serving %s%s", self.url, self.kind, self.model,
                    " (prompt sent as token ids)" if self.send_token_ids else "")

    def probe(self) -> bool:
        """Detect the engine now (at load, so the log and stats say what serves); False while it is in trouble."""
        try:
            self._connect()
        except EngineTrouble as trouble:
            self._trouble(trouble)
            return False
        return True

    def _same_tokenizer(self) -> bool:
        ours = list(self.tokenizer.encode(_TOKENIZER_PROBE, add_special_tokens=False))
        try:
            response = self.client.post("/tokenize", json={"content": _TOKENIZER_PROBE, "parse_special": True})
            return response.status_code == 200 and response.json().get("tokens") == ours
        except Exception:  # an old llama-server without /tokenize: text prompts work everywhere
            return False

    def _trouble(self, trouble: EngineTrouble) -> None:
        if trouble.condition == "down":
            return
        if trouble.condition not in self._conditions:
            logger.warning("%s; answering no suggestion until it recovers", trouble)
        self._conditions[trouble.condition] = str(trouble)
        if trouble.condition in ("unreachable", "model", "garbage"):
            self.kind = None  # detect again when it is back: it may be another engine or model by then
        self._retry_at = time.monotonic() + _BACKOFF_S[min(self._failures, len(_BACKOFF_S) - 1)]
        self._failures += 1

    def _healthy(self) -> None:
        if self._conditions:
            logger.warning("engine at %s answers again", self.url)
            self._conditions.clear()
        self._failures = 0

    def health(self) -> dict[str, Any]:
        """For `codespec/stats`: the engine and its current trouble, if any."""
        return {**self.served, "trouble": sorted(self._conditions.values())}


class _Output:
    """The generated text so far, from token ids (decoded with our tokenizer) or from text chunks."""

    def __init__(self, engine: RemoteEngine, stop: StopFn | None) -> None:
        self.engine, self.stop = engine, stop
        self.token_ids: list[int] = []
        self.text = ""
        self.finish: str | None = None
        self.ended = False  # the engine sent its last event
        self._end_reason = "eos"
        self.chunks = 0
        self._raw = ""

    def end(self, *, limit: bool) -> None:
        self.ended, self._end_reason = True, "max_tokens" if limit else "eos"

    def add_tokens(self, tokens: list[int]) -> StepEvent | None:
        for i, token in enumerate(tokens):
            if token in self.engine.stop_token_ids:
                tokens, self.finish = tokens[:i], "eos"
                break
        self.token_ids.extend(tokens)
        raw = self.engine.tokenizer.decode(self.token_ids, skip_special_tokens=False,
                                           clean_up_tokenization_spaces=False)
        held = raw.rstrip("\ufffd") if not self.finish and not self.ended else raw  # a partial UTF-8 sequence
        return self._advance(held, tokens)

    def add_text(self, text: str) -> StepEvent | None:
        return self._advance(self._raw + text, [])

    def _advance(self, raw: str, tokens: list[int]) -> StepEvent | None:
        self._raw = raw
        if self.ended and not self.finish:
            self.finish = self._end_reason
        cut = self.stop(raw) if self.stop is not None else None
        if cut is not None:
            raw, self.finish = raw[:cut], "stop"
        delta = raw[len(self.text):] if raw.startswith(self.text) else ""
        self.text = raw if raw.startswith(self.text) else self.text
        return StepEvent(text=delta, token_ids=tokens) if delta or tokens else None


class _CancelWatcher:
    """Closes the response's connection the moment the cancel token is set, from its own thread: the read
    blocked in the worker returns at once, and the engine sees its client gone and frees the slot."""

    def __init__(self, response: Any, cancel: CancelToken | None) -> None:
        self.response, self.cancel = response, cancel
        self._done = threading.Event()
        if cancel is not None:
            threading.Thread(target=self._watch, name="codespec-engine-cancel", daemon=True).start()

    def _watch(self) -> None:
        while not self._done.wait(0.005):
            if self.cancel is not None and self.cancel.cancelled:
                _shutdown(self.response)
                return

    def stop(self) -> None:
        self._done.set()


def _shutdown(response: Any) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _server_sent_events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON payloads of `data:` lines until `[DONE]` (or the end of the stream)."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            if line.startswith("error:"):
                raise EngineTrouble("garbage", f"engine error event: {line[6:].strip()[:200]}")
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError:
            raise EngineTrouble("garbage", f"engine streamed something that is not JSON: {payload[:200]!r}") from None
        if not isinstance(data, dict):
            raise EngineTrouble("garbage", f"engine streamed {payload[:200]!r}")
        if "error" in data and "choices" not in data and "content" not in data:
            raise EngineTrouble("garbage", f"engine error: {json.dumps(data['error'])[:200]}")
        yield data


def _http_trouble(status: int, text: str, model: str | None) -> EngineTrouble:
    if status in (401, 403):
        return EngineTrouble("auth", f"engine refused the request ({status}): set ${API_KEY_ENV}")
    if status == 404 and model and model in text:
        return EngineTrouble("model", f"engine does not serve {model!r} ({status}): {text[:200]}")
    if status == 404:
        return EngineTrouble("garbage", f"engine has no such endpoint ({status}): is it OpenAI-compatible?")
    if status in (429, 503):
        return EngineTrouble("busy", f"engine busy ({status}): {text[:200]}")
    return EngineTrouble(f"http-{status}", f"engine answered {status}: {text[:200]}")
