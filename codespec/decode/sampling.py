"""Token choice for target and draft: greedy, or temperature / top-p sampling with a seeded generator.
The target and the drafters use the same processing, which is what makes speculative sampling exact."""

from __future__ import annotations

import torch


class Sampler:
    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> None:
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        self.temperature = temperature
        self.top_p = top_p
        self.greedy = temperature == 0.0
        self.generator = torch.Generator()
        self.generator.manual_seed(seed if seed is not None else torch.seed())

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The sampling distribution for each row of `logits` ([..., vocab]), in float32."""
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest set whose mass reaches top_p (the token that crosses it included).
            outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= self.top_p
            sorted_probs = sorted_probs.masked_fill(outside, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs

    def sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs.cpu(), 1, generator=self.generator))

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator))

    def draft(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """A draft token from one row of logits and, for greedy, its confidence; else its distribution q."""
        if self.greedy:
            probs = torch.softmax(logits.float(), dim=-1)
            confidence, token = probs.max(dim=-1)
            return int(token), confidence
        q = self.probs(logits).cpu()
        return self.sample(q), q
