"""Server options: the settings the server runs with, from the command line and then from the client.

Command-line defaults overridden by `initializationOptions` and later by
`workspace/didChangeConfiguration` (settings under a "codespec" key, or at the top level)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from codespec.modes import DRAFTING_MODES, RUNTIMES

logger = logging.getLogger(__name__)

MULTILINE_POLICIES = ("auto", "never")
LOAD_POLICIES = ("eager", "lazy")

DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
LOG_LEVELS = ("debug", "info", "warning", "error")
PROMPT_LAYOUTS = ("psm", "near-suffix", "anchored")  # codespec.context.build.LAYOUTS (not imported: no torch here)
DEPRECATED_KEYS = {"draft": "drafting"}  # old option name -> its name now (accepted for one release)


@dataclass
class ServerOptions:
    # None: codespec.models.default_profile(device) (CPU: 0.5B + lookup; CUDA: 1.5B + 0.5B + both).
    model: str | None = None
    draft_model: str | None = None  # None: the profile's when the model is defaulted too; "none": none
    drafting: str | None = None  # None: the profile's, else "both" with a draft model, "lookup" without
    device: str = "auto"
    runtime: str = "auto"  # codespec.modes.RUNTIMES: auto | torch | llamacpp
    dtype: str = "auto"  # torch runtime: auto | float32 | bfloat16 | float16
    threads: int | None = None
    # A serving engine's URL (codespec.decode.remote): generation happens there, only the tokenizer loads here.
    engine: str | None = None
    engine_model: str | None = None  # None: the one model the engine serves
    load_models: str = "eager"
    max_tokens: int = 128
    max_lines: int | None = None  # None: the context room's default for the mode
    multiline: str = "auto"
    streaming: bool = False
    log_level: str = "warning"
    # FIM prompt layout (ContextConfig.layout / near_suffix_lines); None: the context room's default.
    prompt_layout: str | None = None
    near_suffix_lines: int | None = None
    # Latency features; all on by default, off for the cold benchmark baseline.
    cache: bool = True  # answer from a finished or running generation at the same place
    typing_along: bool = True  # answer from the suggestion when typed text matches it
    early_answer: bool = True  # answer after the first line, keep generating the block
    prefetch: bool = True  # after a shown suggestion, generate what follows its acceptance
    prefetch_delay_s: float = 0.1  # ... once the document has been idle this long
    # Anchored layout: after this long without requests or edits, and with no generation running, the
    # pinned context block is refreshed and its KV computed (lsp/blocks.py); None: never.
    # Longer than the gaps between keystrokes (so typing is not slowed by a chunk in flight), shorter than
    # a pause to think or read, and than moving elsewhere.
    idle_delay_s: float | None = 0.5
    # Hidden, for tests: simulated per-step model delay and a fault trigger.
    step_delay_s: float = 0.0
    debug_fail_marker: str | None = None

    # initializationOptions key -> field name
    KEYS = {
        "model": "model",
        "draftModel": "draft_model",
        "drafting": "drafting",
        "draft": "drafting",
        "device": "device",
        "runtime": "runtime",
        "dtype": "dtype",
        "threads": "threads",
        "engine": "engine",
        "engineModel": "engine_model",
        "loadModels": "load_models",
        "maxTokens": "max_tokens",
        "maxLines": "max_lines",
        "multiline": "multiline",
        "streaming": "streaming",
        "logLevel": "log_level",
        "promptLayout": "prompt_layout",
        "nearSuffixLines": "near_suffix_lines",
        "cache": "cache",
        "typingAlong": "typing_along",
        "earlyAnswer": "early_answer",
        "prefetch": "prefetch",
        "prefetchDelay": "prefetch_delay_s",
        "idleDelay": "idle_delay_s",
        "stepDelay": "step_delay_s",
        "debugFailMarker": "debug_fail_marker",
    }
    MODEL_FIELDS = ("model", "draft_model", "drafting", "device", "runtime", "dtype", "threads", "engine",
                    "engine_model")

    def updated(self, settings: Any) -> ServerOptions:
        """A copy with the recognised keys of `settings` applied; bad values are logged and ignored."""
        if not isinstance(settings, dict):
            return self
        if isinstance(settings.get("codespec"), dict):
            settings = settings["codespec"]
        changes: dict[str, Any] = {}
        for key, value in settings.items():
            if key in DEPRECATED_KEYS:
                logger.warning("option %r is deprecated and will be removed; use %r", key, DEPRECATED_KEYS[key])
            name = self.KEYS.get(key)
            if name is None:
                logger.warning("ignoring unknown option %r", key)
                continue
            try:
                changes[name] = coerce(name, value)
            except (TypeError, ValueError) as exc:
                logger.warning("ignoring option %s=%r: %s", key, value, exc)
        return dataclasses.replace(self, **changes)

    def resolved_models(self) -> tuple[str, str | None, str]:
        """(target spec, draft spec or None, drafting mode) after applying the device's profile; with a serving
        engine, the spec whose tokenizer builds its prompts (no device to probe: the thin client has no torch)."""
        from codespec.engine_options import REMOTE_DEFAULT_MODEL, resolve_models

        if self.engine:
            return self.model or REMOTE_DEFAULT_MODEL, None, "engine"
        return resolve_models(self.model, self.draft_model, self.drafting, self.device, degrade=True)

    def model_key(self) -> tuple[Any, ...]:
        """Options whose change needs the engine rebuilt."""
        return tuple(getattr(self, name) for name in self.MODEL_FIELDS)


def coerce(name: str, value: Any) -> Any:
    """The validated value of option field `name`; TypeError/ValueError when it is bad."""
    bool_fields = {"streaming", "cache", "typing_along", "early_answer", "prefetch"}
    if name in bool_fields:
        if not isinstance(value, bool):
            raise TypeError("expected true/false")
        return value
    if name in ("max_tokens", "threads", "max_lines"):
        if value is None and name != "max_tokens":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("expected a positive integer")
        return value
    if name == "near_suffix_lines":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 16:
            raise ValueError("expected an integer 0..16")
        return value
    if name == "prompt_layout" and value is None:
        return None
    if name == "idle_delay_s" and value is None:
        return None
    if name in ("step_delay_s", "prefetch_delay_s", "idle_delay_s"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError("expected seconds >= 0")
        return float(value)
    choices = {
        "drafting": DRAFTING_MODES,
        "multiline": MULTILINE_POLICIES,
        "load_models": LOAD_POLICIES,
        "runtime": RUNTIMES,
        "dtype": DTYPES,
        "log_level": LOG_LEVELS,
        "prompt_layout": PROMPT_LAYOUTS,
    }.get(name)
    if choices is not None:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value
    if name == "draft_model" and value in ("", "none"):
        return "none"
    if name == "engine" and isinstance(value, str) and value and not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    if name in ("model", "draft_model", "drafting", "engine", "engine_model") and value is None:
        return None
    if name == "debug_fail_marker" and value is None:
        return None
    if not isinstance(value, str) or not value:
        raise TypeError("expected a string")
    return value
