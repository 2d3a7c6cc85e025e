"""The torch/transformers runtime: any HF causal LM on CPU or CUDA, with a DynamicCache cut in place.

It also keeps the target's last hidden state at every cached position when a drafter reads them (an EAGLE
head), which only this runtime can give. Each cached prompt (slot) has its own DynamicCache and features; a
slot made from another's prefix gets a copy of that prefix."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from codespec.decode.runtimes import Runtime
from codespec.decode.runtimes.kv import FeatureBuffer, rollback_cache

# Prompt tokens per prefill forward. A cancel is seen between chunks, so a superseded request stops within
# one chunk instead of finishing a whole prompt (~1.3 s for 64 tokens of the 0.5B on a slow 2-core CPU);
# on CUDA a forward's fixed cost is what matters, hence bigger chunks there.
PREFILL_CHUNK = {"cpu": 64, "cuda": 512}
DEFAULT_SLOTS = 4


class TorchRuntime(Runtime):
    name = "torch"

    def __init__(self, model: torch.nn.Module, prefill_chunk: int | None = None, slots: int = DEFAULT_SLOTS) -> None:
        super().__init__()
        self.max_slots = max(1, slots)
        self.model = model
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        # fp32 batched and single-token forwards agree on the argmax; bf16/fp16 may not at a near-tie.
        self.exact_batching = self.dtype == torch.float32
        self.prefill_chunk = prefill_chunk or PREFILL_CHUNK.get(self.device.type, PREFILL_CHUNK["cpu"])
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.vocab_size = model.config.vocab_size
        # The target's last hidden state at every cached position, kept only for a drafter that reads it.
        self.features = FeatureBuffer()
        self.collect_features = False
        self._cache: DynamicCache | None = None
        self._parked: dict[int, tuple[DynamicCache | None, FeatureBuffer]] = {}  # the inactive slots' state

    def forward(self, tokens: Sequence[int], logits: int) -> torch.Tensor:
        if self._cache is None:
            self._cache = DynamicCache()
        input_ids = torch.tensor([list(tokens)], device=self.device)
        with torch.inference_mode():
            if self.collect_features:
                # The trunk and the LM head apart, to keep the last hidden states (what the LM head reads).
                hidden = self.model.base_model(input_ids=input_ids, past_key_values=self._cache,
                                               use_cache=True).last_hidden_state
                self.features.append(hidden[0])
                self.cached.extend(tokens)
                return self.model.get_output_embeddings()(hidden[0, -logits:]).float()
            out = self.model(input_ids=input_ids, past_key_values=self._cache, use_cache=True,
                             logits_to_keep=logits)
        self.cached.extend(tokens)
        return out.logits[0].float()

    def truncate(self, length: int) -> None:
        if length <= 0:
            self._cache = None
        elif self._cache is not None:
            rollback_cache(self._cache, length)
        del self.cached[max(length, 0) :]
        self.features.truncate(length)

    def _activate(self, index: int) -> None:
        if index != self.active:
            self._parked[self.active] = (self._cache, self.features)
            self._cache, self.features = self._parked.pop(index, (None, FeatureBuffer()))
        super()._activate(index)

    def _copy_slot(self, source: int, target: int, length: int) -> None:
        cache, features = (self._cache, self.features) if source == self.active else self._parked.get(source, (None, FeatureBuffer()))
        cache = copy.deepcopy(cache) if cache is not None and length else None
        if cache is not None:
            rollback_cache(cache, length)
        copied = copy.deepcopy(features)
        copied.truncate(length)
        self._parked[target] = (cache, copied)

    def _clear_slot(self, index: int) -> None:
        self._parked.pop(index, None)

    def keep_features(self, on: bool) -> None:
        if self.collect_features != on:
            self.collect_features = on
            self.features.truncate(0)

    def sync(self, tokens: Sequence[int], *, place: bool = True) -> int:
        keep = super().sync(tokens, place=place)
        if self.collect_features and len(self.features) < keep:
            # Positions cached while no drafter wanted features have none: they are computed again.
            keep = len(self.features)
            self.truncate(keep)
        return keep

    def describe_settings(self) -> dict:
        return {"runtime": self.name, "device": str(self.device), "dtype": str(self.dtype),
                "threads": torch.get_num_threads()}

    def describe(self) -> dict:
        return {**super().describe(), "device": str(self.device), "dtype": str(self.dtype).replace("torch.", "")}
