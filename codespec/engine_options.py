"""Build an Engine from user-facing options, filling the gaps from the device's default profile.
Shared by `codespec generate`, `codespec complete`, the server and the benchmarks."""

from __future__ import annotations

import argparse
import sys

from codespec.decode.engine import Engine
from codespec.decode.runtimes import RUNTIMES
from codespec.errors import CodespecError
from codespec.flags import add_deprecated_flag
from codespec.modes import DRAFTING_MODES


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
    fails to load falls back to torch, saying so on stderr and in `engine.codespec_models`. `calibrate`:
    measure the target's cost curve (once per machine, cached): the prompt budget follows its prefill speed,
    and drafts are verified only where they pay."""
    from codespec.decode.runtimes import resolve_runtime
    from codespec.models import load_model

    target_spec, draft_spec, drafting = resolve_models(model, draft_model, drafting, device, degrade=degrade)
    chosen = resolve_runtime(runtime, target_spec, device)
    fallback = None
    try:
        target = load_model(target_spec, device=device, dtype=dtype, threads=threads, progress=progress,
                            runtime=chosen)
    except CodespecError as exc:
        if chosen != "llamacpp" or not degrade:
            raise
        fallback = f"llamacpp runtime unavailable ({exc}); using torch"
        print(f"codespec: {fallback}", file=sys.stderr)
        chosen = "torch"
        target = load_model(target_spec, device=device, dtype=dtype, threads=threads, progress=progress)
    draft = load_model(draft_spec, device=device, dtype=dtype, progress=progress) if draft_spec else None
    engine = Engine(target, draft, drafting=drafting, step_delay_s=step_delay_s,
                    stop_token_ids=getattr(target, "stop_ids", None) or None)
    if calibrate:
        try:
            engine.calibrate(target_spec, drafts=drafting != "none")
        except Exception as exc:  # a runtime that cannot time itself still decodes: every draft is verified
            print(f"codespec: measuring the target's forward cost failed ({exc}); verifying every draft",
                  file=sys.stderr)
            engine.reset_cache()
    engine.codespec_models = {"model": target_spec, "draftModel": draft_spec, "drafting": drafting,
                              "runtime": chosen, "runtimeFallback": fallback}
    return engine


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="target model spec (default: the device's profile, see `codespec models`)")
    parser.add_argument("--draft-model", help="draft model spec for --drafting model/both")
    parser.add_argument("--drafting", choices=DRAFTING_MODES, help="none (plain greedy), lookup, model, both")
    add_deprecated_flag(parser, "--draft", "--drafting", "drafting", choices=DRAFTING_MODES)
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda, cuda:N")
    parser.add_argument("--runtime", default="auto", choices=RUNTIMES,
                        help="auto (llama.cpp for a GGUF-backed model on a CPU, else torch), torch, llamacpp")
    parser.add_argument("--dtype", default="auto",
                        help="torch runtime: auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")
    parser.add_argument("--threads", type=int, help="CPU threads")


def engine_from_args(args: argparse.Namespace, **kwargs) -> Engine:
    return load_engine(args.model, args.draft_model, args.drafting, device=args.device, dtype=args.dtype,
                       threads=args.threads, runtime=args.runtime, **kwargs)
