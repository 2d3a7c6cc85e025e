"""Build an engine from user-facing options: local models (the device's default profile filling the gaps) or
a serving engine's URL. Shared by `codespec generate`, `codespec complete`, the server and the benchmarks.

The assembly floor, above the decode core and the models: it is the one place that knows both. torch is
imported only when a local engine is built, so the thin client (`serve --engine URL`) never loads it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from codespec.errors import CodespecError
from codespec.modes import LLAMACPP_RUNTIMES

if TYPE_CHECKING:
    from codespec.decode.engine import Engine
    from codespec.decode.remote import RemoteEngine

# The tokenizer a remote engine's prompts are built with when no model is named: a Qwen2.5-Coder of any size
# shares the bundled models' tokenizer.
REMOTE_DEFAULT_MODEL = "bundled:qwen2.5-coder-1.5b"


def resolve_models(
    model: str | None,
    draft_model: str | None,
    drafting: str | None,
    device: str = "auto",
    *,
    degrade: bool = False,
) -> tuple[str, str | None, str]:
    """(target spec, draft spec or None, drafting) from user options, the device's profile filling the gaps.
    A drafting mode that needs a draft nobody named gets the bundled 0.5B for a bundled target; otherwise
    it is an error, or with `degrade` (the server, which must keep serving) the mode falls back."""
    from codespec.models import default_profile

    profile = default_profile(device)
    target = model or profile.target
    if draft_model == "none":
        draft = None
    elif draft_model:
        draft = draft_model
    else:
        draft = profile.draft if model is None else None
    if not drafting:
        # The profile's drafting fits the profile's models; a user-chosen target keeps lookup unless a draft is given.
        drafting = profile.drafting if model is None else ("both" if draft else "lookup")
    if drafting in ("model", "both") and draft is None:
        if degrade:
            drafting = "lookup" if drafting == "both" else "none"
        elif target.startswith("bundled:"):
            draft = "bundled:qwen2.5-coder-0.5b"
        else:
            raise CodespecError(f"--drafting {drafting} needs --draft-model (a model with the target's tokenizer)")
    if drafting in ("none", "lookup"):
        draft = None  # not loaded when it would not be used
    return target, draft, drafting


def load_engine(
    model: str | None = None,
    draft_model: str | None = None,
    drafting: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    runtime: str = "auto",
    step_delay_s: float = 0.0,
    progress: bool = True,
    degrade: bool = False,
    calibrate: bool = True,
) -> Engine:
    """The one way options become an engine (`serve`, `generate`, `complete`, `demo`, the benchmarks).
    `degrade` (the server): a drafting mode without its draft falls back, and a llama.cpp runtime that
    fails to load falls back to torch, saying so on stderr and in `engine.served`. `calibrate`:
    measure the target's cost curve (once per machine, cached): the prompt budget follows its prefill speed,
    and drafts are verified only where they pay."""
    from codespec.decode.engine import Engine
    from codespec.models import cost_curves_path, load_model
    from codespec.models.load import resolve_runtime

    target_spec, draft_spec, drafting = resolve_models(model, draft_model, drafting, device, degrade=degrade)
    chosen = resolve_runtime(runtime, target_spec, device)
    fallback = None
    target = None
    while target is None:
        try:
            target = load_model(target_spec, device=device, dtype=dtype, threads=threads, progress=progress,
                                runtime=chosen)
        except CodespecError as exc:
            if chosen not in LLAMACPP_RUNTIMES or not degrade:
                raise
            # The next runtime down: ik_llama.cpp -> llama.cpp -> torch, one line each on stderr (the log).
            following = "llamacpp" if chosen == "ik-llamacpp" else "torch"
            fallback = f"{chosen} runtime unavailable ({exc}); using {following}"
            print(f"codespec: {fallback}", file=sys.stderr)
            chosen = following
    draft = load_model(draft_spec, device=device, dtype=dtype, progress=progress) if draft_spec else None
    served = {"model": target_spec, "draftModel": draft_spec, "drafting": drafting, "runtime": chosen,
              "runtimeFallback": fallback}
    engine = Engine(target, draft, drafting=drafting, step_delay_s=step_delay_s,
                    stop_token_ids=getattr(target, "stop_ids", None) or None, served=served)
    if calibrate:
        try:
            engine.calibrate(target_spec, cost_curves_path(), drafts=drafting != "none")
        except Exception as exc:  # a runtime that cannot time itself still decodes: every draft is verified
            print(f"codespec: measuring the target's forward cost failed ({exc}); verifying every draft",
                  file=sys.stderr)
            engine.reset_cache()
    return engine


def remote_engine(url: str, model_spec: str | None = None, engine_model: str | None = None) -> RemoteEngine:
    """The engine client for `codespec serve --engine URL`: the prompt template and tokenizer of
    `model_spec`; nothing here imports torch or transformers."""
    from codespec.decode.remote import RemoteEngine
    from codespec.fim import FIM_STOP_TOKENS, stop_token_ids
    from codespec.models.tokenizer import load_text_tokenizer

    spec = model_spec or REMOTE_DEFAULT_MODEL
    tokenizer = load_text_tokenizer(spec)
    vocab = tokenizer.get_vocab()
    engine = RemoteEngine(url, tokenizer=tokenizer, stop_token_ids=stop_token_ids(tokenizer),
                          stop_strings=[t for t in FIM_STOP_TOKENS if t in vocab], model=engine_model)
    engine.served.update(model=spec, draftModel=None, drafting="engine", runtimeFallback=None)
    engine.probe()
    return engine


def engine_from_args(args: argparse.Namespace, **kwargs) -> Engine:
    return load_engine(args.model, args.draft_model, args.drafting, device=args.device, dtype=args.dtype,
                       threads=args.threads, runtime=args.runtime, **kwargs)
