"""The drafters for speculative decoding, each behind the one small `Drafter` interface the engine calls.

Every drafter implements one small interface (`Drafter`): it is attached
to the engine's target once, told about the prompt, asked for a draft for the current sequence, and told how
many of its tokens the target accepted. Verification lives in the engine; a drafter can never change the
output, only the speed."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from codespec.decode.api import stream_source
from codespec.decode.runtimes.kv import common_prefix_len, rollback_cache
from codespec.decode.sampling import Sampler


@dataclass
class Draft:
    tokens: list[int]
    # One distribution over the vocabulary per draft token (the drafter's q), or None for a point mass
    # (a lookup draft proposes one token with certainty).
    probs: torch.Tensor | None
    source: str
    # What its acceptance is tracked by (the cost-aware length): a lookup draft's match length, for example.
    key: str = ""


class Drafter:
    """Everything the decode loop may ask of a drafter, and nothing else (as transformers' CandidateGenerator
    declares `requires_model_outputs`): the engine reads `name` and `uses_target_features` and calls these
    methods only. The defaults are a drafter without state."""

    name: str = ""
    # The engine keeps the target's last hidden states (one per cached position) for this drafter (EAGLE).
    uses_target_features: bool = False

    def attach(self, runtime: Any, stop_ids: Iterable[int]) -> None:
        """The engine that verifies this drafter's drafts: its target runtime and the tokens that end a
        generation (nothing drafted after one can be kept). Called when the engine is built for its own drafter,
        and on every `stream()` that passes a drafter of its own, before any draft."""

    def begin(self, prompt_ids: Sequence[int], extra_streams: Sequence[Sequence[int]]) -> None:
        """A new generation starts from `prompt_ids`; `extra_streams` are other token sequences to draw from."""

    def propose(self, ids: Sequence[int], max_tokens: int, sampler: Sampler) -> Draft | None:
        """Draft up to `max_tokens` tokens that follow `ids` (prompt + accepted tokens so far)."""
        raise NotImplementedError

    def feedback(self, drafted: int, accepted: int) -> None:
        """The target accepted `accepted` of the `drafted` tokens of the last draft."""

    def reset(self) -> None:
        """Forget any cached state: the engine's target cache was reset (or a forward failed half-way)."""


class NgramIndex:
    """Where each n-gram (min_n..max_n tokens) of a token sequence last ended, maintained incrementally:
    appending or truncating touches only the changed tokens, never the whole sequence.

    Stored as plain ints so the garbage collector can skip it: per n, the last end of each n-gram (a dict of
    tuples to ints, which the collector stops tracking after one pass) and, per position, the end of the
    same n-gram's occurrence before it (one list of ints). A list per n-gram instead left ~600,000 tracked
    objects for eight open files, and each full collection held the GIL for ~0.15-0.2 s: the server's worker and
    its event loop stood still (experiments/replay-control/log.md, run5)."""

    def __init__(self, min_n: int, max_n: int, tokens: Sequence[int] = ()) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        # n -> ngram -> the end of its latest occurrence. An n-gram is indexed only once a token follows it,
        # so a lookup of the sequence's own suffix never finds itself.
        self._last: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_n, max_n + 1)}
        # n -> for token i, the previous end of the n-gram that ends at i - 1 (-1: none, or too short).
        self._previous: dict[int, list[int]] = {n: [] for n in range(min_n, max_n + 1)}
        self.extend(tokens)

    def extend(self, new_tokens: Sequence[int]) -> None:
        tokens = self.tokens
        for token in new_tokens:
            end = len(tokens) - 1  # the n-grams ending here now have a continuation
            tokens.append(token)
            for n in range(self.min_n, self.max_n + 1):
                if end - n + 1 < 0:
                    self._previous[n].append(-1)
                    continue
                key = tuple(tokens[end - n + 1 : end + 1])
                last = self._last[n]
                self._previous[n].append(last.get(key, -1))
                last[key] = end

    def truncate(self, length: int) -> None:
        tokens = self.tokens
        while len(tokens) > length:
            end = len(tokens) - 2  # the n-grams that ended before the last token lose their continuation
            for n in range(self.min_n, self.max_n + 1):
                previous = self._previous[n].pop()
                if end - n + 1 < 0:
                    continue
                key = tuple(tokens[end - n + 1 : end + 1])
                if previous < 0:
                    del self._last[n][key]
                else:
                    self._last[n][key] = previous
            tokens.pop()

    def sync(self, tokens: Sequence[int]) -> None:
        """Make the index describe `tokens`, reusing the shared prefix."""
        keep = common_prefix_len(self.tokens, tokens)
        self.truncate(keep)
        self.extend(tokens[keep:])

    def find(self, key: tuple[int, ...]) -> int | None:
        """End position of the most recent occurrence of `key` that has a continuation."""
        last = self._last.get(len(key))
        return None if last is None else last.get(key)


@dataclass
class LookupConfig:
    min_n: int = 2
    max_n: int = 6
    min_draft: int = 2
    max_draft: int = 24
    # Draft length per matched token: a longer match is likelier to continue.
    tokens_per_matched: int = 2
    max_extra_streams: int = 32


class LookupDrafter(Drafter):
    """Prompt lookup: find the longest recent n-gram match of the sequence's tail in the prompt, the tokens
    generated so far, or extra streams (other documents, earlier suggestions, a line the user re-types), and
    propose what followed. A draft's source is where it was found: "lookup" (the prompt and the output) or
    the stream's own source (`TokenStream.source`), so acceptance is counted per source."""

    name = "lookup"

    def __init__(self, config: LookupConfig | None = None) -> None:
        self.config = config or LookupConfig()
        self._main = NgramIndex(self.config.min_n, self.config.max_n)
        self._extra_cache: OrderedDict[tuple[int, ...], NgramIndex] = OrderedDict()
        self._extras: list[tuple[str, NgramIndex]] = []
        self._limit = self.config.max_draft

    def begin(self, prompt_ids: Sequence[int], extra_streams: Sequence[Sequence[int]]) -> None:
        self._main.sync(prompt_ids)
        self._limit = self.config.max_draft  # adaptation is per generation, so a seed fixes the output
        self._extras = [(stream_source(stream), self._extra_index(stream)) for stream in extra_streams
                        if len(stream) > self.config.min_n]

    def _extra_index(self, stream: Sequence[int]) -> NgramIndex:
        key = tuple(stream)
        index = self._extra_cache.pop(key, None) or NgramIndex(self.config.min_n, self.config.max_n, key)
        self._extra_cache[key] = index
        while len(self._extra_cache) > self.config.max_extra_streams:
            self._extra_cache.popitem(last=False)
        return index

    def propose(self, ids: Sequence[int], max_tokens: int, sampler: Sampler) -> Draft | None:
        if max_tokens <= 0:
            return None
        self._main.extend(ids[len(self._main.tokens) :])
        tail = self._main.tokens
        cfg = self.config
        for n in range(min(cfg.max_n, len(tail) - 1), cfg.min_n - 1, -1):
            key = tuple(tail[-n:])
            best = None  # (matched, source, index, end): the longest real match of this n-gram wins
            for source, index in ((self.name, self._main), *self._extras):
                end = index.find(key)
                if end is not None and end + 1 < len(index.tokens):
                    matched = self._match_length(index.tokens, end, tail)
                    if best is None or matched > best[0]:
                        best = (matched, source, index, end)
            if best is None:
                continue
            matched, source, index, end = best
            length = min(max(cfg.min_draft, cfg.tokens_per_matched * matched), self._limit, max_tokens)
            # Acceptance rises with the match length: long matches are tracked apart from short ones.
            return Draft(tokens=list(index.tokens[end + 1 : end + 1 + length]), probs=None, source=source,
                         key=f"{source}:{matched if matched < 8 else '8+'}")
        return None

    @staticmethod
    def _match_length(source: Sequence[int], end: int, tail: Sequence[int], cap: int = 32) -> int:
        """How many tokens before the match agree with the tail (the match's real length)."""
        n = 0
        while n < cap and end - n >= 0 and n < len(tail) and source[end - n] == tail[-1 - n]:
            n += 1
        return n

    def feedback(self, drafted: int, accepted: int) -> None:
        # Shrink the cap after poor drafts (each rejected token costs verify work), grow it after full accepts.
        if accepted == drafted:
            self._limit = min(self.config.max_draft, self._limit * 2)
        elif accepted < drafted // 2:
            self._limit = max(self.config.min_draft, self._limit // 2)


@dataclass
class DraftModelConfig:
    max_draft: int = 8
    min_draft: int = 1
    start_draft: int = 4
    # Stop drafting once the draft model's top probability falls below this (greedy) ...
    min_confidence: float = 0.3

    def next_length(self, length: int, drafted: int, accepted: int) -> int:
        """The next draft's length: longer after a draft accepted whole, shorter after any rejection."""
        return min(self.max_draft, length + 2) if drafted and accepted == drafted else max(self.min_draft, length - 1)


class AutoregressiveDrafter(Drafter):
    """The drafting loop of the model drafters (a draft model, an EAGLE head): one draft forward per token,
    each token fed back, with the drafter's own KV cache kept in step with the accepted tokens. Subclasses
    say how the cache is synced with `ids` (`_start`), what one forward is (`_forward_step`) and what
    follows a drafted token (`_next_input`)."""

    def __init__(self, config: DraftModelConfig | None = None, *, stop_ids: Iterable[int] = ()) -> None:
        self.config = config or DraftModelConfig()
        self._cache: DynamicCache | None = None
        self._cached: list[int] = []  # the tokens whose keys/values are in the cache
        self._length = self.config.start_draft
        # Tokens that end a generation (the engine's own): nothing drafted after one can be kept.
        self.stop_ids = frozenset(stop_ids)

    def attach(self, runtime: Any, stop_ids: Iterable[int]) -> None:
        self.stop_ids = frozenset(stop_ids)

    def begin(self, prompt_ids: Sequence[int], extra_streams: Sequence[Sequence[int]]) -> None:
        # The cache is synced lazily in propose(): this generation may never need the drafter.
        self._length = self.config.start_draft

    def reset(self) -> None:
        self._cache, self._cached = None, []

    def _can_draft(self, ids: Sequence[int]) -> bool:
        return True

    def _start(self, ids: Sequence[int]) -> Any:
        """Roll the cache back to what it shares with `ids`; the first forward's input."""
        raise NotImplementedError

    def _forward_step(self, step_input: Any) -> tuple[torch.Tensor, Any]:
        """One draft forward: the next token's logits (over the whole vocabulary), and what `_next_input` needs."""
        raise NotImplementedError

    def _next_input(self, carry: Any, token: int) -> Any:
        """The next forward's input after drafting `token`."""
        raise NotImplementedError

    def _end(self, ids: Sequence[int]) -> None:
        """The draft is complete (drop what the cache must not keep)."""

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], max_tokens: int, sampler: Sampler) -> Draft | None:
        limit = min(self._length, max_tokens)
        if limit <= 0 or not self._can_draft(ids):
            return None
        try:
            step_input = self._start(ids)
            tokens: list[int] = []
            probs: list[torch.Tensor] = []
            while len(tokens) < limit:
                logits, carry = self._forward_step(step_input)
                token, q = sampler.draft(logits)
                if sampler.greedy and tokens and float(q) < self.config.min_confidence:
                    break
                tokens.append(token)
                if not sampler.greedy:
                    probs.append(q)
                if token in self.stop_ids:
                    break
                step_input = self._next_input(carry, token)
            self._end(ids)
        except BaseException:
            self.reset()
            raise
        return Draft(tokens=tokens, probs=torch.stack(probs) if probs else None, source=self.name)

    def feedback(self, drafted: int, accepted: int) -> None:
        self._length = self.config.next_length(self._length, drafted, accepted)


class ModelDrafter(AutoregressiveDrafter):
    """A small model with the target's tokenizer drafts autoregressively, with its own KV cache kept in step
    with the accepted tokens (and reused across generations for a shared prefix)."""

    name = "model"

    def __init__(self, model: torch.nn.Module, config: DraftModelConfig | None = None, *,
                 stop_ids: Iterable[int] = ()) -> None:
        super().__init__(config, stop_ids=stop_ids)
        self.model = model
        self.device = next(model.parameters()).device

    def _start(self, ids: Sequence[int]) -> list[int]:
        """Roll the cache back to the prefix it shares with `ids`; return the tokens still to feed (>= 1)."""
        keep = min(common_prefix_len(self._cached, ids), len(ids) - 1)
        if self._cache is None:
            self._cache, keep = DynamicCache(), 0
        rollback_cache(self._cache, keep)
        self._cached = list(ids[:keep])
        return list(ids[keep:])

    def _forward_step(self, feed: list[int]) -> tuple[torch.Tensor, None]:
        out = self.model(
            input_ids=torch.tensor([feed], device=self.device),
            past_key_values=self._cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self._cached.extend(feed)
        return out.logits[0, -1].float(), None

    def _next_input(self, carry: None, token: int) -> list[int]:
        return [token]


class CombinedDrafter(Drafter):
    """Lookup first (free), the draft model only when lookup has nothing to offer."""

    name = "both"

    def __init__(self, lookup: Drafter, model: Drafter) -> None:
        self.lookup, self.model = lookup, model
        self._last: Drafter | None = None

    @property
    def uses_target_features(self) -> bool:  # type: ignore[override]
        return self.lookup.uses_target_features or self.model.uses_target_features

    def attach(self, runtime: Any, stop_ids: Iterable[int]) -> None:
        stop_ids = list(stop_ids)
        self.lookup.attach(runtime, stop_ids)
        self.model.attach(runtime, stop_ids)

    def reset(self) -> None:
        self.lookup.reset()
        self.model.reset()

    def begin(self, prompt_ids: Sequence[int], extra_streams: Sequence[Sequence[int]]) -> None:
        self.lookup.begin(prompt_ids, extra_streams)
        self.model.begin(prompt_ids, extra_streams)

    def propose(self, ids: Sequence[int], max_tokens: int, sampler: Sampler) -> Draft | None:
        draft = self.lookup.propose(ids, max_tokens, sampler)
        self._last = self.lookup
        if draft is None:
            draft = self.model.propose(ids, max_tokens, sampler)
            self._last = self.model
        return draft

    def feedback(self, drafted: int, accepted: int) -> None:
        if self._last is not None:
            self._last.feedback(drafted, accepted)


PRIOR_FORWARDS = 4.0  # the cost scale's prior: this many forwards that cost what the curve says


class CostAwareLength:
    """How many of a draft's tokens to verify, from the target's cost curve and the acceptance seen so far.

    A draft of k tokens whose tokens are each accepted with probability a (given the previous ones were)
    yields E(k) = (1 - a^(k+1)) / (1 - a) tokens per forward over k + 1 tokens, at cost(k + 1). The length
    maximising E(k) / cost(k + 1) is verified; 0 (no draft: a plain step) when none beats 1 / cost(1).
    The curve is measured once, idle, after 256 cached tokens; forwards in the server run beside other work
    and over other caches, so with `in_situ` each cost is scaled by what forwards of its kind (one token;
    several) took there against the curve (`timed`, the curve in seconds): where a verify costs more,
    relative to a step, than the curve says, drafts shorten or stop.
    Acceptance is estimated per draft key (the drafter and, for lookup, the match length). A draft that was
    not verified is still scored against the tokens the target goes on to produce (`observe`), so a key
    that is skipped keeps being measured and comes back when it would pay."""

    def __init__(self, cost: Callable[[int], float], prior: float = 0.6, prior_weight: float = 2.0,
                 memory: float = 64.0, *, in_situ: bool = False) -> None:
        self.curve, self.in_situ = cost, in_situ
        self.prior, self.prior_weight, self.memory = prior, prior_weight, memory
        # Steps and verifies (several tokens): (sum of observed / curve cost, forwards), decayed like acceptance;
        # PRIOR_FORWARDS more at the curve's cost.
        self._scale: dict[bool, tuple[float, float]] = {}
        self._counts: dict[str, tuple[float, float]] = {}  # key -> (accepted, trials)
        self._shadow: tuple[int, list[int], str] | None = None  # (position, tokens, key) of a skipped draft

    def cost(self, tokens: int) -> float:
        """A forward over `tokens` tokens as forwards have cost in this process: the curve, scaled."""
        return self.curve(tokens) * self.scale(tokens > 1)

    def scale(self, verify: bool) -> float:
        observed, curve = self._scale.get(verify, (0.0, 0.0))
        return (observed + PRIOR_FORWARDS) / (curve + PRIOR_FORWARDS) if curve else 1.0

    def timed(self, tokens: int, seconds: float) -> None:
        """A decode forward over `tokens` tokens took `seconds`."""
        expected = self.curve(tokens)
        if not self.in_situ or expected <= 0 or seconds <= 0:
            return
        observed, curve = self._scale.get(tokens > 1, (0.0, 0.0))
        observed, curve = observed + seconds / expected, curve + 1.0
        if curve > self.memory:
            observed, curve = observed * self.memory / curve, self.memory
        self._scale[tokens > 1] = (observed, curve)

    def acceptance(self, key: str) -> float:
        accepted, trials = self._counts.get(key, (0.0, 0.0))
        return (accepted + self.prior * self.prior_weight) / (trials + self.prior_weight)

    def length(self, key: str, available: int) -> int:
        a = min(self.acceptance(key), 0.999)
        best, best_rate = 0, 1.0 / self.cost(1)
        expected = 1.0
        for k in range(1, available + 1):
            expected += a**k
            rate = expected / self.cost(k + 1)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def may_pay(self, available: int) -> bool:
        """Whether any draft could pay now: some source's acceptance seen so far (or the prior, for sources
        not seen yet) gives a length > 0 on this cost curve. When none can, the engine does not draft at all,
        so drafting costs nothing where it cannot pay (its bookkeeping included)."""
        return any(self.length(key, available) > 0 for key in (*self._counts, ""))

    def update(self, key: str, drafted: int, accepted: int) -> None:
        """A verified draft: `accepted` of its first `drafted` tokens agreed with the target."""
        if drafted <= 0:
            return
        hits, trials = self._counts.get(key, (0.0, 0.0))
        hits, trials = hits + accepted, trials + accepted + (1 if accepted < drafted else 0)
        if trials > self.memory:  # recent behaviour counts more: acceptance changes with the code
            hits, trials = hits * self.memory / trials, self.memory
        self._counts[key] = (hits, trials)

    def begin(self) -> None:
        """A new sequence: a skipped draft of the previous one can no longer be scored."""
        self._shadow = None

    def skipped(self, position: int, tokens: Sequence[int], key: str) -> None:
        """A draft for `position` (the index its first token would have had) was not verified. One is scored
        at a time: the next steps' drafts mostly repeat it shifted by a token, and replacing it before it is
        resolved would only ever record its early rejections."""
        if self._shadow is None:
            self._shadow = (position, list(tokens), key)

    def observe(self, ids: Sequence[int]) -> None:
        """Score the last skipped draft against the sequence the target produced, once it can be."""
        if self._shadow is None:
            return
        position, tokens, key = self._shadow
        produced = ids[position : position + len(tokens)]
        agree = 0
        while agree < len(produced) and produced[agree] == tokens[agree]:
            agree += 1
        if agree < len(produced) or len(produced) == len(tokens):
            self.update(key, len(tokens), agree)
            self._shadow = None

    def to_dict(self) -> dict[str, float]:
        scales = {f"cost x{' verify' if verify else ' step'}": round(self.scale(verify), 3) for verify in self._scale}
        return {**{key: round(self.acceptance(key), 3) for key in sorted(self._counts)}, **scales}
