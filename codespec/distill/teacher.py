"""Labels from the target by teacher forcing: its top-k next-token distribution at every trained position.

One target forward per example gives the target's
next-token distribution at every trained position; its top-k (ids + log-probabilities) is kept.
Far cheaper than generating, and exactly what the draft must match for its drafts to be accepted."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from codespec.distill.data import Example


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


def label_examples(model: torch.nn.Module, examples: Sequence[Example], top_k: int, path: Path | CacheFile, *,
                   model_name: str = "", desc: str = "labels", progress: bool = True,
                   save_every_s: float = 60.0, out_of_time: Callable[[], bool] | None = None,
                   leave: bool = True) -> list[Labels]:
    """Labels for every example, saved to `path` as they come and kept per example (by its tokens): a killed
    run resumes where it stopped, and a run on another mix of examples relabels only the new ones. `model_name`
    (the model and its dtype) is part of the file's key: another model's labels are never reused.
    `path` may be a `CacheFile` opened by `label_cache` (a caller that labels in many calls: the file is
    read once and written every `save_every_s`, not once per call; the caller saves it at the end).
    `out_of_time` is asked before each example still to label; once it says yes, the labels of the examples
    before that one are returned (a prefix of `examples`, possibly empty)."""
    owned = not isinstance(path, CacheFile)
    cache = label_cache(path, top_k, model_name) if owned else path
    if cache.key != labels_key(top_k, model_name):
        raise ValueError(f"{cache.path}: opened for {cache.key}, not for top-{top_k} labels of {model_name!r}")
    return _fill_cache(cache, examples, lambda example: label_example(model, example, top_k), owned=owned,
                       desc=desc, progress=progress, save_every_s=save_every_s, out_of_time=out_of_time, leave=leave)


@dataclass
class FeatureLabels:
    """What an EAGLE head learns from, at every position of one example: the target's last hidden state
    (the feature its LM head reads) and its argmax next token."""

    features: torch.Tensor  # [len(ids), hidden] bfloat16
    argmax: torch.Tensor  # [len(ids)] int32


@torch.inference_mode()
def feature_example(model: torch.nn.Module, example: Example) -> FeatureLabels:
    device = next(model.parameters()).device
    hidden = model.base_model(input_ids=torch.tensor([example.ids], device=device)).last_hidden_state[0]
    argmax = model.get_output_embeddings()(hidden).argmax(-1)
    return FeatureLabels(features=hidden.to("cpu", torch.bfloat16), argmax=argmax.to("cpu", torch.int32))


def feature_examples(model: torch.nn.Module, examples: Sequence[Example], path: Path | CacheFile, *,
                     model_name: str = "", desc: str = "target features", progress: bool = True,
                     save_every_s: float = 60.0, out_of_time: Callable[[], bool] | None = None,
                     leave: bool = True) -> list[FeatureLabels]:
    """As `label_examples`, for the target's features (`--method eagle`); `path` from `feature_cache`."""
    owned = not isinstance(path, CacheFile)
    cache = feature_cache(path, model_name) if owned else path
    if cache.key != features_key(model_name):
        raise ValueError(f"{cache.path}: opened for {cache.key}, not for the features of {model_name!r}")
    return _fill_cache(cache, examples, lambda example: feature_example(model, example), owned=owned, desc=desc,
                       progress=progress, save_every_s=save_every_s, out_of_time=out_of_time, leave=leave)


def _fill_cache(cache: CacheFile, examples: Sequence[Example], compute: Callable[[Example], object], *, owned: bool,
                desc: str, progress: bool, save_every_s: float, out_of_time: Callable[[], bool] | None,
                leave: bool) -> list:
    from tqdm import tqdm

    digests = [example_digest(e) for e in examples]
    todo = [(d, e) for d, e in zip(digests, examples, strict=True) if d not in cache.entries]
    # Counted in tokens through the target (its cost), not in labelled positions: the ETA is then right.
    total = sum(len(e.ids) for e in examples)
    bar = tqdm(total=total, initial=total - sum(len(e.ids) for _, e in todo), desc=desc, unit="tok",
               disable=not progress or not todo, dynamic_ncols=True, leave=leave)
    for digest, example in todo:
        if out_of_time is not None and out_of_time():
            break
        cache.put(digest, compute(example))
        bar.update(len(example.ids))
        cache.save_if_due(save_every_s)
    bar.close()
    if owned:
        cache.save()
    done = []
    for digest in digests:
        if digest not in cache.entries:
            break
        done.append(cache.entries[digest])
    return done


def feature_cache(path: Path, model_name: str = "") -> CacheFile:
    return CacheFile(path, features_key(model_name), "by_example")


def features_key(model_name: str = "") -> dict:
    return {"features": "last_hidden_state+argmax", "model": model_name}


def label_cache(path: Path, top_k: int, model_name: str = "") -> CacheFile:
    """The labels file of `label_examples`, opened once for several calls."""
    return CacheFile(path, labels_key(top_k, model_name), "by_example")


def labels_key(top_k: int, model_name: str = "") -> dict:
    return {"top_k": top_k, "model": model_name}


def saved_labels(path: Path, examples: Sequence[Example], key: dict | None) -> list[Labels] | None:
    """The labels a run saved for `examples` under `key`, or None when any is missing (the repository
    changed, or another run's labels)."""
    cache = load_cache(path, key, "by_example")
    digests = [example_digest(e) for e in examples]
    return [cache[d] for d in digests] if all(d in cache for d in digests) else None


def example_digest(example: Example) -> str:
    return _ids_digest([example.ids, (example.train_from,)])


def load_cache(path: Path, key: dict | None, field: str) -> dict:
    """The entries of a cache file written by `save_atomic`, or {} when it is missing or was written under
    another key. `key=None` takes the file's own key (reports written before they recorded their keys)."""
    if not path.exists():
        return {}
    saved = torch.load(path, weights_only=False)
    return saved.get(field, {}) if key is None or saved.get("key") == key else {}


def save_atomic(path: Path, payload: dict) -> None:
    """`torch.save` through a temp file and a rename: a run killed mid-save leaves the previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


class CacheFile:
    """One cache file (labels or middles, by digest), read once and written back through `save_atomic`.
    Callers that fill it in many calls share one object: each call would otherwise read the whole file and
    write it again, which grows with the square of the data."""

    def __init__(self, path: Path, key: dict, field: str) -> None:
        self.path, self.key, self.field = path, key, field
        self.entries: dict = load_cache(path, key, field)
        self._dirty = False
        self._saved_at = time.monotonic()

    def put(self, digest: str, value) -> None:
        self.entries[digest] = value
        self._dirty = True

    def save(self) -> None:
        """Written when something changed, or when there is no file yet (a run with nothing to do leaves one)."""
        if self._dirty or not self.path.exists():
            save_atomic(self.path, {"key": self.key, self.field: self.entries})
            self._dirty = False
            self._saved_at = time.monotonic()

    def save_if_due(self, every_s: float) -> None:
        if self._dirty and time.monotonic() - self._saved_at >= every_s:
            self.save()


# ------------------------------------------------------------------------------ sequence-level labels


@torch.inference_mode()
def greedy_continuations(model: torch.nn.Module, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                         stop_ids: Sequence[int], path: Path | CacheFile, *, batch: int = 8,
                         desc: str = "target greedy", progress: bool = True, model_name: str = "",
                         out_of_time: Callable[[], bool] | None = None,
                         leave: bool = True) -> list[tuple[int, ...] | None]:
    """`model`'s own greedy continuation of each prompt (up to, not including, a stop token), batched with
    left padding, saved to `path` after every batch and kept per prompt (a killed run resumes where it
    stopped; another mix of prompts generates only the new ones). `model_name` is part of the file's key;
    `path` may be a `CacheFile` opened by `continuation_cache`, shared by many calls.

    With the target this is what the draft meets at decode time (it continues the target's output); with
    the draft itself it is on-policy data: where the draft would go, labelled by the target.
    `out_of_time` is asked before each batch; the prompts it leaves without a continuation get None."""
    from tqdm import tqdm

    store = path if isinstance(path, CacheFile) else continuation_cache(path, model_name, max_new_tokens, stop_ids)
    if store.key != continuations_key(model_name, max_new_tokens, stop_ids):
        raise ValueError(f"{store.path}: opened for {store.key}, not for the continuations of {model_name!r}")
    done: dict[str, tuple[int, ...]] = store.entries
    digests = [_ids_digest([p]) for p in prompts]
    device = next(model.parameters()).device
    # Similar lengths together: less padding. The order is a pure function of the prompts.
    order = sorted({d: i for i, d in enumerate(digests) if d not in done}.values(), key=lambda i: (len(prompts[i]), i))
    pad = stop_ids[0] if stop_ids else 0
    bar = tqdm(total=len(prompts), initial=len(prompts) - len(order), desc=desc, unit="prompt",
               disable=not progress or not order, dynamic_ncols=True, leave=leave)
    for first in range(0, len(order), batch):
        if out_of_time is not None and out_of_time():
            break
        chunk = order[first : first + batch]
        width = max(len(prompts[i]) for i in chunk)
        input_ids = torch.tensor([[pad] * (width - len(prompts[i])) + list(prompts[i]) for i in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in chunk], device=device)
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=list(stop_ids) or None, pad_token_id=pad,
                             temperature=None, top_p=None, top_k=None)
        for row, i in enumerate(chunk):
            store.put(digests[i], _cut_at_stop(out[row, width:].tolist(), stop_ids))
        bar.update(len(chunk))
        store.save()  # a batch is minutes of work on a CPU; the file holds token ids only
    bar.close()
    return [done.get(d) for d in digests]


def continuation_cache(path: Path, model_name: str, max_new_tokens: int, stop_ids: Sequence[int]) -> CacheFile:
    """The file of `greedy_continuations`, opened once for several calls."""
    return CacheFile(path, continuations_key(model_name, max_new_tokens, stop_ids), "by_prompt")


def continuations_key(model_name: str, max_new_tokens: int, stop_ids: Sequence[int]) -> dict:
    return {"model": model_name, "max_new_tokens": max_new_tokens, "stop": sorted(stop_ids)}


def saved_continuations(path: Path, prompts: Sequence[Sequence[int]], key: dict | None) -> list[tuple[int, ...]] | None:
    """The continuations a run saved for `prompts` under `key`, or None when any is missing."""
    done = load_cache(path, key, "by_prompt")
    digests = [_ids_digest([p]) for p in prompts]
    return [done[d] for d in digests] if all(d in done for d in digests) else None


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

