"""The engine interface the server and the tools program against, and its result types (no torch here).

`CompletionEngine` is what `lsp/` asks of an engine; the local speculative `Engine` (engine.py) and the
`RemoteEngine` (remote.py, a serving engine over HTTP) implement it. Everything in this module imports
without torch or transformers, so the thin client (`codespec serve --engine URL`) needs neither."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

StopFn = Callable[[str], int | None]


class TokenStream(list):
    """Tokens a drafter may copy from, with where they came from (`source`: files, suggestions, repeat-line,
    ...), so acceptance and tokens per forward are counted per source. A plain list is a stream of source
    "streams"."""

    def __init__(self, tokens: Sequence[int] = (), source: str = "streams") -> None:
        super().__init__(tokens)
        self.source = source


def stream_source(stream: Sequence[int]) -> str:
    return getattr(stream, "source", "streams")


class CancelToken:
    """Set from any thread; the decode loop checks it before every target forward, and a runtime that can stop
    a forward part-way (llama.cpp's between two graph nodes) reads `flag` while it computes."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.cancelled_at: float | None = None
        # A C string, empty until cancelled: native code reads it with strlen (codespec.decode.runtimes.llamacpp).
        self.flag = ctypes.create_string_buffer(2)

    def cancel(self) -> None:
        if not self._event.is_set():
            self.cancelled_at = time.perf_counter()
            self.flag[0] = b"\x01"
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens actually run through the target
    reused_tokens: int = 0  # prompt tokens whose KV came from the previous call
    prefill_s: float = 0.0
    target_forwards: int = 0  # decode forwards (prefill not counted)
    drafted: int = 0
    accepted: int = 0
    drafted_by: dict[str, int] = field(default_factory=dict)
    accepted_by: dict[str, int] = field(default_factory=dict)
    forwards_by: dict[str, int] = field(default_factory=dict)  # decode forwards that verified a draft of the source
    new_tokens: int = 0
    decode_s: float = 0.0
    # Of decode_s: the drafters' and the draft length's own work (begin, propose, bookkeeping), no forwards.
    draft_s: float = 0.0
    forwards_after_cancel: int = 0
    interrupted: int = 0  # forwards stopped part-way by the cancel (their work dropped, the cache as before)
    drafting_off: bool = False  # no draft could pay on this runtime's cost curve: decoded plain, nothing drafted
    # Decode forwards as they ran: tokens in the forward -> (forwards, seconds), to set beside the cost curve.
    forward_s_by_tokens: dict[int, tuple[int, float]] = field(default_factory=dict)

    def timed_forward(self, tokens: int, seconds: float) -> None:
        count, total = self.forward_s_by_tokens.get(tokens, (0, 0.0))
        self.forward_s_by_tokens[tokens] = (count + 1, total + seconds)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """tau: tokens produced per target forward (accepted drafts + the target's own token)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s else 0.0

    def tokens_per_forward_by(self) -> dict[str, float]:
        """Per draft source: tokens produced per forward that verified one of its drafts (its accepted tokens
        and the target's own), the source's speed-up before the cost of verifying more tokens."""
        return {source: round((self.accepted_by.get(source, 0) + n) / n, 3)
                for source, n in sorted(self.forwards_by.items()) if n}

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            tokens_per_forward=self.tokens_per_forward,
            tokens_per_forward_by=self.tokens_per_forward_by(),
            tokens_per_s=self.tokens_per_s,
        )
        return d


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str  # eos | max_tokens | stop | cancelled | time
    stats: GenerationStats
    stop_token: int | None = None  # the stop token that ended it (finish "eos"), not in token_ids


@dataclass
class StepEvent:
    # Text added by this step; deltas only ever append. A stop rule may cut the text shorter than what was
    # already streamed: the final event's result.text is authoritative.
    text: str
    token_ids: list[int]  # tokens added by this step
    done: bool = False
    result: GenerationResult | None = None


def final_result(events: Iterator[StepEvent]) -> GenerationResult:
    """A stream run to its end: the result its last event carries (`generate` of every engine)."""
    for event in events:
        if event.done and event.result is not None:
            return event.result
    raise AssertionError("stream ended without a result")


class CompletionEngine(Protocol):
    """One completion engine: streams a prompt's continuation, and says what serves and how it is doing."""

    tokenizer: Any  # encode / decode / get_vocab, as a transformers fast tokenizer (codespec.tokenizer.TextTokenizer)
    served: dict[str, Any]  # what serves, for `codespec/stats`: model, draftModel, drafting, runtimeFallback, ...
    step_delay_s: float  # tests: a pause after each step, applied live
    max_positions: int | None  # the context window, None when unknown
    prefills_ahead: bool  # computes a prompt's KV ahead of its request (idle time); a remote engine caches itself

    def stream(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        cancel: CancelToken | None = None,
        stop: StopFn | None = None,
        extra_streams: Sequence[Sequence[int]] = (),
        max_time_s: float | None = None,
        drafting: str | None = None,
    ) -> Iterator[StepEvent]:
        """Deltas of the continuation as they are decided; the last event is `done` with the result."""
        ...

    def generate(self, prompt_ids: Sequence[int], **kwargs: Any) -> GenerationResult:
        """`stream` to the end."""
        ...

    def reset_cache(self) -> None:
        """Forget cached prompts (after a failure, or when caching is off)."""
        ...

    def cached_prefix(self, prompt_ids: Sequence[int]) -> int:
        """How many of a prompt's tokens are cached already (0 where the engine cannot tell)."""
        ...

    def prefill(self, prompt_ids: Sequence[int], *, cancel: CancelToken | None = None,
                chunk: int | None = None) -> int:
        """Compute a prompt's KV ahead of its request; returns the tokens computed (0: not done here)."""
        ...

    def prefill_tokens_per_s(self) -> float | None:
        """Measured prefill speed, None when not measured (it sizes the prompt)."""
        ...

    def cost_points(self) -> tuple[tuple[int, float], ...]:
        """The measured cost of a forward over k tokens, (k, seconds), empty when not measured."""
        ...

    def describe(self) -> dict[str, Any]:
        """What `codespec/stats` shows of the engine beyond `served`: runtime, draft acceptance, KV, health."""
        ...
