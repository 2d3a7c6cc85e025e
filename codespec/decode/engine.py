"""The speculative-decoding loop that turns cheap drafts into exactly the output the target would produce.

The decode loop: draft cheaply, verify all drafts in one target forward, keep exactly what the target
would have produced. Greedy output is identical to plain greedy; sampling output has exactly the target's
distribution (rejection sampling). The target KV cache survives between calls, so a prompt that shares a
prefix with the previous one only prefills the new tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from codespec.decode.api import (
    CancelToken,
    GenerationResult,
    GenerationStats,
    StepEvent,
    StopFn,
    final_result,
)
from codespec.decode.drafters import (
    CombinedDrafter,
    CostAwareLength,
    Draft,
    Drafter,
    DraftModelConfig,
    LookupConfig,
    LookupDrafter,
    ModelDrafter,
)
from codespec.decode.eagle import EagleDrafter, EagleHead
from codespec.decode.runtimes import ForwardInterrupted, Runtime, cached_cost_curve
from codespec.decode.runtimes.torch_runtime import TorchRuntime
from codespec.decode.sampling import Sampler
from codespec.errors import CodespecError
from codespec.fim import stop_token_ids
from codespec.modes import DRAFTING_MODES

EXPLORE_EVERY = 4  # with drafting gated off, one call in this many still drafts (and measures) without verifying


class Engine:
    def __init__(
        self,
        target,
        draft=None,
        drafting: str = "lookup",
        *,
        drafter: Drafter | None = None,
        lookup: LookupConfig | None = None,
        draft_config: DraftModelConfig | None = None,
        step_delay_s: float = 0.0,
        stop_token_ids: Sequence[int] | None = None,
        prefill_chunk: int | None = None,
        served: dict[str, Any] | None = None,
    ) -> None:
        """`target` / `draft` are LoadedModel-like objects (with .model and .tokenizer), bare HF models, or
        (the target) a Runtime. `drafter`: the model drafter, built by the caller (`drafter_from(draft)`, or any
        Drafter), in place of the one `draft` would give; the modes "model" and "both" draft with it.
        `prefill_chunk`: prompt tokens per prefill forward (default: the runtime's). `served`: what serves, as
        `codespec/stats` shows it (the caller knows the specs and any runtime fallback)."""
        model = _model_of(target)
        self.runtime: Runtime = model if isinstance(model, Runtime) else TorchRuntime(model)
        self.tokenizer = getattr(target, "tokenizer", None)
        if prefill_chunk is not None:
            if prefill_chunk < 1:
                raise CodespecError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
            self.runtime.prefill_chunk = prefill_chunk
        if drafting not in DRAFTING_MODES:
            raise CodespecError(f"unknown drafting mode {drafting!r}; use one of {', '.join(DRAFTING_MODES)}")
        if drafting in ("model", "both") and draft is None and drafter is None:
            raise CodespecError(f"drafting {drafting!r} needs a draft model")
        if draft is not None and not isinstance(_model_of(draft), EagleHead):
            _check_same_vocabulary(target, draft, self.runtime.vocab_size)
        if drafter is None and draft is not None:
            drafter = drafter_from(draft, draft_config)
        self.drafting = drafting
        self.step_delay_s = step_delay_s
        self.lookup = LookupDrafter(lookup)
        self.stop_token_ids = set(stop_token_ids if stop_token_ids is not None else _default_stops(self))
        self.model_drafter = self._attached(drafter) if drafter is not None else None
        self.max_positions = self.runtime.max_positions
        # None: verify every draft the drafter offers; set by calibrate() from the runtime's cost curve.
        self.draft_length: CostAwareLength | None = None
        self.served: dict[str, Any] = dict(served or {})
        self._gated_calls = 0
        self.prefills_ahead = True  # this process holds the KV: idle time can compute a prompt's ahead of it

    def _attached(self, drafter: Drafter) -> Drafter:
        drafter.attach(self.runtime, self.stop_token_ids)  # a draft ends at a token that ends the generation
        return drafter

    def collects_features(self, drafter: Drafter | None = None) -> bool:
        """Whether the target keeps its features: for the engine's model drafter, or this call's."""
        return any(d is not None and d.uses_target_features for d in (self.model_drafter, drafter))

    def mode_drafter(self, drafting: str, drafter: Drafter | None = None) -> Drafter | None:
        """The drafter of a mode; `drafter` stands in for the engine's model drafter (modes model and both)."""
        if drafting == "none":
            return None
        if drafting == "lookup":
            return self.lookup
        model_drafter = drafter or self.model_drafter
        if model_drafter is None:
            raise CodespecError(f"drafting {drafting!r} needs a draft model")
        if drafting == "model":
            return model_drafter
        return CombinedDrafter(self.lookup, model_drafter)

    @property
    def prefill_chunk(self) -> int:
        return self.runtime.prefill_chunk

    def cached_prefix(self, prompt_ids: Sequence[int]) -> int:
        """How many of a prompt's tokens some cached prompt already holds (what `stream` would not prefill)."""
        return self.runtime.cached_prefix([int(t) for t in prompt_ids[:-1]])

    def prefill(self, prompt_ids: Sequence[int], *, cancel: CancelToken | None = None,
                chunk: int | None = None) -> int:
        """Compute a prompt's KV ahead of its request (idle-time work): prompt[:-1] into a cached prompt, in
        chunks of `chunk` tokens with `cancel` looked at between two, so a request waits for one chunk at most.
        Returns the tokens computed; the chunks done stay cached when cancelled."""
        prompt = [int(t) for t in prompt_ids[:-1]]
        if self.max_positions and len(prompt) >= self.max_positions:
            raise CodespecError(f"prompt of {len(prompt)} tokens exceeds the model's context window")
        step = chunk or self.prefill_chunk
        done = 0
        with torch.inference_mode():
            self.runtime.interrupt_with(None)  # a chunk always finishes: the KV ahead is this call's point
            try:
                keep = self.runtime.sync(prompt, place=False)
                for start in range(keep, len(prompt), step):
                    if cancel is not None and cancel.cancelled:
                        break
                    self.runtime.forward(prompt[start : start + step], logits=1)
                    done += min(step, len(prompt) - start)
            except BaseException:
                self.reset_cache()  # a forward that died may have left the cache half-written
                raise
        return done

    def prefill_tokens_per_s(self) -> float | None:
        """Prefill speed from the runtime's measured cost curve (tokens per second in prefill-sized chunks)."""
        curve = self.runtime.cost_curve
        if curve is None:
            return None
        k = max(k for k, _ in curve.points)
        return k / curve.cost(k) if curve.cost(k) > 0 else None

    def cost_points(self) -> tuple[tuple[int, float], ...]:
        curve = self.runtime.cost_curve
        return curve.points if curve is not None else ()

    def describe(self) -> dict[str, Any]:
        """The runtime (its cost curve), the acceptance the cost-aware draft length works from, the cached
        prompts (KV slots)."""
        policy = self.draft_length
        return {"runtimeInfo": self.runtime.describe(),
                "draftAcceptance": policy.to_dict() if policy is not None else None,
                "kv": self.runtime.describe_slots()}

    def reset_cache(self) -> None:
        self.runtime.reset()
        if self.model_drafter is not None:
            self.model_drafter.reset()

    def generate(self, prompt_ids: Sequence[int], **kwargs) -> GenerationResult:
        return final_result(self.stream(prompt_ids, **kwargs))

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
        drafter: Drafter | None = None,
    ) -> Iterator[StepEvent]:
        """`drafting`: this call's mode (default: the engine's); `drafter`: this call's model drafter (from
        `drafter_from`) in place of the engine's."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise CodespecError("empty prompt")
        if self.max_positions and len(prompt) + max_new_tokens > self.max_positions:
            raise CodespecError(
                f"prompt of {len(prompt)} tokens + {max_new_tokens} new exceeds the model's "
                f"context window of {self.max_positions} tokens"
            )
        sampler = Sampler(temperature, top_p, seed)
        if drafter is not None:
            self._attached(drafter)
        chosen = self.mode_drafter(drafting or self.drafting, drafter)
        stats = GenerationStats(prompt_tokens=len(prompt))
        # No draft is longer than the budget or than drafters make them (lookup's cap is the longest): asking
        # the cost curve about longer ones would cost a scan per key and length on every request, deciding nothing.
        reach = max(1, min(max_new_tokens - 1, max(self.lookup.config.max_draft,
                                                   getattr(getattr(chosen, "config", None), "max_draft", 0))))
        if chosen is not None and self.draft_length is not None and not self.draft_length.may_pay(reach):
            # Never slower than plain: where no draft can pay, do not draft. One call in EXPLORE_EVERY still
            # drafts (verifying nothing that cannot pay) so that acceptance keeps being measured and drafting
            # comes back when the code makes it pay.
            self._gated_calls += 1
            if self._gated_calls % EXPLORE_EVERY:
                chosen, stats.drafting_off = None, True
        started = time.perf_counter()
        try:
            yield from self._decode(prompt, max_new_tokens, sampler, chosen, stats, cancel, stop,
                                    extra_streams, max_time_s, started, self.collects_features(drafter))
        except GeneratorExit:  # the consumer stopped listening at a step boundary: the cache is consistent
            raise
        except BaseException:
            self.reset_cache()  # a forward that died may have left the cache half-written
            if drafter is not None:
                drafter.reset()
            raise
        finally:
            self.runtime.interrupt_with(None)

    @torch.inference_mode()
    def _decode(self, prompt, max_new_tokens, sampler, drafter, stats, cancel, stop, extra_streams,
                max_time_s, started, features) -> Iterator[StepEvent]:
        self.runtime.interrupt_with(None)
        finish = None if self._prefill(prompt, stats, cancel, features) else "cancelled"
        # A decode forward in flight stops at the cancel (its tokens follow the cursor the user just moved on
        # from: nothing of it is reused). A prefill chunk is left to finish: it is the prefix the next
        # keystroke's prompt shares, and stopping it lost every chunk to the next keystroke while the user
        # typed (docs/benchmarks.md, "A lesson on the way").
        self.runtime.interrupt_with(cancel)
        decode_started = time.perf_counter()
        if drafter is not None and finish is None:
            drafter.begin(prompt, extra_streams)
            if self.draft_length is not None:
                self.draft_length.begin()
            stats.draft_s += time.perf_counter() - decode_started
        ids = list(prompt)
        generated: list[int] = []
        stop_token = None
        text = ""
        while finish is None:
            if len(generated) >= max_new_tokens:
                finish = "max_tokens"
            elif cancel is not None and cancel.cancelled:
                finish = "cancelled"
            elif max_time_s is not None and time.perf_counter() - started > max_time_s:
                finish = "time"
            if finish:
                break
            try:
                new_tokens = self._step(ids, max_new_tokens - len(generated), sampler, drafter, stats)
            except ForwardInterrupted:  # the runtime dropped the step: the cache holds ids[:-1], as before it
                stats.interrupted += 1
                finish = "cancelled"
                break
            _count_if_cancelled(cancel, stats)
            if self.step_delay_s:
                time.sleep(self.step_delay_s)
            for i, token in enumerate(new_tokens):
                if token in self.stop_token_ids:
                    new_tokens, finish, stop_token = new_tokens[:i], "eos", token
                    break
            generated.extend(new_tokens)
            new_text = self._decode_text(generated)
            if stop is not None:
                cut = stop(new_text)
                if cut is not None:
                    new_text, finish = new_text[:cut], "stop"
            delta = new_text[len(text) :] if new_text.startswith(text) else ""
            text = new_text
            stats.new_tokens = len(generated)
            stats.decode_s = time.perf_counter() - decode_started
            if delta or new_tokens:
                yield StepEvent(text=delta, token_ids=new_tokens)
        stats.decode_s = time.perf_counter() - decode_started
        # Text held back as a possible partial UTF-8 sequence is final now.
        final_text = text if finish == "stop" else self.tokenizer_decode(generated)
        if final_text != text and final_text.startswith(text):
            yield StepEvent(text=final_text[len(text) :], token_ids=[])
        result = GenerationResult(text=final_text, token_ids=generated, finish_reason=finish, stats=stats,
                                  stop_token=stop_token)
        yield StepEvent(text="", token_ids=[], done=True, result=result)

    def _prefill(self, prompt: list[int], stats: GenerationStats, cancel: CancelToken | None = None,
                 features: bool = False) -> bool:
        """Fill the target cache with prompt[:-1], reusing the shared prefix of the previous call, in chunks;
        False when cancelled between two (the chunks done stay cached: the next prompt may share them).
        `features`: the target keeps its features (a drafter of this call uses them)."""
        t0 = time.perf_counter()
        self.runtime.keep_features(features)  # decided per call: this call's drafter may not be the last one's
        keep = self.runtime.sync(prompt[:-1])
        stats.reused_tokens = keep
        stats.prefill_tokens = len(prompt) - keep
        complete = True
        for start in range(keep, len(prompt) - 1, self.prefill_chunk):
            if cancel is not None and cancel.cancelled:
                complete = False
                stats.prefill_tokens = start - keep
                break
            self.runtime.forward(prompt[start : min(start + self.prefill_chunk, len(prompt) - 1)], logits=1)
            _count_if_cancelled(cancel, stats)
        stats.prefill_s = time.perf_counter() - t0
        return complete

    def _step(self, ids: list[int], budget: int, sampler: Sampler, drafter: Drafter | None,
              stats: GenerationStats) -> list[int]:
        """One speculative step: draft, verify in one forward, accept, roll back the rest.
        Invariant: the target cache holds ids[:-1]; ids[-1] is fed with the drafts."""
        t0 = time.perf_counter()
        # The target's own token always comes on top of the drafts, so never draft the last budget slot.
        draft = drafter.propose(ids, budget - 1, sampler) if drafter is not None else None
        drafts = draft.tokens[: budget - 1] if draft else []
        if drafts and self.draft_length is not None:
            # Verify only as many as pay on this runtime's cost curve; a skipped draft is still scored.
            key = draft.key or draft.source
            keep = self.draft_length.length(key, len(drafts))
            if keep == 0:
                self.draft_length.skipped(len(ids), drafts, key)
            drafts = drafts[:keep]
        t1 = time.perf_counter()
        logits = self.runtime.forward([ids[-1], *drafts], logits=len(drafts) + 1)
        forward_s = time.perf_counter() - t1
        stats.target_forwards += 1
        stats.timed_forward(len(drafts) + 1, forward_s)
        if self.draft_length is not None:
            self.draft_length.timed(len(drafts) + 1, forward_s)
        if sampler.greedy:
            accepted, next_token = _verify_greedy(drafts, logits)
        else:
            accepted, next_token = _verify_sampling(draft, drafts, logits, sampler)
        self.runtime.truncate(len(ids) + accepted)
        if drafts:
            source = draft.source
            if self.draft_length is not None:
                self.draft_length.update(draft.key or source, len(drafts), accepted)
            stats.drafted += len(drafts)
            stats.accepted += accepted
            stats.drafted_by[source] = stats.drafted_by.get(source, 0) + len(drafts)
            stats.accepted_by[source] = stats.accepted_by.get(source, 0) + accepted
            stats.forwards_by[source] = stats.forwards_by.get(source, 0) + 1
            drafter.feedback(len(drafts), accepted)
        new_tokens = [*drafts[:accepted], next_token]
        ids.extend(new_tokens)
        t2 = time.perf_counter()
        if self.draft_length is not None and drafter is not None:
            self.draft_length.observe(ids)
        stats.draft_s += (t1 - t0) + (time.perf_counter() - t2) if drafter is not None else 0.0
        return new_tokens

    def calibrate(self, model_key: str, curves: Path, *, drafts: bool = True) -> CostAwareLength | None:
        """Measure the target's cost curve, or read it from the machine's cache of curves at `curves`
        (`cached_cost_curve`, keyed by `model_key` and the runtime's settings): it sizes the prompt (prefill
        speed) and, with `drafts`, makes the loop verify drafts only where they pay."""
        self.reset_cache()
        self.runtime.interrupt_with(None)  # measuring forwards belong to no request
        curve = cached_cost_curve(self.runtime, model_key, curves)
        self.draft_length = CostAwareLength(curve.cost, in_situ=True) if drafts else None
        return self.draft_length

    def _decode_text(self, tokens: list[int]) -> str:
        text = self.tokenizer_decode(tokens)
        # Trailing replacement characters may be an incomplete multi-byte character: hold them back.
        return text.rstrip("\ufffd")

    def tokenizer_decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _count_if_cancelled(cancel: CancelToken | None, stats: GenerationStats) -> None:
    """Called after each target forward (prefill chunk or decode step): one that ended after the cancel
    arrived is work wasted on a stale request, the number the server reports and tests bound."""
    if cancel is not None and cancel.cancelled_at is not None:
        stats.forwards_after_cancel += 1


def _verify_greedy(drafts: list[int], logits: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix of drafts that equals the target's argmax, then the target's next token."""
    choice = logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == choice[accepted]:
        accepted += 1
    return accepted, choice[accepted]


def _verify_sampling(draft: Draft | None, drafts: list[int], logits: torch.Tensor,
                     sampler: Sampler) -> tuple[int, int]:
    """Speculative sampling: accept d with probability min(1, p(d)/q(d)); on rejection sample from
    norm(max(0, p - q)). A draft without distributions is a point mass (q(d) = 1)."""
    p = sampler.probs(logits).cpu()
    for i, token in enumerate(drafts):
        q = draft.probs[i] if draft is not None and draft.probs is not None else None
        q_token = float(q[token]) if q is not None else 1.0
        if sampler.uniform() * q_token < float(p[i, token]):
            continue
        if q is None:
            residual = p[i].clone()
            residual[token] = 0.0
        else:
            residual = torch.clamp(p[i] - q, min=0.0)
        total = float(residual.sum())
        return i, sampler.sample(residual / total if total > 0 else p[i])
    return len(drafts), sampler.sample(p[len(drafts)])


def drafter_from(draft, config: DraftModelConfig | None = None) -> Drafter:
    """The model drafter of a draft: a ModelDrafter for a draft model, an EagleDrafter for an EAGLE head
    (which drafts from the target's features once an engine attaches it)."""
    model = _model_of(draft)
    if isinstance(model, EagleHead):
        return EagleDrafter(model, None, config)
    return ModelDrafter(model, config)


def _model_of(obj):
    # A LoadedModel wraps the HF model; a bare HF causal LM is used as it is (its `.model` is the trunk).
    return obj if isinstance(obj, torch.nn.Module | Runtime) else obj.model


def _check_same_vocabulary(target, draft, target_vocab: int) -> None:
    """Drafts are token ids of the target's vocabulary: a draft model with another tokenizer cannot work."""
    target_tok, draft_tok = getattr(target, "tokenizer", None), getattr(draft, "tokenizer", None)
    if target_tok is not None and draft_tok is not None and target_tok is not draft_tok:
        same = len(target_tok) == len(draft_tok) and target_tok.get_vocab() == draft_tok.get_vocab()
    else:
        same = target_vocab == _model_of(draft).config.vocab_size
    if not same:
        raise CodespecError("the draft model does not share the target's tokenizer; pick a draft of the same family")


def _default_stops(engine: Engine) -> list[int]:
    if engine.tokenizer is None:
        eos = getattr(getattr(engine.runtime, "model", None), "config", None)
        eos = getattr(eos, "eos_token_id", None)
        return [eos] if isinstance(eos, int) else list(eos or [])
    return stop_token_ids(engine.tokenizer)
