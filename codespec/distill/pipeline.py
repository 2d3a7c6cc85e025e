"""The distillation pipeline behind `codespec distill` and `codespec bench distill`: data, labels, training, evaluation.

Data -> labels -> training (LoRA, full, or an EAGLE head) -> saved draft -> before/after evaluation, within a
time budget; everything a run learns about itself goes to OUT/distill.json, its labels and middles to OUT/work
(reused by a later run and by `bench distill`). The command line (codespec/distill/cli.py) parses and checks
the arguments and calls `distill(args)` or `evaluate_dir(...)`; the steps take the parsed arguments as they are.
Progress lines go to stderr (`_say`)."""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from codespec.errors import CodespecError

if TYPE_CHECKING:
    import torch

DEFAULT_TRAIN_TOKENS = 20000
# Of the data phase's share of --max-minutes, at most this much goes to the held-out examples (done first).
HELDOUT_SHARE_OF_DATA = 0.25
REPORT = "distill.json"
EVAL_REPORT = "distill-eval.json"
EVAL_PLOT = "distill-eval.png"
# bf16 must beat fp32 by this much on the CPU for --dtype auto to take it: its labels are also less exact.
BF16_MIN_SPEEDUP = 1.2
# The files (OUT/work/NAME-{train,heldout}.pt) of the middles that models write, and the example kind.
MIDDLE_FILES = {"greedy": "fim-greedy", "onpolicy": "fim-draft"}
# Examples generated and labelled together: the granularity at which a deadline cuts the data.
CHUNK_EXAMPLES = 64
DEFAULT_LR = {"lora": 3e-4, "full": 5e-6, "eagle": 3e-4}
# OUT/work/EXTRA_WORK/NAME holds the labels and middles of each --extra-repo.
EXTRA_WORK = "extra"
# Kept from --max-minutes for merging and saving the draft (besides the held-out agreement after training).
SAVE_RESERVE_S = 30.0


# --------------------------------------------------------------------------------------------- distill


def distill(args: argparse.Namespace) -> int:
    """One distill run as the command line asked for it (arguments already checked): data -> labels ->
    training -> saved draft (-> evaluation with --eval); OUT/distill.json says what happened. 0: done."""
    import torch

    from codespec.distill import data, train
    from codespec.distill.evaluate import agreement
    from codespec.models import load_model, resolve_device, resolve_dtype

    progress = not args.quiet
    work = args.out / "work"
    accelerator = train.make_accelerator(resolve_device(args.device))
    # Under `accelerate launch` each process trains on its own device; alone, where --device says.
    device = str(accelerator.device) if accelerator.num_processes > 1 else args.device
    args.dtype = _training_dtype(args.dtype, resolve_device(device))
    started = time.monotonic()
    budget_s = args.max_minutes * 60 if args.max_minutes is not None else None
    # The main process generates and labels; the others then find every label in OUT/work and must take
    # exactly the examples the main process got within its deadline: they compute nothing themselves.
    if not accelerator.is_main_process:
        data_deadlines = (0.0, 0.0)
    elif budget_s is None:
        data_deadlines = None
    else:
        data_s = budget_s if args.data_only else args.data_share * budget_s
        data_deadlines = (started + HELDOUT_SHARE_OF_DATA * data_s, started + data_s)
    with accelerator.main_process_first():
        target, draft, split, train_examples, held_examples, train_labels, held_labels, cut = _labelled_examples(
            args, device, work, fresh=args.fresh and accelerator.is_main_process, deadlines=data_deadlines)
    label_s = time.monotonic() - started
    if args.data_only:
        if accelerator.is_main_process:
            _say(f"--data-only: {len(train_examples)} training and {len(held_examples)} held-out examples labelled "
                 f"in {args.out / 'work'} ({label_s / 60:.1f} min); the same command without --data-only trains")
        return 0
    cache_keys = _cache_keys(args, target.stop_ids)
    if args.method == "eagle":
        return _distill_head(args, accelerator, device, target, draft, split, train_examples, held_examples,
                             train_labels, held_labels, cut, cache_keys, started, budget_s, label_s)
    del target  # the target and the trained draft need not share the memory
    gc.collect()
    autocast = None
    if args.method == "full" and args.dtype != "fp32":
        # Adam's updates of a fine-tuned weight are far below bf16's resolution: fp32 weights, bf16 compute.
        draft = load_model(args.draft, device=device, dtype="fp32", progress=progress)
        autocast = str(resolve_dtype(args.dtype, resolve_device(device))).removeprefix("torch.")
        gc.collect()

    agreement_started = time.monotonic()
    before = agreement(draft.model, held_examples, held_labels, autocast=autocast) if held_examples else None
    train_deadline = None
    if budget_s is not None:
        # Kept for the `after` agreement (as long as `before`) and the merge and save.
        reserve_s = (time.monotonic() - agreement_started) + min(SAVE_RESERVE_S, 0.05 * budget_s)
        train_deadline = started + budget_s - reserve_s
    config = train.TrainConfig(method=args.method, autocast=autocast, seed=args.seed,
                               lr=args.lr if args.lr is not None else DEFAULT_LR[args.method],
                               rank=args.rank, alpha=2 * args.rank,
                               lora_layers=args.lora_layers, ce_weight=args.ce_weight, divergence=args.divergence,
                               batch_examples=args.batch,
                               greedy_weight=args.greedy_weight, offpath_weight=args.offpath_weight,
                               epochs=args.epochs, max_steps=args.max_steps, max_minutes=args.train_minutes,
                               checkpoint_every=args.checkpoint_every, average_from=args.average_from)
    torch.manual_seed(args.seed)
    trained, state = train.train_draft(
        draft.model, train_examples, train_labels, config, work / "checkpoint.pt",
        data_key=data.fingerprint(train_examples), progress=progress, accelerator=accelerator,
        out_of_time=(lambda: time.monotonic() >= train_deadline) if train_deadline is not None else None)
    if not accelerator.is_main_process:
        return 0  # the main process saves and evaluates
    # As `before` was computed: the same dtype and autocast.
    after = agreement(trained, held_examples, held_labels, autocast=autocast) if held_examples else None
    eval_dtype = resolve_dtype(args.eval_dtype, resolve_device(device))
    fresh_base = None
    if eval_dtype != next(draft.model.parameters()).dtype:  # merge into the base weights in the saved dtype
        fresh_base = lambda: load_model(args.draft, device=device, dtype=args.eval_dtype,  # noqa: E731
                                        progress=progress).model
    saved = train.save_draft(trained, draft.tokenizer, args.out, config, eval_dtype, base=fresh_base)
    _write_report(args, split, train_examples, held_examples, label_s, cut, started, config, state,
                  {"before": before, "after": after}, cache_keys)
    if state.step == 0:
        _say("warning: no training step fitted in --max-minutes: the saved draft is the base draft")
    _say(f"trained {state.step} steps in {state.seconds / 60:.1f} min (stopped by {state.stopped_by}); "
         f"loss {_first_last(state.losses)}; saved the draft to {args.out}")
    if before and after:
        _say(f"held-out teacher-forced agreement: {before['agreement']:.1%} -> {after['agreement']:.1%} "
             f"(KL {before['kl']:.4f} -> {after['kl']:.4f})")
    del trained, saved, draft
    gc.collect()
    if args.eval:
        evaluate_dir(args.out, target_spec=args.target, base_spec=args.draft, device=device, dtype=args.eval_dtype,
                     prompts=args.eval_prompts, max_new_tokens=args.eval_max_tokens, progress=progress,
                     prefix_tokens=args.eval_prefix_tokens, replay_prompts=args.replay_prompts,
                     agreement_report={"base": before, "distilled": after})
    return 0


def _write_report(args: argparse.Namespace, split: tuple, train_examples: list, held_examples: list, label_s: float,
                  cut: dict, started: float, config, state, agreement_report: dict, cache_keys: dict) -> None:
    train_files, held_files, example_config, extras = split
    report = {
        "repo": str(args.repo.resolve()), "target": args.target, "draft": args.draft, "method": args.method,
        "seed": args.seed, "holdout": args.holdout, "example_config": asdict(example_config),
        "max_eval_tokens": args.max_eval_tokens,
        "train_files": [f.relpath for f in train_files], "heldout_files": [f.relpath for f in held_files],
        "extra_repos": extras,
        "train_examples": len(train_examples), "heldout_examples": len(held_examples),
        "train_positions": sum(e.positions for e in train_examples), "label_s": round(label_s, 1),
        "budget": {"max_minutes": args.max_minutes, "data_share": args.data_share,
                   "data_cut_by_time": cut, "seconds_to_saved_draft": round(time.monotonic() - started, 1)},
        "greedy": {"fraction": args.greedy_fraction, "max_new_tokens": args.greedy_tokens},
        "onpolicy": {"fraction": args.onpolicy_fraction, "max_new_tokens": args.greedy_tokens},
        "dtype": {"labels_and_training": args.dtype, "saved_and_eval": args.eval_dtype},
        "train": {**asdict(config), "steps": state.step, "seconds": round(state.seconds, 1),
                  "stopped_by": state.stopped_by, "averaged_steps": state.averaged_steps,
                  "losses": [round(x, 5) for x in state.losses]},
        "agreement": agreement_report,
        "caches": cache_keys,  # the keys of OUT/work's label and middle files: `bench distill` reads them
        "command": " ".join(["codespec", *sys.argv[1:]]) if sys.argv[0].endswith("codespec") else None,
    }
    (args.out / REPORT).write_text(json.dumps(report, indent=1))


def _distill_head(args: argparse.Namespace, accelerator, device: str, target, draft, split: tuple,
                  train_examples: list, held_examples: list, train_labels: list, held_labels: list, cut: dict,
                  cache_keys: dict, started: float, budget_s: float | None, label_s: float) -> int:
    """--method eagle: a new head trained on the target's features (the draft model only wrote on-policy
    middles, and is what the head's held-out agreement is compared with)."""
    import torch

    from codespec.decode.eagle import EagleHead, save_head
    from codespec.distill import data, train
    from codespec.distill.head import draft_agreement, head_agreement
    from codespec.models import resolve_device, resolve_dtype

    autocast = None if args.dtype == "fp32" else str(resolve_dtype(args.dtype, resolve_device(device))).removeprefix(
        "torch.")
    base = draft_agreement(draft.model, held_examples, held_labels) if held_examples else None
    del draft
    gc.collect()
    # It drafts only the tokens the target chose somewhere in the training data (see codespec/decode/eagle.py).
    head = EagleHead.for_target(target.model, seed=args.seed).set_draft_vocab(
        torch.cat([label.argmax for label in train_labels]))
    before = head_agreement(head, held_examples, held_labels, autocast=autocast) if held_examples else None
    train_deadline = None
    if budget_s is not None:
        train_deadline = started + budget_s - min(SAVE_RESERVE_S, 0.05 * budget_s)
    config = train.TrainConfig(method="eagle", autocast=autocast, seed=args.seed,
                               lr=args.lr if args.lr is not None else DEFAULT_LR["eagle"], ce_weight=args.ce_weight,
                               batch_examples=args.batch, epochs=args.epochs, max_steps=args.max_steps,
                               max_minutes=args.train_minutes, checkpoint_every=args.checkpoint_every,
                               average_from=args.average_from)
    torch.manual_seed(args.seed)
    trained, state = train.train_draft(
        head, train_examples, train_labels, config, args.out / "work" / "checkpoint.pt",
        data_key=data.fingerprint(train_examples), progress=not args.quiet, accelerator=accelerator,
        out_of_time=(lambda: time.monotonic() >= train_deadline) if train_deadline is not None else None)
    if not accelerator.is_main_process:
        return 0
    after = head_agreement(trained, held_examples, held_labels, autocast=autocast) if held_examples else None
    eval_dtype = resolve_dtype(args.eval_dtype, resolve_device(device))
    save_head(trained, args.out, target=args.target, dtype=eval_dtype, tokenizer=target.tokenizer)
    _write_report(args, split, train_examples, held_examples, label_s, cut, started, config, state,
                  {"base_draft": base, "before": before, "after": after,
                   "draft_vocab": len(trained.draft_vocab)}, cache_keys)
    _say(f"trained {state.step} steps in {state.seconds / 60:.1f} min (stopped by {state.stopped_by}); "
         f"loss {_first_last(state.losses)}; saved the EAGLE head to {args.out}")
    if base and after:
        _say(f"held-out teacher-forced agreement with the target's argmax: draft model {base['agreement']:.1%}; "
             f"EAGLE head {after['agreement']:.1%} from the target's feature, "
             f"{after['agreement_own_feature']:.1%} from its own")
    del trained, target
    gc.collect()
    if args.eval:
        evaluate_dir(args.out, target_spec=args.target, base_spec=args.draft, device=device, dtype=args.eval_dtype,
                     prompts=args.eval_prompts, max_new_tokens=args.eval_max_tokens, progress=not args.quiet,
                     prefix_tokens=args.eval_prefix_tokens, replay_prompts=args.replay_prompts,
                     agreement_report=None)
    return 0


def _labelled_examples(args: argparse.Namespace, device: str, work: Path, *, fresh: bool,
                       deadlines: tuple[float, float] | None) -> tuple:
    """Both models, the split, the examples (with the models' middles) and the target's labels, and which
    splits the deadlines cut short. `deadlines` (monotonic times for the held-out and the training examples):
    each split stops generating and labelling there and keeps the examples done by then."""
    from codespec.distill import data
    from codespec.models import load_model

    progress = not args.quiet
    if fresh:
        shutil.rmtree(work / EXTRA_WORK, ignore_errors=True)
        for stale in ("labels-train.pt", "labels-heldout.pt", "features-train.pt", "features-heldout.pt",
                      "checkpoint.pt", *[f"{name}-{split}.pt" for name in
                      MIDDLE_FILES for split in ("train", "heldout")]):
            (work / stale).unlink(missing_ok=True)
    files = data.collect_files(args.repo)
    train_files, held_files = data.split_files(files, args.holdout, args.seed)
    # Read before the models load, so that a wrong path fails at once; their held-out files are not used.
    extra_train_files = {extra: data.split_files(data.collect_files(extra, "--extra-repo"), args.holdout, args.seed)[0]
                         for extra in args.extra_repo}
    example_config = data.ExampleConfig(seq_len=args.seq_len, fim_fraction=args.fim_fraction)
    _say(f"{len(files)} files: {len(train_files)} for training, {len(held_files)} held out "
         f"({', '.join(f.relpath for f in held_files) or 'none'})")

    target = load_model(args.target, device=device, dtype=args.dtype, progress=progress)
    data.fim_marker_ids(target.tokenizer)
    # Loaded now (both fit easily): the on-policy middles are the draft's own continuations.
    draft = load_model(args.draft, device=device, dtype=args.dtype, progress=progress)
    _check_vocabulary(target.tokenizer, draft.tokenizer)
    max_train_tokens = args.max_train_tokens
    if max_train_tokens is None:  # with a time budget, as many as it allows (every process plans the same)
        max_train_tokens = DEFAULT_TRAIN_TOKENS if args.max_minutes is None else None
    train_examples = data.build_examples(train_files, target.tokenizer, example_config, seed=args.seed,
                                         max_positions=max_train_tokens)
    held_examples = data.build_examples(held_files, target.tokenizer, example_config, seed=args.seed + 1,
                                        max_positions=args.max_eval_tokens) if held_files else []
    models = {"greedy": (target, args.target), "onpolicy": (draft, args.draft)}
    held_ready, held_labels = _prepared_split(models, held_examples, args, args.seed + 1, work, "heldout",
                                              _deadline(deadlines[0] if deadlines else None))
    train_out_of_time = _deadline(deadlines[1] if deadlines else None)
    train_ready, train_labels = _prepared_split(models, train_examples, args, args.seed, work, "train",
                                                train_out_of_time)
    cut = {"train": len(train_ready) < len(train_examples), "heldout": len(held_ready) < len(held_examples)}
    extras = []
    for extra, extra_train in extra_train_files.items():
        # As a run on that repository alone would make them (its split, seed and budget), in a folder of their
        # own: the labels and middles of an earlier `codespec distill --repo EXTRA` (its OUT/work/*-train.pt)
        # can be copied there and are reused.
        planned = data.build_examples(extra_train, target.tokenizer, example_config, seed=args.seed,
                                      max_positions=max_train_tokens)
        extra_work = work / EXTRA_WORK / _extra_name(extra)
        ready, labels = _prepared_split(models, planned, args, args.seed, extra_work, "train", train_out_of_time)
        _say(f"--extra-repo {extra}: {len(extra_train)} training files, {len(ready)} examples ({_kinds(ready)})")
        extras.append({"repo": str(extra.resolve()), "work": str(extra_work.relative_to(args.out)),
                       "train_files": [f.relpath for f in extra_train], "train_examples": len(ready)})
        cut["train"] = cut["train"] or len(ready) < len(planned)
        train_ready, train_labels = train_ready + ready, train_labels + labels
        train_examples = train_examples + planned
    for split, ready, planned in (("training", train_ready, train_examples), ("held-out", held_ready, held_examples)):
        if len(ready) < len(planned):
            _say(f"--max-minutes: {len(ready)} of {len(planned)} {split} examples were ready in the data phase's "
                 f"time; the run goes on with those")
    if not train_ready and train_examples and not args.data_only:
        raise CodespecError(f"--max-minutes {args.max_minutes:g}: no training example was labelled in the data "
                            f"phase ({args.data_share:g} of it); give more minutes or a larger --data-share")
    _say(f"{len(train_ready)} training examples ({_kinds(train_ready)}), "
         f"{len(held_ready)} held-out ({_kinds(held_ready)})")
    return (target, draft, (train_files, held_files, example_config, extras), train_ready, held_ready,
            train_labels, held_labels, cut)


def _extra_name(repo: Path) -> str:
    resolved = repo.resolve()
    return f"{resolved.name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"


def _deadline(at: float | None):
    return (lambda: time.monotonic() >= at) if at is not None else None


def _prepared_split(models: dict, examples: list, args: argparse.Namespace, seed: int, work: Path, split: str,
                    out_of_time) -> tuple[list, list]:
    """`examples` with seeded shares of the FIM middles replaced by the target's greedy continuation
    (--greedy-fraction) and by the draft's own (--onpolicy-fraction), and the target's labels; generated,
    or read from OUT/work. Done in chunks of examples in their (seeded, shuffled) order, so that when
    `out_of_time()` stops it, the examples done form a prefix with every kind in its share."""
    from tqdm import tqdm

    from codespec.distill import data, teacher
    from codespec.models import release_freed_memory

    progress = not args.quiet
    choices = _middle_choices(examples, args.greedy_fraction, args.onpolicy_fraction, seed)
    target, target_spec = models["greedy"]
    chunk_size = max(CHUNK_EXAMPLES, 4 * args.greedy_batch)
    # Each file is read once for the whole split, not once per chunk.
    middle_files = {name: teacher.continuation_cache(work / f"{name}-{split}.pt", _run_name(spec, args),
                                                     args.greedy_tokens, target.stop_ids)
                    for name, (_, spec) in models.items() if choices.get(name)}
    # What the target labels: its top-k at the trained positions, or (--method eagle) its features everywhere.
    target_name = _run_name(target_spec, args)
    if args.method == "eagle":
        label_file = teacher.feature_cache(work / f"features-{split}.pt", target_name)
        label_chunk = partial(teacher.feature_examples, target.model, path=label_file, desc=f"target features ({split})")
    else:
        label_file = teacher.label_cache(work / f"labels-{split}.pt", args.top_k, target_name)
        label_chunk = partial(teacher.label_examples, target.model, top_k=args.top_k, path=label_file,
                              desc=f"target labels ({split})")
    ready: list = []
    labels: list = []
    bar = tqdm(total=sum(len(e.ids) for e in examples), desc=f"data ({split})", unit="tok",
               disable=not progress or not examples, dynamic_ncols=True)
    for start in range(0, len(examples), chunk_size):
        planned = examples[start : start + chunk_size]
        chunk = list(planned)
        complete = len(chunk)
        for name, chosen in choices.items():
            mine = [i - start for i in chosen if start <= i < start + len(chunk)]
            if not mine:
                continue
            model, spec = models[name]
            middles = teacher.greedy_continuations(
                model.model, [chunk[i].ids[: chunk[i].train_from] for i in mine], args.greedy_tokens,
                target.stop_ids, middle_files[name], batch=args.greedy_batch,
                desc=f"{name} middles ({split})", progress=progress, leave=False,
                model_name=_run_name(spec, args), out_of_time=out_of_time)
            done = [(i, m) for i, m in zip(mine, middles, strict=True) if m is not None]
            complete = min([complete, *(i for i, m in zip(mine, middles, strict=True) if m is None)])
            chunk = data.with_middles(chunk, [i for i, _ in done], [m for _, m in done], MIDDLE_FILES[name])
        chunk = chunk[:complete]
        chunk_labels = label_chunk(chunk, model_name=target_name, progress=progress, leave=False,
                                   out_of_time=out_of_time)
        ready.extend(chunk[: len(chunk_labels)])
        labels.extend(chunk_labels)
        bar.update(sum(len(e.ids) for e in planned))
        release_freed_memory()  # every chunk's shapes are new: glibc would otherwise keep what they freed
        if len(chunk_labels) < len(planned):
            break  # out of time: the examples after this one are not used, even where they were done
    bar.close()
    if examples:
        label_file.save()
    return ready, labels


def _run_name(spec: str, args: argparse.Namespace) -> str:
    return f"{spec} {args.dtype}"  # labels and middles depend on the weights and the dtype they ran in


_SHORT_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _training_dtype(requested: str, device: torch.device) -> str:
    """The dtype labelling and training run in, by name (it is part of the caches' keys, so never `auto`).
    auto: bf16 on CUDA (fp16 without bf16); on a CPU, bf16 where it computes bf16 in hardware *and* a quick
    measurement finds it faster than fp32 there (not so on every CPU with AVX512-BF16), else fp32. bf16 asked
    for where it is slower runs, with a warning."""
    import torch

    from codespec.models import cpu_bf16_speedup, cpu_has_native_bf16, resolve_dtype

    if device.type != "cpu":
        return _SHORT_DTYPE_NAMES[str(resolve_dtype(requested or "auto", device)).removeprefix("torch.")]
    speedup = cpu_bf16_speedup() if cpu_has_native_bf16() else None  # emulated: several times slower, not measured
    fast = speedup is not None and speedup >= BF16_MIN_SPEEDUP
    if requested in (None, "", "auto"):
        dtype = torch.bfloat16 if fast else torch.float32
        if speedup is not None:
            _say(f"--dtype auto: bf16 computes {speedup:.2f}x as fast as fp32 on this CPU (measured now): "
                 f"{'bf16' if fast else 'fp32'}")
    else:
        dtype = resolve_dtype(requested, device)
        if dtype != torch.float32 and not fast:
            why = ("is emulated and slower than fp32 (measured: 4.5x)" if speedup is None else
                   f"computes {speedup:.2f}x as fast as fp32 here (measured now)")
            _say(f"warning: --dtype {requested} on this CPU {why}; --dtype auto picks fp32 here")
    return _SHORT_DTYPE_NAMES[str(dtype).removeprefix("torch.")]


def _cache_keys(args: argparse.Namespace, stop_ids: list[int]) -> dict:
    """What the labels and each model's middles in OUT/work depend on, besides the examples themselves."""
    from codespec.distill import teacher

    specs = {"greedy": args.target, "onpolicy": args.draft}
    labels = (teacher.features_key(_run_name(args.target, args)) if args.method == "eagle"
              else teacher.labels_key(args.top_k, _run_name(args.target, args)))
    return {"labels": labels,
            **{name: teacher.continuations_key(_run_name(spec, args), args.greedy_tokens, stop_ids)
               for name, spec in specs.items()}}


def _middle_choices(examples: list, greedy_fraction: float, onpolicy_fraction: float, seed: int) -> dict:
    from codespec.distill import data

    greedy = data.greedy_choice(examples, greedy_fraction, seed)
    return {"greedy": greedy, "onpolicy": data.onpolicy_choice(examples, onpolicy_fraction, seed, exclude=greedy)}


def _saved_middles(examples: list, meta: dict, seed: int, work: Path, split: str,
                   count: int | None = None) -> list | None:
    """The first `count` (default all) of `examples` with the middles the run saved (None when something is
    missing: the repository changed). The choice of middles is made over all `examples`, as in the run."""
    from codespec.distill import data, teacher

    choices = _middle_choices(examples, meta.get("greedy", {}).get("fraction", 0.0),
                              meta.get("onpolicy", {}).get("fraction", 0.0), seed)
    count = len(examples) if count is None else count
    examples = examples[:count]
    for name, chosen in choices.items():
        chosen = [i for i in chosen if i < count]
        if not chosen:
            continue
        middles = teacher.saved_continuations(work / f"{name}-{split}.pt",
                                              [examples[i].ids[: examples[i].train_from] for i in chosen],
                                              meta.get("caches", {}).get(name))
        if middles is None:
            return None
        examples = data.with_middles(examples, chosen, middles, MIDDLE_FILES[name])
    return examples


# ------------------------------------------------------------------------------------------ evaluation


def evaluate_dir(out: Path, *, target_spec: str, base_spec: str, device: str, dtype: str, prompts: int,
                 max_new_tokens: int, progress: bool, agreement_report: dict | None,
                 prefix_tokens: int = 256, replay_prompts: int = 0) -> dict:
    """Acceptance/tau of the base draft and of the distilled one in OUT, on the held-out files of OUT's run;
    with `replay_prompts`, tau on that many prompts by replay too (codespec/distill/tau.py)."""
    from codespec.distill.evaluate import eval_prompts, markdown, plot, speculative_eval, tau_change
    from codespec.models import load_model

    meta = read_report(out)
    held = heldout_files(meta)
    if not held:
        raise CodespecError(f"{out}: the run held out no files of {meta['repo']}; nothing to evaluate on")
    if replay_prompts and meta.get("method") == "eagle":
        raise CodespecError("--replay-prompts replays a draft model; an EAGLE head drafts from the target's "
                            "features, which the replay does not compute")
    if replay_prompts and replay_prompts < prompts:
        raise CodespecError(f"--replay-prompts {replay_prompts} is fewer than --eval-prompts {prompts}: it "
                            "replays the same prompts and more")
    target = load_model(target_spec, device=device, dtype=dtype, progress=progress)
    base = load_model(base_spec, device=device, dtype=dtype, progress=progress)
    distilled = load_model(str(out), device=device, dtype=dtype, progress=progress)
    if agreement_report is None:
        agreement_report = _agreement_from_saved(out, meta, held, target.tokenizer, base, distilled)
    chosen = eval_prompts(held, target.tokenizer, max(prompts, replay_prompts), meta["seed"],
                          prefix_tokens=prefix_tokens)
    paths = _plain_paths_cache(out, target_spec, dtype, max_new_tokens, target.stop_ids) if replay_prompts else None
    spec = speculative_eval(target, {"base": base, "distilled": distilled}, chosen[:prompts], max_new_tokens,
                            progress=progress, plain_paths=paths.rows if paths else None)
    report = {"target": target_spec, "base_draft": base_spec, "distilled": str(out),
              "heldout_files": meta["heldout_files"], "prefix_tokens": prefix_tokens, "agreement": agreement_report,
              "speculative": spec}
    if paths is not None:
        report["replayed"] = _replayed(target, {"base": base, "distilled": distilled}, chosen, max_new_tokens, paths,
                                       spec, progress)
    (out / EVAL_REPORT).write_text(json.dumps(report, indent=1))
    plot(report, out / EVAL_PLOT)
    print(markdown(report))
    change = tau_change(spec)
    if change:
        _say(f"{change} on {prompts} held-out prompts, {spec['summary']['distilled']['tokens']} tokens; "
             f"report in {out / EVAL_REPORT}")
    if paths is not None and (change := tau_change(report["replayed"])):
        check = report["replayed"]["engine_check"]
        _say(f"replayed: {change} on {replay_prompts} held-out prompts (the target forwards of the first "
             f"{prompts} equal the speculative runs' on {check['equal']} of {check['compared']})")
    return report


@dataclass
class _PlainPaths:
    """The target's plain greedy outputs (with their stop token) per prompt, kept in OUT/work between benches."""

    path: Path
    key: dict
    rows: dict[tuple, list[int]]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": self.key, "rows": [[list(k), v] for k, v in self.rows.items()]}))
        tmp.replace(self.path)


def _plain_paths_cache(out: Path, target_spec: str, dtype: str, max_new_tokens: int, stop_ids) -> _PlainPaths:
    path = out / "work" / "plain-outputs.json"
    key = {"target": target_spec, "dtype": dtype, "max_new_tokens": max_new_tokens, "stop_ids": sorted(stop_ids or [])}
    saved = json.loads(path.read_text()) if path.exists() else None
    rows = {tuple(ids): tokens for ids, tokens in saved["rows"]} if saved and saved.get("key") == key else {}
    return _PlainPaths(path, key, rows)


def _replayed(target, drafts: dict, prompts: list, max_new_tokens: int, paths: _PlainPaths, spec: dict,
              progress: bool) -> dict:
    """tau by replay on all `prompts`, checked against the speculative runs of the first ones."""
    from codespec.distill.tau import plain_paths, replay_eval

    todo = [p for p in prompts if tuple(p.ids) not in paths.rows]
    for start in range(0, len(todo), 8):  # kept as it goes: an interrupted bench resumes
        plain_paths(target, todo[start:start + 8], max_new_tokens, known=paths.rows, progress=progress)
        paths.save()
    paths.save()  # the speculative runs' plain outputs too
    replayed = replay_eval(drafts, prompts, [paths.rows[tuple(p.ids)] for p in prompts], max_new_tokens,
                           paths.key["stop_ids"], progress=progress)
    checked = [(row[name]["target_forwards"], again[name]["target_forwards"])
               for row, again in zip(spec["runs"], replayed["runs"], strict=False) for name in drafts]
    replayed["engine_check"] = {"compared": len(checked), "equal": sum(a == b for a, b in checked)}
    return replayed


def heldout_files(meta: dict) -> list:
    """The files a distill run (its DIR/distill.json) held out, read from its repository now."""
    from codespec.distill import data

    names = set(meta["heldout_files"])
    return [f for f in data.collect_files(Path(meta["repo"])) if f.relpath in names]


def _agreement_from_saved(out: Path, meta: dict, held: list, tokenizer, base, distilled) -> dict | None:
    """Held-out agreement (of the `held` files) from the labels the distill run saved (no target forwards
    needed)."""
    from codespec.distill import data, teacher
    from codespec.distill.evaluate import agreement

    if meta.get("method") == "eagle":
        # Measured by the run on the target's features (not kept after it), the base draft on the same positions.
        agreement_report = meta.get("agreement") or {}
        if not agreement_report.get("after"):
            return None
        return {"base": agreement_report.get("base_draft"), "distilled": agreement_report["after"]}
    config = data.ExampleConfig(**meta["example_config"])
    examples = data.build_examples(held, tokenizer, config, seed=meta["seed"] + 1, max_positions=meta.get("max_eval_tokens"))
    # A run cut short by --max-minutes used only the first of them.
    examples = _saved_middles(examples, meta, meta["seed"] + 1, out / "work", "heldout", meta.get("heldout_examples"))
    labels = (teacher.saved_labels(out / "work" / "labels-heldout.pt", examples, meta.get("caches", {}).get("labels"))
              if examples is not None else None)
    if labels is None:
        return None  # the repository changed since the run
    return {"base": agreement(base.model, examples, labels), "distilled": agreement(distilled.model, examples, labels)}


# ----------------------------------------------------------------------------------------------- helpers


def _check_vocabulary(target_tokenizer, draft_tokenizer) -> None:
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise CodespecError("the draft does not share the target's tokenizer; pick a draft of the same family")


def read_report(out: Path) -> dict:
    try:
        return json.loads((out / REPORT).read_text())
    except FileNotFoundError:
        raise CodespecError(f"{out} has no {REPORT}: not a directory written by `codespec distill`") from None


def _kinds(examples) -> str:
    names = {"fim": "FIM", "fim-greedy": "FIM with the target's greedy middle",
             "fim-draft": "FIM with the draft's own middle", "l2r": "left-to-right"}
    counts = {kind: sum(1 for e in examples if e.kind == kind) for kind in names}
    return ", ".join(f"{n} {names[kind]}" for kind, n in counts.items() if n or kind in ("fim", "l2r"))


def _first_last(losses: list[float]) -> str:
    return f"{losses[0]:.4f} -> {losses[-1]:.4f}" if losses else "-"


def _say(message: str) -> None:
    print(f"codespec distill: {message}", file=sys.stderr, flush=True)
