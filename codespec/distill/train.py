"""Distillation training: fits the draft model (LoRA or all weights) or an EAGLE head to the target.

Distillation of the draft: minimise KL(target || draft) on the target's top-k labels (plus an optional
cross-entropy on the target's argmax, the token greedy verification accepts), by LoRA adapters merged at
the end (`lora`) or by training every weight but the token embedding (`full`); or an EAGLE head on the
target's features (`eagle`, codespec/distill/head.py).

Distribution is `accelerate`'s: run as `accelerate launch -m codespec.cli distill ...`, every process takes
its share of each batch's examples and DDP sums the gradients; one process (CPU, one GPU) needs nothing
else. Checkpoints hold the trained weights, the optimizer, the step and the data cursor; a run resumed from one
continues exactly as if it had not stopped (the data order is a function of the seed and the epoch)."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from codespec.distill import DIVERGENCES
from codespec.distill.data import Example
from codespec.distill.head import head_loss, head_positions
from codespec.distill.teacher import Labels, save_atomic
from codespec.errors import CodespecError

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
METHODS = ("lora", "full", "eagle")


@dataclass
class TrainConfig:
    method: str = "lora"  # one of METHODS
    # "bfloat16"/"float16": the forward and backward compute in it over fp32 weights (torch.autocast), so
    # that full fine-tuning's small updates are not rounded away. None: in the weights' own dtype.
    autocast: str | None = None
    seed: int = 0
    lr: float = 3e-4
    warmup_steps: int = 4
    rank: int = 16
    alpha: int = 32
    # Only the last N decoder layers get adapters: backward then stops there, which on CPU nearly halves
    # a step. None = every layer.
    lora_layers: int | None = None
    ce_weight: float = 0.1
    divergence: str = "kl"  # see distill_loss
    # Loss weight of the positions of "fim-greedy" examples (the target's own continuations: what the
    # draft meets at decode time) relative to the others.
    greedy_weight: float = 1.0
    # Loss weight of the positions of "fim-draft" examples (the draft's own middles) after the draft's first
    # disagreement with the target's argmax. Greedy verification rejects everything after that token, so
    # decoding never meets those states: the draft always drafts from a prefix of the target's greedy path.
    offpath_weight: float = 1.0
    batch_examples: int = 4  # examples per optimizer step (gradient accumulation, one example at a time)
    epochs: float = 2.0
    max_steps: int | None = None
    max_minutes: float | None = None
    checkpoint_every: int = 10
    # Weight averaging (SWA with a constant learning rate): from this share of the planned steps on, the
    # trained weights after every step join a running mean, which becomes the saved draft. Small batches at
    # a constant rate leave the last weights noisy; their mean is the flat middle they move around. None: off.
    average_from: float | None = None


@dataclass
class TrainState:
    step: int = 0
    examples_seen: int = 0  # cursor into the seeded example order
    losses: list[float] = field(default_factory=list)  # mean loss per optimizer step
    seconds: float = 0.0
    stopped_by: str = ""
    averaged_steps: int = 0  # how many steps' weights the saved draft is the mean of (0: the last weights)


def distill_loss(draft_logits: torch.Tensor, labels: Labels, ce_weight: float, divergence: str = "kl") -> torch.Tensor:
    """Per-position loss: a divergence between the target's distribution p and the draft's q over the
    partition {top-k tokens, everything else} (exact for the mass the labels keep, cheap to store) +
    ce_weight * cross-entropy on the target's top-1 token. `divergence`: "kl" KL(p || q) (mass-covering),
    "rkl" KL(q || p) (mode-seeking), "tvd" total variation (bounds the loss in acceptance of a sampled draft)."""
    log_q = torch.log_softmax(draft_logits.float(), dim=-1)
    log_p = labels.logprobs.float()
    ids = labels.ids.long().to(log_q.device)
    log_p = log_p.to(log_q.device)
    log_q_top = log_q.gather(-1, ids)
    p, q = log_p.exp(), log_q_top.exp()
    p_rest = (1.0 - p.sum(-1)).clamp_min(1e-8)
    q_rest = (1.0 - q.sum(-1)).clamp_min(1e-8)
    if divergence == "kl":
        gap = (p * (log_p - log_q_top)).sum(-1) + p_rest * (p_rest.log() - q_rest.log())
    elif divergence == "rkl":
        gap = (q * (log_q_top - log_p)).sum(-1) + q_rest * (q_rest.log() - p_rest.log())
    elif divergence == "tvd":
        gap = 0.5 * ((p - q).abs().sum(-1) + (p_rest - q_rest).abs())
    else:
        raise ValueError(f"divergence {divergence!r}: one of {', '.join(DIVERGENCES)}")
    ce = -log_q_top[:, 0]
    return gap + ce_weight * ce


def position_weights(example: Example, label: Labels, config: TrainConfig) -> torch.Tensor:
    """Loss weight of each trained position of `example` (all 1 by default): `greedy_weight` in the target's
    greedy middles; in the draft's own middles, `offpath_weight` once an earlier drafted token was not the
    target's argmax (the first position that disagrees still weighs 1: that is where the draft must learn)."""
    weights = torch.ones(example.positions)
    if example.kind == "fim-greedy":
        return weights * config.greedy_weight
    if example.kind == "fim-draft" and config.offpath_weight != 1.0:
        drafted = torch.tensor(example.ids[example.train_from:], dtype=torch.long)
        agrees = (drafted == label.ids[: len(drafted), 0].long()).long()
        # Position j is on the target's path when the j drafted tokens before it all agreed.
        on_path = torch.cat([torch.ones(1, dtype=torch.long), agrees.cumprod(0)])
        weights = torch.where(on_path.bool(), weights, torch.full_like(weights, config.offpath_weight))
    return weights


def draft_logits(model: torch.nn.Module, example: Example) -> torch.Tensor:
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([example.ids], device=device), logits_to_keep=example.positions,
                use_cache=False)
    return out.logits[0]


def compute_context(model: torch.nn.Module, autocast: str | None):
    """Where the draft's forwards (and their backward) run: autocast to `autocast` over fp32 weights."""
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=getattr(torch, autocast))


def trainable(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    """The model whose parameters with requires_grad the optimizer trains: peft's wrapper for lora, the
    model itself for full."""
    if config.method == "lora":
        return add_lora(model, config)
    if config.method == "full":
        return unfreeze_all_but_embeddings(model)
    if config.method == "eagle":
        return model.requires_grad_(True)  # the head's own weights; the target's embedding is not its own
    raise CodespecError(f"unknown distillation method {config.method!r}; use one of {', '.join(METHODS)}")


def unfreeze_all_but_embeddings(model: torch.nn.Module) -> torch.nn.Module:
    """Every weight trains except the token embedding (and the LM head, tied to it in small Qwen models):
    a quarter of the 0.5B draft's weights, whose rows for tokens the repository never uses would only
    cost optimizer state."""
    frozen = {id(model.get_input_embeddings().weight)}
    if model.get_output_embeddings() is not None:
        frozen.add(id(model.get_output_embeddings().weight))
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) not in frozen)
    return model


def add_lora(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    modules = [m for m in LORA_MODULES if m in names]
    if not modules:
        raise CodespecError("the draft model has none of the projections LoRA adapts (q_proj, ...)")
    layers = model.config.num_hidden_layers
    wanted = None
    if config.lora_layers is not None:
        wanted = list(range(max(0, layers - config.lora_layers), layers))
    torch.manual_seed(config.seed)  # LoRA's A matrices are random: the seed fixes them
    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, target_modules=modules,
                      layers_to_transform=wanted, bias="none")
    return get_peft_model(model, lora)


def example_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def make_accelerator(device: torch.device):
    """One process: the model stays where it was loaded. Under `accelerate launch`: one process per device."""
    from accelerate import Accelerator

    return Accelerator(cpu=device.type == "cpu", device_placement=False)


def train_draft(model: torch.nn.Module, examples: Sequence[Example], labels: Sequence[Labels], config: TrainConfig,
                checkpoint: Path, *, data_key: str, progress: bool = True, accelerator=None,
                out_of_time: Callable[[], bool] | None = None) -> tuple[torch.nn.Module, TrainState]:
    """Train `model` by `config.method` (returned as `trainable` made it: wrapped by peft for lora) and the
    final TrainState. Stops at the first of: the epochs, `max_steps`, `max_minutes` of training (counted
    over resumed runs too), and `out_of_time()` (this run's own deadline), asked before each step."""
    from tqdm import tqdm

    if not examples:
        raise CodespecError("no training examples (is the repository empty, or all of it held out?)")
    accelerator = accelerator or make_accelerator(next(model.parameters()).device)
    trained = trainable(model, config)
    trained.train()
    params = [p for p in trained.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    state, saved_average = TrainState(), None
    key = {"data": data_key, "config": _resume_key(config)}
    if checkpoint.exists():
        state, saved_average = _load_checkpoint(checkpoint, key, trained, optimizer, config.method) or (state, None)
    # DDP around the model when there are several processes; the same objects otherwise.
    wrapped, optimizer = accelerator.prepare(trained, optimizer)
    total_steps = math.ceil(config.epochs * len(examples) / config.batch_examples)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    budget_s = config.max_minutes * 60 if config.max_minutes is not None else math.inf
    bar = tqdm(total=total_steps, initial=state.step, desc="train", unit="step",
               disable=not progress or not accelerator.is_main_process, dynamic_ncols=True)
    average = None
    if config.average_from is not None:
        average = WeightAverage(trained, start_step=max(1, math.ceil(config.average_from * total_steps)))
        if saved_average is not None:
            average.load(saved_average)
    started = time.monotonic() - state.seconds
    state.stopped_by = "steps"
    while state.step < total_steps:
        # Every process must stop at the same step: the main one's clock decides.
        late = time.monotonic() - started >= budget_s or (out_of_time is not None and out_of_time())
        if float(accelerator.reduce(torch.tensor(float(late), device=accelerator.device), "max")):
            state.stopped_by = "time"
            break
        loss = _train_step(wrapped, optimizer, examples, labels, config, state, accelerator)
        if average is not None:
            average.update(trained, state.step)
        state.losses.append(loss)
        state.seconds = time.monotonic() - started
        bar.update()
        bar.set_postfix(loss=f"{loss:.4f}")
        if state.step % config.checkpoint_every == 0 and accelerator.is_main_process:
            _save_checkpoint(checkpoint, key, trained, optimizer, state, config.method, average)
    state.seconds = time.monotonic() - started
    bar.close()
    if accelerator.is_main_process:
        _save_checkpoint(checkpoint, key, trained, optimizer, state, config.method, average)
    accelerator.wait_for_everyone()
    if average is not None:
        state.averaged_steps = average.count
        average.copy_to(trained)  # after the checkpoint, which keeps the last weights to resume from
    trained.eval()
    return trained, state


def _train_step(model, optimizer, examples, labels, config: TrainConfig, state: TrainState, accelerator) -> float:
    batch = []
    for _ in range(config.batch_examples):
        epoch, index = divmod(state.examples_seen, len(examples))
        batch.append(example_order(len(examples), config.seed, epoch)[index])
        state.examples_seen += 1
    if config.method == "eagle":  # every pair of both passes weighs 1
        weights = {i: torch.ones(head_positions(len(examples[i].ids))) for i in batch}
    else:
        weights = {i: position_weights(examples[i], labels[i], config) for i in batch}
    positions = float(sum(weights[i].sum() for i in batch))  # an example may come twice across an epoch's end
    lr_scale = min(1.0, (state.step + 1) / max(1, config.warmup_steps))
    for group in optimizer.param_groups:
        group["lr"] = config.lr * lr_scale
    optimizer.zero_grad(set_to_none=True)
    # Each process takes every n-th example of the batch; DDP averages gradients over the processes, so
    # the loss is scaled by their number to give the gradient of the whole batch's loss.
    mine = batch[accelerator.process_index :: accelerator.num_processes]
    scale = accelerator.num_processes
    total = torch.zeros((), device=accelerator.device)
    compute = compute_context(model, config.autocast)
    for n, i in enumerate(mine):
        # Gradients are exchanged once per step, on the last backward.
        sync = contextlib.nullcontext() if n == len(mine) - 1 else accelerator.no_sync(model)
        with sync:
            # Weighted sum over positions / weighted positions of the whole batch (all weigh 1 by default).
            with compute:
                if config.method == "eagle":
                    per_position = head_loss(model, examples[i], labels[i], config.ce_weight)
                else:
                    per_position = distill_loss(draft_logits(model, examples[i]), labels[i], config.ce_weight,
                                                 config.divergence)
            loss = (weights[i].to(per_position.device) * per_position).sum() / positions
            accelerator.backward(loss * scale)
        total += loss.detach()
    if not mine:  # more processes than examples: this one still takes part in the gradient exchange
        accelerator.backward(sum(p.sum() for p in model.parameters() if p.requires_grad) * 0.0)
    optimizer.step()
    state.step += 1
    return float(accelerator.reduce(total, "sum"))


def _resume_key(config: TrainConfig) -> dict:
    # The limits may change between a run and its resumption; everything that shapes the training may not.
    data = asdict(config)
    for name in ("max_steps", "max_minutes", "checkpoint_every", "epochs"):
        data.pop(name)
    return data


def _trained_weights(model, method: str) -> dict:
    if method == "lora":
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model)
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def _save_checkpoint(path: Path, key: dict, model, optimizer, state: TrainState, method: str,
                     average: WeightAverage | None = None) -> None:
    save_atomic(path, {"key": key, "weights": _trained_weights(model, method), "optimizer": optimizer.state_dict(),
                       "state": asdict(state), "average": average.state() if average is not None else None})


class WeightAverage:
    """Running mean of the trainable weights after each step from `start_step` on (fp32, on their device)."""

    def __init__(self, model: torch.nn.Module, start_step: int):
        self.start_step = start_step
        self.count = 0
        self.mean = {name: torch.zeros_like(p, dtype=torch.float32)
                     for name, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        if step < self.start_step:
            return
        self.count += 1
        for name, p in model.named_parameters():
            if name in self.mean:  # mean += (p - mean) / count
                self.mean[name].add_(p.float() - self.mean[name], alpha=1.0 / self.count)

    @torch.no_grad()
    def copy_to(self, model: torch.nn.Module) -> None:
        if not self.count:  # stopped before averaging began: the last weights stay
            return
        for name, p in model.named_parameters():
            if name in self.mean:
                p.copy_(self.mean[name])

    def state(self) -> dict:
        return {"start_step": self.start_step, "count": self.count, "mean": self.mean}

    def load(self, saved: dict) -> None:
        if saved["start_step"] != self.start_step:
            raise CodespecError(f"the checkpoint averages weights from step {saved['start_step']}, this run would from "
                                f"step {self.start_step} (--max-steps or --epochs changed): keep them, or delete "
                                "the checkpoint to train again")
        self.count = saved["count"]
        self.mean = saved["mean"]


def _load_checkpoint(path: Path, key: dict, model, optimizer, method: str) -> tuple[TrainState, dict | None] | None:
    """The state to go on from and the weight average saved with it; None for another run's checkpoint."""
    saved = torch.load(path, weights_only=False)
    if saved.get("key") != key or "weights" not in saved:
        return None  # another data set or configuration: start over (the file is overwritten)
    if method == "lora":
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, saved["weights"])
    else:
        with torch.no_grad():
            parameters = dict(model.named_parameters())
            for name, value in saved["weights"].items():
                parameters[name].copy_(value)
    optimizer.load_state_dict(saved["optimizer"])
    return TrainState(**saved["state"]), saved.get("average")


def save_draft(model, tokenizer, out: Path, config: TrainConfig, dtype: torch.dtype,
               base: Callable[[], torch.nn.Module] | None = None) -> torch.nn.Module:
    """The trained draft as a plain HF directory in `dtype` (what `--draft-model DIR` and the server load)."""
    if config.method == "lora":
        return save_merged(model, tokenizer, out, base=base)
    if config.method == "eagle":
        raise CodespecError("an EAGLE head is saved by codespec.decode.eagle.save_head")
    out.mkdir(parents=True, exist_ok=True)
    model = model.to(dtype)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return model


def save_merged(peft_model, tokenizer, out: Path, *, base: Callable[[], torch.nn.Module] | None = None
                ) -> torch.nn.Module:
    """The adapter (small, for the record) and the merged draft as a plain HF directory, so that
    `--draft-model DIR` and the server load it like any model. `base` (a loader of the untrained draft in
    another dtype, e.g. fp32 after bf16 training): the adapter is merged into those weights instead, so
    that small LoRA updates are not rounded away by a bf16 merge."""
    from peft import PeftModel

    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out / "adapter"))
    if base is None:
        merged = peft_model.merge_and_unload()
    else:
        merged = PeftModel.from_pretrained(base(), str(out / "adapter")).merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return merged
