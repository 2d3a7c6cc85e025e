"""The KV-cache helpers the runtimes and the drafters share: shared prefixes, cutting a transformers cache, and
the buffer of a target's features that an EAGLE head drafts from (kept beside the KV, cut with it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # Compare in chunks first: prompts of consecutive keystrokes share thousands of tokens.
    step = 256
    while i + step <= n and list(a[i : i + step]) == list(b[i : i + step]):
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def rollback_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions past `length` (rejected drafts, or a prompt that diverged)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


class FeatureBuffer:
    """The target's features, one row per position its KV cache holds; grows by doubling, truncates in place."""

    def __init__(self) -> None:
        self._rows: torch.Tensor | None = None
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def append(self, rows: torch.Tensor) -> None:
        needed = self._length + rows.shape[0]
        if self._rows is None or needed > self._rows.shape[0] or self._rows.dtype != rows.dtype:
            grown = rows.new_empty((max(needed, 2 * (self._rows.shape[0] if self._rows is not None else 256)),
                                    rows.shape[1]))
            if self._rows is not None and self._length:
                grown[: self._length] = self._rows[: self._length]
            self._rows = grown
        self._rows[self._length : needed] = rows
        self._length = needed

    def truncate(self, length: int) -> None:
        self._length = min(self._length, max(0, length))

    def rows(self, start: int, stop: int) -> torch.Tensor:
        assert self._rows is not None and 0 <= start <= stop <= self._length
        return self._rows[start:stop]
