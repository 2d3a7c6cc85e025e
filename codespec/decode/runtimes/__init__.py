"""The runtime under the decode loop: a target model's forward over k new tokens with a KV cache it can cut.

The loop (codespec.decode.engine), the drafters, cancellation, prefix reuse and stop rules are one implementation;
a runtime only answers "run these tokens after the cached ones, give me the logits of the last n of them"
and "keep only the first n cached tokens". Two implement it: `TorchRuntime` (transformers: CUDA, CPU,
exact fp32, the distillation path) and `LlamaCppRuntime` (llama.cpp's quantized CPU kernels, GGUF files).

`exact_batching` says whether a forward over k tokens gives the same argmax as k single-token forwards.
fp32 torch does; bf16 and llama.cpp's quantized kernels round a batch differently from a single token, so
for them "lossless" means: equal to plain greedy of the same runtime except where the target is at a
near-tie (its top two logits within `NEAR_TIE_LOGITS`) at the first token where they differ."""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codespec.decode.runtimes.kv import common_prefix_len
from codespec.modes import RUNTIMES  # noqa: F401 - re-exported; the names live where torch is not needed

# Logit gap under which two tokens are a near-tie: batched and single-token forwards of a reduced-precision
# runtime may order them differently (bf16 rounds logits of ~20 to steps of 0.125; llama.cpp quantizes
# activations to 8 bits per block in a batch). What the benchmarks count; it is no bound for every model.
# Measured (2026-12-07, llama.cpp, 2 threads, a batch of 4-25 tokens against the same tokens one at a time):
# the bundled 0.5B GGUF moves single logits by up to 0.68 (median per position 0.29; its top-2 gaps: 10 %
# under 0.25, median 1.9), so 0.5 is not too generous for the quantized models; the tiny fp32 test GGUF
# moves them by 8e-4, so there 0.5 would excuse most divergences: tests/engine/test_runtimes.py measures
# each model's own threshold (tests/engine/agreement.py) instead of using this constant.
NEAR_TIE_LOGITS = 0.5
# Forward sizes a cost curve is measured at: every length a verify may have up to 16 (llama.cpp's repacked CPU
# kernels work in groups of 4 tokens, so 5-7 tokens cost what 8 do: interpolating between 4 and 8 would hide
# that), the longest drafts, and a prefill chunk (the prefill speed that sizes the prompt, PromptBudget).
CALIBRATION_KS = (*range(1, 17), 24, 32, 64)


class ForwardInterrupted(Exception):
    """A forward stopped part-way because the request it worked for was cancelled (`Runtime.interrupt_with`):
    nothing of it was kept, the cache holds what it held before the call."""


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one target forward over k new tokens (k = 1, 2, 4, ...), measured at load."""

    points: tuple[tuple[int, float], ...]  # (k, seconds), k ascending

    def cost(self, k: int) -> float:
        """Linear interpolation between measured points; linear extrapolation past the last."""
        pts = self.points
        if k <= pts[0][0]:
            return pts[0][1]
        for (k0, s0), (k1, s1) in zip(pts, pts[1:], strict=False):
            if k <= k1:
                return s0 + (s1 - s0) * (k - k0) / (k1 - k0)
        (k0, s0), (k1, s1) = pts[-2], pts[-1]
        return s1 + (s1 - s0) * (k - k1) / (k1 - k0)

    def to_dict(self) -> dict[str, float]:
        return {str(k): round(s * 1000, 2) for k, s in self.points}


@dataclass
class Slot:
    """One cached prompt: the tokens whose keys and values a runtime holds for it."""

    tokens: list[int] = field(default_factory=list)
    prompt_len: int = 0  # how many of `tokens` a prompt asked for (the rest: generated text, disposable)
    used: int = 0  # when it was last active (a counter), for least-recently-used eviction
    place: bool = False  # a request's prompt ran in it (work ahead of time alone does not make it a place)


class Runtime(ABC):
    """A target model with a KV cache of one or more cached prompts (slots). `cached` lists the tokens of
    the active slot, the one `forward` appends to and `truncate` cuts.

    Several slots (`max_slots` > 1) keep the places a user moves between: `sync` continues the slot that
    shares the longest prefix with the new prompt, and when that slot holds another place (a prompt going on
    for more than `fork_min_tokens` past the shared prefix) it copies the shared prefix into another slot
    (the least recently used one) instead of cutting that place away, so going back costs nothing."""

    name: str = "runtime"
    exact_batching: bool = True
    prefill_chunk: int = 64  # prompt tokens per prefill forward: a cancel is seen between chunks
    max_positions: int | None = None
    vocab_size: int = 0
    max_slots: int = 1
    stops_forwards: bool = False  # interrupt_with stops a forward part-way (else a cancel waits for it to end)
    # A slot whose prompt goes on for more than this past the shared prefix is another place, kept: typing
    # at the cursor changes only the tokens after it (the rest of the line and the FIM markers, a handful);
    # a jump changes the cursor window (48 tokens or more, codespec/context/block.py).
    fork_min_tokens: int = 24

    def __init__(self) -> None:
        self.slots: list[Slot] = [Slot()]
        self.active = 0
        self.cached: list[int] = self.slots[0].tokens
        self.cost_curve: CostCurve | None = None
        self._clock = 0

    @abstractmethod
    def forward(self, tokens: Sequence[int], logits: int) -> torch.Tensor:
        """Run `tokens` after the cached ones (appending them to the active slot); float32 logits of the last
        `logits` positions, shape [logits, vocab]."""

    def interrupt_with(self, cancel) -> None:
        """From now on a forward stops part-way once `cancel` (a CancelToken; None: never) is set, and raises
        ForwardInterrupted: the user typed on, and the worker is free for the new request at once rather than
        after the forward (the engine sets it for decode forwards only, a verify of 17 tokens being ~0.18 s on
        2 cores). Runtimes that cannot stop a forward safely ignore it; the loop still sees the cancel between two."""
        return None

    def keep_features(self, on: bool) -> None:
        """Keep the target's features (last hidden states) for a drafter that reads them; only torch can."""
        return None  # the default: no runtime but torch has them, and no drafter asks another for them

    @abstractmethod
    def truncate(self, length: int) -> None:
        """Keep the first `length` tokens of the active slot (rejected drafts, a prompt that diverged)."""

    def _copy_slot(self, source: int, target: int, length: int) -> None:
        """Make slot `target` hold the first `length` tokens of slot `source` (runtimes with max_slots > 1)."""
        raise NotImplementedError

    def _clear_slot(self, index: int) -> None:
        """Empty slot `index` (not the active one)."""
        raise NotImplementedError

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` some slot already holds (what a prompt would not prefill)."""
        return max(common_prefix_len(slot.tokens, tokens) for slot in self.slots)

    def sync(self, tokens: Sequence[int], *, place: bool = True) -> int:
        """Make the active slot hold the longest cached prefix of `tokens`, keeping other places' slots;
        returns how many tokens were kept. `place`: a request's prompt (False: work ahead of time, e.g. a
        prompt prefilled in idle time; a slot that only such work used is continued, not kept aside)."""
        shared = [common_prefix_len(slot.tokens, tokens) for slot in self.slots]
        best = max(range(len(self.slots)), key=lambda i: (shared[i], i == self.active, self.slots[i].used))
        keep = shared[best]
        held = min(self.slots[best].prompt_len, len(self.slots[best].tokens))  # prompt tokens it has computed
        if self.max_slots > 1 and self.slots[best].place and held - keep > self.fork_min_tokens:
            target = self._spare_slot(best)
            self._copy_slot(best, target, keep)
            self.slots[target].tokens[:] = self.slots[best].tokens[:keep]
            best = target
        self._activate(best)
        self.truncate(keep)
        slot = self.slots[best]
        slot.prompt_len = len(tokens)
        slot.place = place or (slot.place and keep >= held)
        return keep

    def _spare_slot(self, keep: int) -> int:
        """A slot to take for a new place: a new one while fewer than max_slots, else the least recently
        used one other than `keep` (emptied)."""
        if len(self.slots) < self.max_slots:
            self.slots.append(Slot())
            return len(self.slots) - 1
        index = min((i for i in range(len(self.slots)) if i != keep), key=lambda i: self.slots[i].used)
        self._empty(index)
        return index

    def _empty(self, index: int) -> None:
        """Empty slot `index` (not the active one), its KV and its bookkeeping."""
        self._clear_slot(index)
        slot = self.slots[index]
        del slot.tokens[:]
        slot.prompt_len, slot.place = 0, False

    def _activate(self, index: int) -> None:
        self._clock += 1
        self.active = index
        self.slots[index].used = self._clock
        self.cached = self.slots[index].tokens

    def evict_one(self) -> bool:
        """Empty the least recently used slot other than the active one (to make room); False if none holds
        anything."""
        others = [i for i in range(len(self.slots)) if i != self.active and self.slots[i].tokens]
        if not others:
            return False
        self._empty(min(others, key=lambda i: self.slots[i].used))
        return True

    def reset(self) -> None:
        """Empty every slot."""
        for index in range(len(self.slots)):
            if index != self.active and self.slots[index].tokens:
                self._empty(index)
        self.truncate(0)
        self.slots[self.active].prompt_len, self.slots[self.active].place = 0, False

    def describe_slots(self) -> dict:
        """What the stats show of the cached prompts: tokens per slot, the tokens they hold together (shared
        prefixes counted once) and their bytes."""
        held = distinct_tokens([slot.tokens for slot in self.slots])
        return {"maxSlots": self.max_slots, "slotTokens": [len(slot.tokens) for slot in self.slots],
                "active": self.active, "distinctTokens": held,
                "bytes": held * self.kv_bytes_per_token() if self.kv_bytes_per_token() else None}

    def kv_bytes_per_token(self) -> int:
        return 0

    def describe_settings(self) -> dict:
        """What changes the cost of a forward besides the model and the machine."""
        return {"runtime": self.name}

    def describe(self) -> dict:
        """What `codespec models` and the server's stats show about this runtime."""
        return {"runtime": self.name, "exact_batching": self.exact_batching,
                "cost_ms": self.cost_curve.to_dict() if self.cost_curve else None}

    def calibrate(self, ks: Sequence[int] = CALIBRATION_KS, context: int = 256, repeats: int = 3) -> CostCurve:
        """Measure the forward cost over k tokens after `context` cached tokens (a handful of forwards, ~1-3 s
        for a 1.5B on a 2-core CPU); the cache is empty afterwards."""
        filler = [(17 + 31 * i) % max(self.vocab_size - 1, 2) + 1 for i in range(context + max(ks))]
        limit = self.max_positions or (context + max(ks))
        context = min(context, max(limit - max(ks) - 1, 1))
        self.reset()
        try:
            for start in range(0, context, self.prefill_chunk):
                self.forward(filler[start : min(start + self.prefill_chunk, context)], logits=1)
            points = []
            for k in ks:
                runs = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    self.forward(filler[context : context + k], logits=k)
                    runs.append(time.perf_counter() - started)
                    self.truncate(context)
                # The fastest of the repeats: another process on the cores only ever adds time, and a curve
                # measured while one ran is cached for good (seen: a server calibrating beside another).
                points.append((k, min(runs)))
        finally:
            self.reset()
        # A curve must not fall with k: noise on a busy machine can make it, and the drafter would then
        # think longer drafts are free.
        monotone, worst = [], 0.0
        for k, s in points:
            worst = max(worst, s)
            monotone.append((k, worst))
        self.cost_curve = CostCurve(tuple(monotone))
        return self.cost_curve


def machine_key() -> str:
    """The CPU (or GPU) a cost curve was measured on: a curve is only reused on the same hardware."""
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    import platform

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return " | ".join(x for x in (cpu or platform.processor() or platform.machine(), gpu) if x)


def cached_cost_curve(runtime: Runtime, model_key: str, path: Path) -> CostCurve:
    """The runtime's cost curve from `path` (a JSON cache per machine, model and runtime settings), else
    measured now and added to it. A cache that cannot be read or written only costs a measurement."""
    key = json.dumps([machine_key(), model_key, runtime.describe_settings(), list(CALIBRATION_KS)])
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), list):
        try:
            runtime.cost_curve = CostCurve(tuple((int(k), float(s)) for k, s in known[key]))
            return runtime.cost_curve
        except (TypeError, ValueError):
            pass
    curve = runtime.calibrate()
    known = known if isinstance(known, dict) else {}
    known[key] = [list(point) for point in curve.points]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
    return curve


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two outputs differ (one ending early counts), or None when they are equal."""
    common = common_prefix_len(a, b)
    return None if common == len(a) == len(b) else common


def top2_gap(runtime: Runtime, ids: Sequence[int]) -> float:
    """The target's top-1 minus top-2 logit for the token after `ids`, from plain (chunked) forwards: how
    near a tie the target was where a speculative output left plain greedy. The cache is reset after."""
    runtime.reset()
    try:
        for start in range(0, len(ids), runtime.prefill_chunk):
            logits = runtime.forward(ids[start : start + runtime.prefill_chunk], logits=1)
        top = torch.topk(logits[-1], 2).values
    finally:
        runtime.reset()
    return float(top[0] - top[1])


def distinct_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """Positions held by a set of token sequences whose shared prefixes are stored once."""
    total, seen = 0, []
    for tokens in sorted((list(t) for t in sequences if t), key=len, reverse=True):
        total += len(tokens) - max((common_prefix_len(tokens, other) for other in seen), default=0)
        seen.append(tokens)
    return total
