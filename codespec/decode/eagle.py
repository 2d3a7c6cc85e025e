"""An EAGLE-style draft head that drafts tokens from the target's own hidden states at the cost of one layer.

The head is one decoder layer that reads the target's last hidden state at position j (its
"feature", what its LM head turns into the next-token distribution) together with the embedding of token
j+1, and predicts the target's feature at j+1, which the target's own LM head decodes into a draft token.
The next draft step feeds that predicted feature back in. Drafting then costs one layer (plus the LM head)
per token instead of a whole small model, and the target's features come with every verify forward.

The head owns only its layer, its input projection and its final norm; the token embedding and the LM head
are the target's (`attach`), so a saved head is small and is only valid with the target it was trained on.
It drafts only from its draft vocabulary, the tokens the target ever chose in the training data (a few
thousand of Qwen's 151k): the LM head over those rows is what a draft token costs, and a token outside it
is still produced by the target's own verification, so nothing is lost but a draft."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import DynamicCache

from codespec.decode.drafters import (
    AutoregressiveDrafter,
    DraftModelConfig,
)
from codespec.decode.runtimes.kv import FeatureBuffer, common_prefix_len, rollback_cache
from codespec.errors import CodespecError

EAGLE_FILE = "eagle.json"
EAGLE_WEIGHTS = "eagle.safetensors"
FORMAT_VERSION = 1


def head_config(target_config):
    """The target's architecture with one decoder layer and no vocabulary of its own."""
    from transformers import AutoConfig

    values = target_config.to_dict()
    model_type = values.pop("model_type")
    values.update(num_hidden_layers=1, vocab_size=1, pad_token_id=None, bos_token_id=None, eos_token_id=None,
                  tie_word_embeddings=False)
    if values.get("layer_types"):
        values["layer_types"] = values["layer_types"][-1:]
    return AutoConfig.for_model(model_type, **values)


class EagleHead(nn.Module):
    def __init__(self, config, target_vocab_size: int) -> None:
        from transformers import AutoModel

        super().__init__()
        self.config = config
        self.target_vocab_size = target_vocab_size
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.trunk = AutoModel.from_config(config)  # one layer, rotary positions, causal mask, final norm
        self._embed: nn.Module | None = None
        self._lm_head: nn.Module | None = None
        # Sorted token ids the head may draft (None: the whole vocabulary), and the LM head's rows for them.
        self.register_buffer("draft_vocab", None)
        self._rows: torch.Tensor | None = None

    def set_draft_vocab(self, token_ids: torch.Tensor | None) -> EagleHead:
        device = self.fc.weight.device
        self.draft_vocab = None if token_ids is None else torch.unique(token_ids.long()).to(device)
        self._rows = None
        return self

    @classmethod
    def for_target(cls, target: nn.Module, seed: int = 0) -> EagleHead:
        """A fresh head for `target`, its final norm started from the target's (the features it predicts
        are that norm's output)."""
        torch.manual_seed(seed)
        head = cls(head_config(target.config), target.config.vocab_size)
        target_norm = getattr(target.base_model, "norm", None)
        if target_norm is not None and hasattr(head.trunk, "norm"):
            head.trunk.norm.load_state_dict(target_norm.state_dict())
        param = next(target.parameters())
        return head.to(device=param.device, dtype=torch.float32).attach(target)

    def attach(self, target: nn.Module) -> EagleHead:
        """Use `target`'s token embedding and LM head (kept outside the module: never trained, never saved)."""
        if target.config.vocab_size != self.target_vocab_size or target.config.hidden_size != self.config.hidden_size:
            raise CodespecError("this EAGLE head was trained for another target model (vocabulary or width differ)")
        object.__setattr__(self, "_embed", target.get_input_embeddings())
        object.__setattr__(self, "_lm_head", target.get_output_embeddings())
        # Gradients flow through them to the head, never into them.
        self._embed.weight.requires_grad_(False)
        self._lm_head.weight.requires_grad_(False)
        self._rows = None
        return self

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor,
                past_key_values: DynamicCache | None = None) -> torch.Tensor:
        """features [B, T, H] at positions j, next_ids [B, T] the tokens at j+1 -> predicted features at j+1."""
        if self._embed is None:
            raise CodespecError("EagleHead.attach(target) first: the head uses the target's embedding")
        dtype = self.fc.weight.dtype
        x = self.fc(torch.cat([self._embed(next_ids).to(dtype), features.to(dtype)], dim=-1))
        return self.trunk(inputs_embeds=x, past_key_values=past_key_values,
                          use_cache=past_key_values is not None).last_hidden_state

    def vocab_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary only (index i is token draft_vocab[i])."""
        weight = self._lm_head.weight
        if self.draft_vocab is None:
            return self._lm_head(features.to(weight.dtype))
        if self._rows is None or self._rows.device != weight.device or self._rows.dtype != weight.dtype:
            # Gathered once (the target's weights never change; `attach` freezes them), as a normal tensor
            # even under inference mode, so that training after an evaluation can use it.
            with torch.inference_mode(False), torch.no_grad():
                self._rows = weight.detach()[self.draft_vocab.to(weight.device)]
        return features.to(weight.dtype) @ self._rows.T

    def vocab_index(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Each token's index in the draft vocabulary, -100 (cross-entropy's ignore index) where it has none."""
        if self.draft_vocab is None:
            return token_ids
        position = torch.searchsorted(self.draft_vocab, token_ids).clamp_max(len(self.draft_vocab) - 1)
        return torch.where(self.draft_vocab[position] == token_ids, position, torch.full_like(position, -100))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the whole vocabulary, -inf outside the draft vocabulary."""
        logits = self.vocab_logits(features)
        if self.draft_vocab is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.target_vocab_size), float("-inf"))
        return full.index_copy_(-1, self.draft_vocab.to(logits.device), logits)


def is_eagle_dir(path: Path) -> bool:
    return (Path(path) / EAGLE_FILE).is_file()


def save_head(head: EagleHead, out: Path, *, target: str, dtype: torch.dtype, tokenizer=None) -> None:
    """OUT/eagle.json (what it is, for which target) + OUT/eagle.safetensors (+ the tokenizer, so that the
    directory names its vocabulary like any draft)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().to("cpu", dtype if p.is_floating_point() else p.dtype).contiguous()
               for name, p in head.state_dict().items()}
    save_file(weights, str(out / EAGLE_WEIGHTS))
    (out / EAGLE_FILE).write_text(json.dumps({
        "format": FORMAT_VERSION, "kind": "eagle-head", "target": target,
        "target_vocab_size": head.target_vocab_size, "config": head.config.to_dict()}, indent=1))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))


def load_head(path: Path, device: torch.device, dtype: torch.dtype) -> EagleHead:
    from safetensors.torch import load_file
    from transformers import AutoConfig

    meta = json.loads((Path(path) / EAGLE_FILE).read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise CodespecError(f"{path}: EAGLE head format {meta.get('format')!r}, this codespec reads {FORMAT_VERSION}")
    values = dict(meta["config"])
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    head = EagleHead(config, meta["target_vocab_size"])
    weights = load_file(str(Path(path) / EAGLE_WEIGHTS))
    head.set_draft_vocab(weights.get("draft_vocab"))  # sized before loading: the buffer may be absent
    head.load_state_dict(weights, strict=True)
    return head.to(device=device, dtype=dtype).eval()


class EagleDrafter(AutoregressiveDrafter):
    """Drafts with an EagleHead from the target's features (kept by the engine's torch runtime in `features`,
    one per cached target position; `attach` hands them over). The head has its own KV cache over
    (feature j, token j+1) pairs whose features are the target's; the pairs it adds while drafting
    (predicted features) are dropped after each draft."""

    name = "eagle"
    uses_target_features = True

    def __init__(self, head: EagleHead, features: FeatureBuffer | None = None, config: DraftModelConfig | None = None,
                 *, stop_ids: Iterable[int] = ()) -> None:
        super().__init__(config, stop_ids=stop_ids)  # _cached: ids[:pairs + 1], the tokens of the cached pairs
        self.head = head
        self.features = features
        self.device = next(head.parameters()).device
        self._target = None

    def attach(self, runtime, stop_ids: Iterable[int]) -> None:
        super().attach(runtime, stop_ids)
        if runtime is self._target:
            return
        features, model = getattr(runtime, "features", None), getattr(runtime, "model", None)
        if features is None or not isinstance(model, nn.Module):
            raise CodespecError("an EAGLE head drafts from the target's features: it needs the torch runtime")
        self.head.attach(model)
        self.features, self._target = features, runtime

    def _can_draft(self, ids: Sequence[int]) -> bool:
        pairs = len(ids) - 1  # pair j = (feature j, token j+1); the target's features cover ids[:-1]
        return pairs >= 1 and self.features is not None and len(self.features) >= pairs

    def _start(self, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        pairs = len(ids) - 1
        keep = min(max(common_prefix_len(self._cached, ids) - 1, 0), pairs - 1)
        if self._cache is None:
            self._cache, keep = DynamicCache(), 0
        rollback_cache(self._cache, keep)
        features = self.features.rows(keep, pairs).unsqueeze(0)
        next_ids = torch.tensor([list(ids[keep + 1 : pairs + 1])], device=self.device)
        self._cached = list(ids)
        return features, next_ids

    def _forward_step(self, step_input: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        features, next_ids = step_input
        predicted = self.head(features, next_ids, self._cache)[:, -1:]
        return self.head.logits(predicted)[0, -1].float(), predicted

    def _next_input(self, predicted: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
        return predicted, torch.tensor([[token]], device=self.device)

    def _end(self, ids: Sequence[int]) -> None:
        rollback_cache(self._cache, len(ids) - 1)  # keep only the pairs with the target's own features
