"""Measured logit agreement, for tests whose tolerances come from the model under test, not from a constant:

- how far a runtime's batched forward (k tokens in one batch, what verification does) and its single-token
  forwards (what plain greedy does) disagree on the logits: the rounding that may flip a near-tie;
- how far two runtimes on the same weights (llama.cpp and torch) disagree on the logits of the same tokens;
- the spread of the top-2 logit gaps, which says whether such a bound excuses little or a lot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from codespec.decode.runtimes import Runtime, first_divergence


@dataclass(frozen=True)
class Spread:
    """Per position (of all prompts): the largest absolute logit difference over the vocabulary, and the
    reference's top-2 gap."""

    diffs: torch.Tensor  # [positions]
    gaps: torch.Tensor  # [positions]
    # Per position: how far the other logits move the reference top-1's lead over each of the reference's
    # next CANDIDATES tokens, |(x_top - x_j) - (r_top - r_j)|: what can reorder the tokens that compete.
    shifts: torch.Tensor  # [positions]

    @property
    def max_shift(self) -> float:
        return float(self.shifts.max())

    @property
    def max_diff(self) -> float:
        return float(self.diffs.max())

    def gap_quantile(self, q: float) -> float:
        return float(torch.quantile(self.gaps.double(), q))

    def share_below(self, gap: float) -> float:
        return float((self.gaps < gap).double().mean())


CANDIDATES = 8


def lead_shifts(logits: torch.Tensor, reference: torch.Tensor, candidates: int = CANDIDATES) -> torch.Tensor:
    """Per row: the largest change, between `reference` and `logits`, of the reference top-1's lead over its
    next `candidates` tokens."""
    top = torch.topk(reference, candidates + 1, dim=-1).indices
    lead = lambda x: x.gather(-1, top[..., :1]) - x.gather(-1, top[..., 1:])  # noqa: E731
    return (lead(logits) - lead(reference)).abs().amax(dim=-1)


def gaps_of(logits: torch.Tensor) -> torch.Tensor:
    """Top-1 minus top-2 logit, per row."""
    top = torch.topk(logits.float(), 2, dim=-1).values
    return top[..., 0] - top[..., 1]


def all_logits(runtime: Runtime, ids: Sequence[int]) -> torch.Tensor:
    """The runtime's logits at every position of `ids` from an empty cache, in its own prefill chunks (row i
    predicts ids[i + 1]); the cache is empty afterwards."""
    runtime.reset()
    try:
        rows = [runtime.forward(ids[start : start + runtime.prefill_chunk],
                                logits=len(ids[start : start + runtime.prefill_chunk]))
                for start in range(0, len(ids), runtime.prefill_chunk)]
    finally:
        runtime.reset()
    return torch.cat(rows)


def batched_vs_single(runtime: Runtime, prompts: Sequence[Sequence[int]], ks: Sequence[int]) -> Spread:
    """For each prompt and k: the last k tokens in one batch after the rest is cached, against the same k
    tokens fed one at a time (each attending to single-token KV, as plain greedy's do). Gaps are the
    single-token forwards' (plain greedy's view)."""
    diffs, gaps, shifts = [], [], []
    for prompt in prompts:
        for k in ks:
            head, tail = list(prompt[:-k]), list(prompt[-k:])
            runtime.reset()
            for start in range(0, len(head), runtime.prefill_chunk):
                runtime.forward(head[start : start + runtime.prefill_chunk], logits=1)
            batched = runtime.forward(tail, logits=k)
            runtime.truncate(len(head))
            single = torch.cat([runtime.forward([token], logits=1) for token in tail])
            diffs.append((batched - single).abs().amax(dim=-1))
            gaps.append(gaps_of(single))
            shifts.append(lead_shifts(batched, single))
    runtime.reset()
    return Spread(torch.cat(diffs), torch.cat(gaps), torch.cat(shifts))


def cross_runtime(first: torch.Tensor, reference: torch.Tensor) -> Spread:
    """Two runtimes' logits for the same positions; gaps are the reference's."""
    return Spread((first - reference).abs().amax(dim=-1), gaps_of(reference), lead_shifts(first, reference))


def must_agree(logits: torch.Tensor, reference: torch.Tensor, shift_bound: float, diff_bound: float,
               candidates: int = CANDIDATES) -> tuple[torch.Tensor, list[int]]:
    """The positions where `logits` cannot pick another argmax than `reference` while they stay within the
    bounds: the reference's top-1 leads its runner-up by more than `shift_bound` (the most its lead over any
    of the next `candidates` tokens may move) and the first token past those by more than 2 x `diff_bound`
    (the most any logit may move, up for that token and down for the top-1). Returns the mask of those
    positions and the ones among them whose argmax differs."""
    top = torch.topk(reference, candidates + 2, dim=-1).values
    checked = (top[:, 0] - top[:, 1] > shift_bound) & (top[:, 0] - top[:, candidates + 1] > 2 * diff_bound)
    differs = checked & (logits.argmax(dim=-1) != reference.argmax(dim=-1))
    return checked, differs.nonzero().flatten().tolist()


def last_logits(runtime: Runtime, ids: Sequence[int]) -> torch.Tensor:
    """The runtime's logits for the token after `ids`, from plain (chunked) forwards; the cache is empty after."""
    runtime.reset()
    try:
        for start in range(0, len(ids), runtime.prefill_chunk):
            logits = runtime.forward(ids[start : start + runtime.prefill_chunk], logits=1)
    finally:
        runtime.reset()
    return logits[-1]


def near_tie_ok(runtime: Runtime, prompt: Sequence[int], plain: Sequence[int], other: Sequence[int],
                threshold: float) -> tuple[bool, float | None]:
    """The near-tie rule: `other` equals `plain` (plain greedy of the same runtime), or at the first token
    where they differ, the token `other` chose trails plain's top-1 (plain forwards) by at most `threshold`:
    a tie that the batch's rounding may have flipped. Returns that deficit (None where they are equal; inf
    where one output is longer: these tests stop on no token, so a length is no tie)."""
    at = first_divergence(plain, other)
    if at is None:
        return True, None
    if at >= len(plain) or at >= len(other):
        return False, float("inf")
    logits = last_logits(runtime, list(prompt) + list(plain[:at]))
    deficit = float(logits.max() - logits[other[at]])
    return deficit <= threshold, deficit
