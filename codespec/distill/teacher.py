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
            save_atomic(path, {"key": key, "labels": done})
            last_save = time.monotonic()
    bar.close()
    save_atomic(path, {"key": key, "labels": done})
    return done


def save_atomic(path: Path, payload: dict) -> None:
    """`torch.save` through a temp file and a rename: a run killed mid-save leaves the previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


# ------------------------------------------------------------------------------ sequence-level labels


@torch.inference_mode()
def greedy_continuations(model: torch.nn.Module, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                         stop_ids: Sequence[int], path: Path, *, batch: int = 8, desc: str = "target greedy",
                         progress: bool = True) -> list[tuple[int, ...]]:
    """The target's own greedy continuation of each prompt (up to, not including, a stop token), batched with
    left padding, saved to `path` after every batch (a killed run resumes where it stopped).

    This is what the draft meets at decode time: it continues the target's output, not the file's text."""
    from tqdm import tqdm

    key = {"prompts": _ids_digest(prompts), "max_new_tokens": max_new_tokens, "stop": sorted(stop_ids)}
    done: dict[int, tuple[int, ...]] = {}
    if path.exists():
        saved = torch.load(path, weights_only=False)
        if saved.get("key") == key:
            done = saved["done"]
    device = next(model.parameters()).device
    # Similar lengths together: less padding. The order is a pure function of the prompts.
    order = sorted((i for i in range(len(prompts)) if i not in done), key=lambda i: (len(prompts[i]), i))
    pad = stop_ids[0] if stop_ids else 0
    bar = tqdm(total=len(prompts), initial=len(done), desc=desc, unit="prompt", disable=not progress,
               dynamic_ncols=True)
    for first in range(0, len(order), batch):
        chunk = order[first : first + batch]
        width = max(len(prompts[i]) for i in chunk)
        input_ids = torch.tensor([[pad] * (width - len(prompts[i])) + list(prompts[i]) for i in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in chunk], device=device)
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=list(stop_ids) or None, pad_token_id=pad,
                             temperature=None, top_p=None, top_k=None)
        for row, i in enumerate(chunk):
            done[i] = _cut_at_stop(out[row, width:].tolist(), stop_ids)
        bar.update(len(chunk))
        save_atomic(path, {"key": key, "done": done})
    bar.close()
    return [done[i] for i in range(len(prompts))]


def _cut_at_stop(tokens: list[int], stop_ids: Sequence[int]) -> tuple[int, ...]:
    stops = set(stop_ids)
    for n, token in enumerate(tokens):
        if token in stops:
            # Without the stop token: the position after the last token is trained, and there the target's
            # label is the stop token, which the draft should predict too.
            return tuple(tokens[:n])
    return tuple(tokens)


def _ids_digest(prompts: Sequence[Sequence[int]]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update((",".join(map(str, prompt)) + ";").encode())
    return digest.hexdigest()[:16]

