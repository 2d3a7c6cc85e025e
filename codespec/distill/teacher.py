"""Labels from the target by teacher forcing: one target forward per example gives the target's
next-token distribution at every trained position; its top-k (ids + log-probabilities) is kept.
Far cheaper than generating, and exactly what the draft must match for its drafts to be accepted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from codespec.distill.data import Example, fingerprint


@dataclass
class Labels:
    """Top-k of the target's next-token distribution at each trained position of one example."""

    ids: torch.Tensor  # [positions, k] int32
    logprobs: torch.Tensor  # [positions, k] float32 (the log-probabilities of the full distribution)


@torch.inference_mode()
def label_example(model: torch.nn.Module, example: Example, top_k: int) -> Labels:
    device = next(model.parameters()).device
    keep = example.positions
    out = model(input_ids=torch.tensor([example.ids], device=device), logits_to_keep=keep)
    logprobs = torch.log_softmax(out.logits[0].float(), dim=-1)
    values, ids = logprobs.topk(top_k, dim=-1)
    return Labels(ids=ids.to("cpu", torch.int32), logprobs=values.to("cpu", torch.float32))


def label_examples(model: torch.nn.Module, examples: Sequence[Example], top_k: int, path: Path, *,
                   desc: str = "labels", progress: bool = True, save_every_s: float = 60.0) -> list[Labels]:
    """Labels for every example, saved to `path` as they come (a killed run resumes where it stopped)."""
    from tqdm import tqdm

    key = {"fingerprint": fingerprint(examples), "top_k": top_k}
    done: list[Labels] = []
    if path.exists():
        saved = torch.load(path, weights_only=False)
        if saved.get("key") == key:
            done = saved["labels"]
    last_save = time.monotonic()
    todo = examples[len(done):]
    # Counted in tokens through the target (its cost), not in labelled positions: the ETA is then right.
    bar = tqdm(total=sum(len(e.ids) for e in examples), initial=sum(len(e.ids) for e in examples[:len(done)]),
               desc=desc, unit="tok", disable=not progress, dynamic_ncols=True)
    for example in todo:
        done.append(label_example(model, example, top_k))
        bar.update(len(example.ids))
        if time.monotonic() - last_save > save_every_s:
            _save(path, key, done)
            last_save = time.monotonic()
    bar.close()
    _save(path, key, done)
    return done


def _save(path: Path, key: dict, labels: list[Labels]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "labels": labels}, tmp)
    tmp.replace(path)
