"""`codespec bench replay`: what the user sees at typing speed, plain greedy vs speculative decoding.

Variants (columns) replay the same sessions interleaved in one run: session 1 through every variant, then
session 2, the order rotating by one each session (plain, speculative; then speculative, plain; ...),
so that machine noise and drift land on all alike. A variant is a name and a way to replay one session
(`Variant`): today two LSP server processes held open for the whole run, plain greedy (`--drafting none`)
and speculative (the server's default drafting), plus the speculative server with its latency features
off ("speculative cold", switched with workspace/didChangeConfiguration), and with --llama-vim the anchor:
llama-server /infill on the same GGUF driven as llama.vim drives it (codespec.sessions.llama_vim). The
headline is the pause figures (codespec.sessions.metrics.pause_summary), their ratio to plain and, with the
anchor, codespec's ratio to it. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codespec.benchmarks.report import portable, read_markdown, with_markdown_section
from codespec.errors import CodespecError
from codespec.modes import SPECULATIVE_MODES
from codespec.sessions.format import Session
from codespec.sessions.metrics import NEW_ANSWER_MS, PAUSE_MS, paired_pauses, summarize
from codespec.sessions.replay import Play, ReplayResult, ReplayServer
from lsp.options import PROMPT_LAYOUTS

WARM = {"cache": True, "typingAlong": True, "earlyAnswer": True, "prefetch": True}
COLD = {"cache": False, "typingAlong": False, "earlyAnswer": False, "prefetch": False}
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "sessions" / "data"
SECTION = "### The replay's report (`codespec bench replay`)"  # the heading inside the marked block
MARKER = "bench-replay"  # --markdown rewrites only between <!-- MARKER:start/end --> in the file
BASELINE = "plain"  # the variant every ratio divides by
CONTROL = "plain control"  # a second plain server (--control): plain against itself, the noise floor
ANCHOR = "llama-vim"  # llama-server /infill as llama.vim drives it: codespec's pause figures over its
# (figure, how it is read) of the pause summary that get a ratio to the baseline
PAUSE_FIGURES = (
    ("coverage", "coverage"),
    ("time_to_ghost_ms.p50", "time to ghost text p50"),
    ("time_to_ghost_ms.p90", "time to ghost text p90"),
    ("accepted_at_pause_rate", "typed next at pause"),
    ("suggestions_per_100_keystrokes", "suggestions / 100 keystrokes"),
    ("chars_saved_per_keystroke", "chars saved / keystroke"),
    ("chars_saved_share", "typed chars on screen"),
)


@dataclass
class Variant:
    """One column of the benchmark: a name (also the label of its records) and a way to replay one
    session, whose records land in `result` (variants on one server share it, told apart by label).

    Nothing here needs LSP: a driver for another server (a "llama-server /infill" column, say) is a
    `play` that replays the session's keystrokes against it and appends ReplayedRequests to its own
    ReplayResult with the same fields the replayer fills (label, play, sent_s, latency_ms, outcome,
    shown/accepted via replay.judge, keystroke_s, gap_ms, next_keystroke_s), and counts keystrokes
    under its label; summaries, ratios and plots then include it."""

    name: str
    play: Callable[[Session], Awaitable[None]]
    result: ReplayResult


def interleaved(sessions: Sequence[Session], variants: Sequence[Variant]) -> list[tuple[Session, Variant]]:
    """The run's order: session by session, every variant once, rotating the variants by one each
    session so that each takes every place in turn."""
    order: list[tuple[Session, Variant]] = []
    for index, session in enumerate(sessions):
        shift = index % len(variants)
        order += [(session, variant) for variant in [*variants[shift:], *variants[:shift]]]
    return order


async def run_interleaved(sessions: Sequence[Session], variants: Sequence[Variant]) -> None:
    for session, variant in interleaved(sessions, variants):
        await variant.play(session)


def lsp_variant(name: str, server: ReplayServer, settings: dict[str, Any] | None) -> Variant:
    """A variant played through an LSP server held open by the caller, with `settings` sent first."""

    async def play(session: Session) -> None:
        await server.play(Play(session, settings, name))

    return Variant(name, play, server.result)


def register_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sessions", nargs="*", type=Path, help=f"session files or directories (default: {CORPUS})"
    )
    parser.add_argument("--count", type=int, default=10, help="replay the N shortest sessions (default 10)")
    parser.add_argument("--speed", default="1", help="time factor or max (default 1: real typing speed)")
    parser.add_argument("--model", help="target model spec for the server (default: the server's)")
    parser.add_argument("--draft-model", help='draft model spec for the speculative server (or "none")')
    parser.add_argument(
        "--drafting",
        choices=SPECULATIVE_MODES,
        help="the speculative server's drafting (default: its own)",
    )
    parser.add_argument("--threads", type=int, help="CPU threads for the server's model")
    parser.add_argument("--prompt-layout", choices=PROMPT_LAYOUTS,
                        help="both codespec servers' prompt layout (default: the server's)")
    parser.add_argument("--also-layout", choices=PROMPT_LAYOUTS,
                        help="one more column: the speculative server with this prompt layout (same run, interleaved)")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain-decoding server")
    parser.add_argument("--control", action="store_true",
                        help=f"one more column, '{CONTROL}': a second plain server, interleaved like the others; "
                        "its ratios to plain are the run's own noise floor for every other ratio")
    parser.add_argument(
        "--no-cold", action="store_true", help="skip the speculative server with its latency features off"
    )
    parser.add_argument(
        "--llama-vim", action="store_true", help="add the anchor column: llama-server /infill on the same GGUF, "
        "driven as llama.vim drives it (needs `make llama-server`)",
    )  # fmt: skip
    parser.add_argument(
        "--pause-ms", type=float, default=PAUSE_MS, help="a keystroke followed by this long without another "
        f"is a pause (default {PAUSE_MS:.0f})",
    )  # fmt: skip
    parser.add_argument(
        "--parallel", metavar="N,N,...", help="load as a team puts it: for each N (e.g. 1,2,4,8), N sessions "
        "at once, each through its own `codespec serve --engine` process against one shared engine",
    )  # fmt: skip
    parser.add_argument("--engine", metavar="URL", help="with --parallel: the engine (default: a llama-server "
                        "started on the --model GGUF with a slot per session of the largest N)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for answers at a close")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="directory for JSON and plots")
    parser.add_argument("--markdown", type=Path,
                        help=f"rewrite the report between <!-- {MARKER}:start --> and <!-- {MARKER}:end --> in "
                        "this file (appended with its markers where there are none); nothing else in it changes")
    parser.set_defaults(func=run_bench)


def server_command(args: argparse.Namespace, *, plain: bool) -> list[str]:
    command = [sys.executable, "-m", "codespec.cli", "serve", "--stdio"]
    if args.model:
        command += ["--model", args.model]
    if args.draft_model and not plain:
        command += ["--draft-model", args.draft_model]
    if args.drafting and not plain:
        command += ["--drafting", args.drafting]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if getattr(args, "prompt_layout", None):
        command += ["--prompt-layout", args.prompt_layout]
    if plain:
        command += ["--drafting", "none"]
    return command


def pick_sessions(paths: list[Path], count: int):
    from codespec.sessions.format import load_sessions

    sessions = load_sessions(paths or [CORPUS])
    return sorted(sessions, key=lambda s: (s.keystrokes(), s.name))[:count]


async def bench_replay_async(
    sessions: Sequence[Session],
    speculative_server: list[str],
    plain_server: list[str] | None,
    *,
    cold: bool = True,
    speed: float | None = 1.0,
    drain_timeout_s: float = 120.0,
    pause_ms: float = PAUSE_MS,
    llama_vim: Callable[[], AbstractContextManager[Any]] | None = None,
    others: Sequence[tuple[str, list[str]]] = (),
) -> dict[str, Any]:
    """Replay `sessions` interleaved through every variant (servers started first, all held open);
    returns {"variants": {name: summary}, "ratios": {...}, "results": {name: ReplayResult}}.
    `llama_vim`: makes the llama-server for the anchor column (entered, it has a `.url`; a LlamaServer)."""
    async with AsyncExitStack() as stack:

        async def open_server(command: list[str]) -> ReplayServer:
            return await stack.enter_async_context(
                ReplayServer(command, speed=speed, drain_timeout_s=drain_timeout_s)
            )

        variants: list[Variant] = []
        if plain_server is not None:
            variants.append(lsp_variant(BASELINE, await open_server(plain_server), WARM))
        speculative = await open_server(speculative_server)
        variants.append(lsp_variant("speculative", speculative, WARM))
        if cold:
            variants.append(lsp_variant("speculative cold", speculative, COLD))
        for name, command in others:  # e.g. the speculative server with another prompt layout
            variants.append(lsp_variant(name, await open_server(command), WARM))
        if llama_vim is not None:
            variants.append(await llama_vim_variant(stack, llama_vim, speed, drain_timeout_s))
        await run_interleaved(sessions, variants)
    return bench_report(variants, pause_ms)


async def llama_vim_variant(stack: AsyncExitStack, make_server: Callable[[], AbstractContextManager[Any]],
                            speed: float | None, drain_timeout_s: float) -> Variant:  # fmt: skip
    """The anchor column: the llama-server started (in a thread: it blocks until /health answers) and held
    open on `stack`, warmed up by one short FIM, as the LSP servers are."""
    from codespec.sessions.llama_vim import LABEL, LlamaVimReplay

    manager = make_server()
    server = await asyncio.to_thread(manager.__enter__)
    stack.push(manager.__exit__)
    command = server.command() if callable(getattr(server, "command", None)) else [str(server.url)]
    result = ReplayResult(server=command, speed=speed)
    replay = await stack.enter_async_context(
        LlamaVimReplay(server.url, result, speed=speed, drain_timeout_s=drain_timeout_s)
    )
    await replay.warm_up()
    return Variant(LABEL, replay.play, result)


def bench_replay(sessions: Sequence[Session], speculative_server: list[str], plain_server: list[str] | None,
                 **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    return asyncio.run(bench_replay_async(sessions, speculative_server, plain_server, **kwargs))


def bench_report(variants: Sequence[Variant], pause_ms: float = PAUSE_MS) -> dict[str, Any]:
    summaries = {v.name: summarize(v.result, v.name, pause_ms) for v in variants}
    base = next((v for v in variants if v.name == BASELINE), None)
    if base is not None:
        for v in variants:
            if v.name not in (BASELINE, ANCHOR):
                mine = [r for r in v.result.records if r.label == v.name]
                plains = [r for r in base.result.records if r.label == BASELINE]
                summaries[v.name]["differs_from_plain"] = differing_suggestions(plains, mine)
                summaries[v.name]["paired_with_plain"] = paired_pauses(plains, mine, pause_ms)
    return {
        "variants": summaries,
        "ratios": ratios(summaries),
        "results": {v.name: v.result for v in variants},
    }


def differing_suggestions(plain: Sequence[Any], other: Sequence[Any]) -> dict[str, int]:
    """Of the requests both variants answered with a shown suggestion (the same keystroke of the same play
    order: session, time, document), how many suggestions differ. Greedy decoding is the same function in both,
    so a difference is a near-tie decided by rounding: a batched forward (a verified draft, a prefill chunk of
    another size) or a KV cache computed along another history rounds differently; the control column shows
    how much of it plain has against itself."""
    shown = {(r.session, r.t, r.uri): r.shown for r in plain if r.shown}
    both = [(shown[(r.session, r.t, r.uri)], r.shown) for r in other if r.shown and (r.session, r.t, r.uri) in shown]
    return {"both": len(both), "differ": sum(a != b for a, b in both)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _figure(summary: dict[str, Any], path: str) -> Any:
    value: Any = summary["pauses"]
    for key in path.split("."):
        value = value[key]
    return value


def ratios(variants: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Each pause figure of every variant over the plain one's first, then latency percentiles (and the
    speculative server warm over cold)."""
    out: dict[str, float | None] = {}
    base = variants.get(BASELINE)
    others = [name for name in variants if name != BASELINE]
    if base is not None:
        for name in others:
            for path, what in PAUSE_FIGURES:
                out[f"{name}/{BASELINE} {what}"] = _ratio(_figure(variants[name], path), _figure(base, path))
    anchor = variants.get(ANCHOR)
    if anchor is not None:  # codespec's columns over llama.vim's
        for name in (n for n in ("speculative", BASELINE) if n in variants):
            for path, what in PAUSE_FIGURES:
                out[f"{name}/{ANCHOR} {what}"] = _ratio(_figure(variants[name], path), _figure(anchor, path))
    pairs = [(name, BASELINE) for name in others if base is not None]
    if "speculative" in variants and "speculative cold" in variants:
        pairs.append(("speculative", "speculative cold"))
    for key, what in (("latency_ms", "all answers"), ("latency_items_ms", "items answers")):
        for top, bottom in pairs:
            out |= {
                f"{top}/{bottom} latency {q}, {what}": _ratio(variants[top][key][q], variants[bottom][key][q])
                for q in ("p50", "p90")
            }
    return out


def markdown(report: dict[str, Any], meta: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f}"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    def num(v: float | None, digits: int) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    servers = ", ".join(f"{name}: `{portable(command)}`" for name, command in meta["servers"].items())
    pause_ms = meta["pause_ms"]
    lines = [
        SECTION,
        "",
        f"`codespec bench replay` on {meta['sessions']} corpus sessions ({meta['keystrokes']} keystrokes, "
        f"{meta['session_s']:.0f} s of typing in all) at speed {meta['speed']}, {meta['machine']}, the "
        f"variants interleaved session by session. {servers}. Wall time {meta['wall_s']:.0f} s.",
        *(["", f"Reproduce: `{meta['command']}`."] if meta.get("command") else []),
        "",
        f"At pauses (a keystroke followed by >= {pause_ms:.0f} ms without another): how often ghost text was "
        "on screen when the user resumed, how long after the keystroke it appeared (0 when typed-along "
        "ghost text stayed), and how often it was what the user typed next.",
        "",
        "| variant | pauses | ghost text at pause (pauses) | time to ghost text p50 / p90 ms, over those | "
        "typed next at pause | suggestions / 100 keystrokes | chars saved / keystroke "
        "| typed chars on screen before typed (chars / typed; Tab presses) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in report["variants"].items():
        p = s["pauses"]
        wait = p["time_to_ghost_ms"]
        lines.append(
            f"| {name} | {p['count']} | {pct(p['coverage'])} ({p.get('covered', '-')}) "
            f"| {ms(wait['p50'])} / {ms(wait['p90'])} "
            f"| {pct(p['accepted_at_pause_rate'])} | {num(p['suggestions_per_100_keystrokes'], 1)} "
            f"| {num(p['chars_saved_per_keystroke'], 3)} | {pct(p.get('chars_saved_share'))} "
            f"({p.get('chars_saved', '-')} / {p.get('typed_chars', '-')}; {p.get('tab_presses', '-')}) |"
        )
    lines += ghost_percentile_table(report["variants"])
    lines += paired_table(report["variants"])
    causes = sorted({c for s in report["variants"].values() for c in s["pauses"].get("causes", {})})
    lines += [
        "",
        "Pauses without ghost text, by cause (declined: the context's rule; pending-*: the request was still "
        "queued / prefilling / decoding when the user typed on; too-late: a suggestion came after that; "
        "emptied: post-processing left nothing). Covered / pauses by where the user was.",
        "",
        "| variant | " + " | ".join(causes) + " | typing | jump | switch | open |",
        "|---|" + "---:|" * (len(causes) + 4),
    ]
    for name, s in report["variants"].items():
        p = s["pauses"]
        cats = p.get("by_category", {})
        cells = [str(p.get("causes", {}).get(c, 0)) for c in causes]
        cells += [f"{cats.get(c, {}).get('covered', 0)} / {cats.get(c, {}).get('pauses', 0)}"
                  for c in ("typing", "jump", "switch", "open")]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Prompt tokens prefilled per request (the server's request log), p50 / p90 / max (requests):",
        "",
        "| variant | typing | jump | switch | open |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in report["variants"].items():
        pre = s.get("prefill_tokens", {})
        cells = [f"{ms(pre[c]['p50'])} / {ms(pre[c]['p90'])} / {ms(pre[c]['max'])} ({pre[c]['count']})"
                 if pre.get(c) else "-" for c in ("typing", "jump", "switch", "open")]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The server's worker, per generation (its request log; a server shared by two variants counts both): "
        "busy = prefill + decode, the time a request behind it waits; drafting = the drafters' own work "
        "within decode; drafting off = generations where no draft could pay on the cost curve; step / verify = "
        "the mean decode forward over one token / over several (their mean tokens) as it ran in the server.",
        "",
        "| variant | generations (cancelled; forwards interrupted) | busy s | queued p50 / p90 ms | prefill p50 / p90 ms "
        "| decode p50 / p90 ms | tokens (per forward) | decode ms / token | step / verify ms (tokens) | drafting s "
        "| drafting off |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in report["variants"].items():
        w = s.get("worker") or {}
        if not w.get("generations"):
            continue
        tpf, mpt = w["tokens_per_forward"], w["decode_ms_per_token"]
        lines.append(
            f"| {name} | {w['generations']} ({w['cancelled']}; {w.get('interrupted', 0)}) | {w['busy_s']:.1f} "
            f"| {ms(w['queued_ms']['p50'])} / {ms(w['queued_ms']['p90'])} "
            f"| {ms(w['prefill_ms']['p50'])} / {ms(w['prefill_ms']['p90'])} "
            f"| {ms(w['decode_ms']['p50'])} / {ms(w['decode_ms']['p90'])} "
            f"| {w['new_tokens']} ({'-' if tpf is None else f'{tpf:.2f}'}) | {'-' if mpt is None else f'{mpt:.1f}'} "
            f"| {forward_cells(w)} | {w['draft_s']:.2f} | {w['drafting_off']} |"
        )
    lines += [
        "",
        "Every request: latency is send-to-response of answered requests (items or null); cancelled "
        "requests were superseded by a newer keystroke before an answer.",
        "",
        "| variant | requests | answered (items / null) | cancelled | errors | p50 / p90 / p99 ms, all answers "
        "| p50 / p90 / p99 ms, items | shown | accepted |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in report["variants"].items():
        lat, items = s["latency_ms"], s["latency_items_ms"]
        lines.append(
            f"| {name} | {s['requests']} | {s['answered']} ({s['items']} / {s['null']}) | {s['cancelled']} "
            f"| {s['errors']} | {' / '.join(ms(lat[q]) for q in ('p50', 'p90', 'p99'))} "
            f"| {' / '.join(ms(items[q]) for q in ('p50', 'p90', 'p99'))} | {s['shown']} "
            f"| {pct(s['accepted_rate'])} |"
        )
    differ = {name: s["differs_from_plain"] for name, s in report["variants"].items() if s.get("differs_from_plain")}
    if differ:
        lines += ["", "Suggestions shown by plain and this variant for the same keystroke, and how many differ "
                  "(greedy in both: near-ties decided by rounding, see `differing_suggestions`): " + ", ".join(
                      f"{name} {d['differ']} of {d['both']}" for name, d in differ.items()) + "."]
    lines += ["", ratio_table(report["ratios"])]
    checks = [
        f"{name}: {s['answered_after_cancel']} answers after cancellation, {s['documents_mismatched']} of "
        f"{s['documents_checked']} documents differing from the session's final text"
        for name, s in report["variants"].items()
    ]
    lines += ["", "Correctness during the run: " + "; ".join(checks) + "."]
    for plot in meta.get("plots", []):
        lines += ["", f"![{Path(plot).stem}]({Path(plot).name})"]
    return "\n".join(lines) + "\n"


def ghost_percentile_table(variants: dict[str, dict[str, Any]]) -> list[str]:
    """Time to ghost text at each percentile of all pauses (never: not covered), then each variant minus plain."""
    rows = {name: s["pauses"].get("time_to_ghost_all_ms") for name, s in variants.items()}
    rows = {name: row for name, row in rows.items() if row}
    if not rows:
        return []
    keys = list(next(iter(rows.values())))

    def cell(v: float | None) -> str:
        return "never" if v is None else f"{v:,.0f}"

    lines = ["", "Time to ghost text at each percentile of all pauses, ms (never: no ghost text before the user "
             "typed on), and each variant's difference from plain's at the same percentile (- where either is "
             "never):", "", "| variant | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    lines += [f"| {name} | " + " | ".join(cell(row[k]) for k in keys) + " |" for name, row in rows.items()]
    base = rows.get(BASELINE)
    for name, row in rows.items():
        if base is not None and name != BASELINE:
            diffs = ["-" if row[k] is None or base[k] is None else f"{row[k] - base[k]:+,.0f}" for k in keys]
            lines.append(f"| {name} - {BASELINE} | " + " | ".join(diffs) + " |")
    return lines


def paired_table(variants: dict[str, dict[str, Any]]) -> list[str]:
    """Each variant against plain at the same pauses (metrics.paired_pauses)."""
    rows = [(name, s["paired_with_plain"]) for name, s in variants.items() if s.get("paired_with_plain")]
    if not rows:
        return []

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:+,.0f}"

    lines = ["", f"The same pauses paired with plain's: covered by one of the two only, and where both showed a new "
             f"answer (> {NEW_ANSWER_MS:.0f} ms: model work, not typed-along text) the difference in time to ghost "
             "text, variant - plain:", "",
             "| variant | pauses in both | covered by it only / by plain only | both new answers | it faster / "
             "slower | difference p10 / p50 / p90 / mean ms |", "|---|---:|---:|---:|---:|---:|"]
    for name, p in rows:
        d = p["diff_ms"]
        lines.append(f"| {name} | {p['pauses']} | {p['covered_only_other']} / {p['covered_only_base']} "
                     f"| {p['both_new']} | {p['other_faster']} / {p['other_slower']} "
                     f"| {' / '.join(ms(d[q]) for q in ('p10', 'p50', 'p90', 'mean'))} |")
    return lines


def ratio_table(ratios: dict[str, float | None]) -> str:
    rows = [f"| {name} | {'-' if value is None else f'{value:.2f}x'} |" for name, value in ratios.items()]
    return "\n".join(["| ratio (same run) | value |", "|---|---:|", *rows])


def plot_variants(report: dict[str, Any], path: Path, pause_ms: float = PAUSE_MS) -> None:
    """Per variant: the distribution of answered latencies, and the time to ghost text at pauses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codespec.sessions.metrics import pause_waits, plot_pause_cdf, style_pause_axes

    fig, (latency, at_pause) = plt.subplots(1, 2, figsize=(13, 4.4))
    waits = {name: pause_waits(result, name, pause_ms) for name, result in report["results"].items()}
    until = max((w for found, _ in waits.values() for w in found), default=0.0) * 1.05 + 1.0  # one right edge
    for name, result in report["results"].items():
        values = sorted(r.latency_ms for r in result.records
                        if r.label == name and r.outcome in ("items", "null") and r.latency_ms is not None)  # fmt: skip
        if values:
            latency.plot(
                values, [(i + 1) / len(values) for i in range(len(values))], label=f"{name} ({len(values)})"
            )
        plot_pause_cdf(at_pause, *waits[name], name, until)
    latency.set_xscale("log")
    latency.set_xlabel("answered latency (ms)")
    latency.set_ylabel("share of answered requests")
    latency.grid(True, which="both", alpha=0.3)
    latency.legend(fontsize=8)
    style_pause_axes(at_pause, pause_ms)
    if at_pause.lines:
        at_pause.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def llama_vim_server(args: argparse.Namespace) -> Callable[[], AbstractContextManager[Any]]:
    """The anchor's llama-server: the GGUF the codespec server loads (--model, or the default profile's
    target), its thread count, and the flags of the server llama.vim's README runs."""
    from codespec.llama_server import LlamaServer, find_llama_server
    from codespec.models import default_profile, gguf_of
    from codespec.sessions.llama_vim import SERVER_ARGS

    find_llama_server()  # fail before any server starts
    gguf = gguf_of(args.model or default_profile().target, "--llama-vim")
    return lambda: LlamaServer(gguf, threads=args.threads, context=8192, extra_args=SERVER_ARGS)


def anchor_server(report: dict[str, Any]) -> dict[str, str]:
    result = report["results"].get(ANCHOR)
    return {} if result is None else {ANCHOR: portable(result.server)}


def display(command: list[str]) -> str:
    if command[1:3] == ["-m", "codespec.cli"]:
        return "codespec " + " ".join(command[3:])
    return portable(command)


def run_bench(args: argparse.Namespace) -> int:
    from codespec.sessions.files import text_writer, write_all
    from codespec.sessions.metrics import format_table, plot_result
    from codespec.sessions.replay import parse_speed

    if args.pause_ms <= 0:
        raise CodespecError("--pause-ms must be positive")
    if args.parallel:
        from codespec.benchmarks.load import run_parallel

        return run_parallel(args)
    sessions = pick_sessions(args.sessions, args.count)
    if not sessions:
        raise CodespecError("no sessions to replay")
    speed = parse_speed(args.speed)
    spec_server = server_command(args, plain=False)
    plain_server = None if args.no_plain else server_command(args, plain=True)
    llama_vim = llama_vim_server(args) if args.llama_vim else None
    started = time.perf_counter()
    others = []
    if args.control and plain_server is not None:
        others.append((CONTROL, list(plain_server)))
    if args.also_layout:
        others.append((f"speculative {args.also_layout}",
                       server_command(argparse.Namespace(**{**vars(args), "prompt_layout": args.also_layout}),
                                      plain=False)))
    report = bench_replay(sessions, spec_server, plain_server, cold=not args.no_cold, speed=speed, others=others,
                          drain_timeout_s=args.timeout, pause_ms=args.pause_ms, llama_vim=llama_vim)  # fmt: skip
    wall = time.perf_counter() - started
    plots = [args.out / "bench-replay-cdf.png", args.out / "bench-replay-warm.png"]
    servers = {} if plain_server is None else {BASELINE: display(plain_server)}
    meta = {
        "command": "codespec bench replay " + shlex.join(sys.argv[3:]) if sys.argv[1:3] == ["bench", "replay"]
        else None,
        "sessions": len(sessions),
        "keystrokes": sum(s.keystrokes() for s in sessions),
        "session_s": sum(s.duration for s in sessions),
        "speed": "max" if speed is None else speed,
        "pause_ms": args.pause_ms,
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
        "servers": {**servers, "speculative": display(spec_server), **{n: display(c) for n, c in others},
                    **anchor_server(report)},
        "order": "interleaved: session by session, the variants rotating by one each session",
        "wall_s": wall,
        "plots": [str(p) for p in plots],
        "names": [s.name for s in sessions],
    }
    data = {"meta": meta, "variants": report["variants"], "ratios": report["ratios"]}
    results = list({id(r): r for r in report["results"].values()}.values())  # variants may share one
    records = "".join(json.dumps(record.to_json()) + "\n" for result in results for record in result.records)
    # Each server's generations (its request log), for questions the worker table does not answer.
    generations = "".join(json.dumps({"variant": name, **g}) + "\n"
                          for name, result in report["results"].items() for g in result.generations)
    text = markdown(report, meta)
    speculative = report["results"]["speculative"]
    title = "speculative server" + ("" if args.no_cold else ": warm and cold plays")
    outputs = {
        args.out / "bench-replay.json": text_writer(json.dumps(data, indent=2, default=str)),
        args.out / "bench-replay-records.jsonl": text_writer(records),
        args.out / "bench-replay-generations.jsonl": text_writer(generations),
        plots[0]: lambda path: plot_variants(report, path, args.pause_ms),
        plots[1]: lambda path: plot_result(speculative, str(path), title, pause_ms=args.pause_ms),
    }
    if args.markdown:
        # computed from the file as it is now: write_all hands its writers a temporary path, not the file
        outputs[args.markdown] = text_writer(with_markdown_section(read_markdown(args.markdown), MARKER, text))
    write_all(outputs)  # all files only now, after every replay succeeded
    for name, summary in report["variants"].items():
        print(f"== {name}\n{format_table(summary)}\n")
    print(text)
    return 0


def forward_cells(w: dict) -> str:
    """The worker table's step / verify cell: mean ms of each kind of decode forward (verify: its tokens)."""
    step, verify, tokens = w.get("step_ms"), w.get("verify_ms"), w.get("verify_tokens")
    return (f"{'-' if step is None else f'{step:.1f}'} / "
            + ("-" if verify is None else f"{verify:.1f} ({tokens:.1f})"))
