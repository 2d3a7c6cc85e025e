"""`codespec bench replay --parallel`: how N developers' editors fare when they share one serving engine.

`codespec bench replay --parallel 1,2,4,8`: a team on one serving engine. For each N, N recorded sessions
replay at once at typing speed, each through its own `codespec serve --engine` process (as N developers'
editors would run it) against one shared engine; the report is the pause figures and the errors per N, and
a plot of how time to ghost text grows with N. Not a timed test."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from contextlib import AbstractContextManager, AsyncExitStack, nullcontext
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError
from codespec.sessions.format import Session
from codespec.sessions.metrics import summarize
from codespec.sessions.replay import Play, ReplayResult, ReplayServer

SECTION = "## Shared engine load (replay --parallel)"
MARKER = "bench-replay-parallel"  # --markdown rewrites only between <!-- MARKER:start/end --> in the file
WARM = {"cache": True, "typingAlong": True, "earlyAnswer": True, "prefetch": True}


def parse_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CodespecError(f"--parallel {text!r}: expected counts like 1,2,4,8") from None
    if not counts or min(counts) < 1:
        raise CodespecError(f"--parallel {text!r}: expected positive counts like 1,2,4,8")
    return counts


def engine_server_command(url: str, model: str | None) -> list[str]:
    command = [sys.executable, "-m", "codespec.cli", "serve", "--stdio", "--engine", url]
    return command + (["--model", model] if model else [])


async def replay_at_once(sessions: list[Session], count: int, command: list[str], *, speed: float | None,
                         drain_timeout_s: float, pause_ms: float) -> dict[str, Any]:  # fmt: skip
    """`count` server processes, as `count` developers: server i replays sessions i, i + count, ... one after
    another, all servers at once. Every count replays the same sessions, so the figures differ by load only."""

    async def play_share(server: ReplayServer, index: int) -> None:
        for session in sessions[index::count]:
            await server.play(Play(session, WARM, f"n{count}"))

    async with AsyncExitStack() as stack:
        servers = await asyncio.gather(*(
            stack.enter_async_context(ReplayServer(command, speed=speed, drain_timeout_s=drain_timeout_s))
            for _ in range(count)
        ))
        started = time.perf_counter()
        await asyncio.gather(*(play_share(server, index) for index, server in enumerate(servers)))
        wall = time.perf_counter() - started
    merged = ReplayResult(server=command, speed=speed, wall_s=wall)
    for index, server in enumerate(servers):  # plays of different servers must not merge into one play
        for record in server.result.records:
            record.play = record.play * count + index
        merged.records += server.result.records
        merged.documents += server.result.documents
        merged.sessions += server.result.sessions
        for label, keystrokes in server.result.keystrokes.items():
            merged.keystrokes[label] = merged.keystrokes.get(label, 0) + keystrokes
    return {**summarize(merged, pause_ms=pause_ms), "sessions": count}  # "sessions": developers at once


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = [
        SECTION, "",
        f"`{meta['command']}` on {meta['machine']}: engine `{meta['engine']}`. The same "
        f"{len(meta['sessions'])} recorded sessions at each N: N `codespec serve --engine` processes (N developers) "
        "each replay their share of them one after another, all N at once, against the one engine "
        f"({'at typing speed' if meta['speed'] == 1.0 else 'speed ' + str(meta['speed'])}). A pause: "
        f"{meta['pause_ms']:.0f} ms without a keystroke.", "",
        "| developers at once | pauses | coverage | time to ghost text p50 / p90 ms | requests "
        "| answered (items / null) | cancelled | answer latency p50 / p90 ms: answered; with items | errors | missing "
        "| answered after cancel |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        pauses = row["pauses"]
        coverage = "-" if pauses["coverage"] is None else f"{100 * pauses['coverage']:.1f} %"
        ghost = pauses["time_to_ghost_ms"]
        answered = f"{row['items'] + row['null']} ({row['items']} / {row['null']})"
        items_ms = row.get("latency_items_ms", {})  # absent from rows written before it was kept
        lines.append(f"| {row['sessions']} | {pauses['count']} | {coverage} | {ms(ghost['p50'])} / {ms(ghost['p90'])} "
                     f"| {row['requests']} | {answered} | {row['cancelled']} "
                     f"| {ms(row['latency_ms']['p50'])} / {ms(row['latency_ms']['p90'])}; "
                     f"{ms(items_ms.get('p50'))} / {ms(items_ms.get('p90'))} | {row['errors']} "
                     f"| {row['missing']} | {row['answered_after_cancel']} |")
    plot_name = Path(meta["plot"]).name
    lines += [
        "", "Time to ghost text counts the covered pauses only (0: the text was already there, typed along). "
        "Answer latency is that of the answered requests only (the engine's queue included): a request "
        "superseded by the next keystroke before its answer is cancelled and leaves the sample (nulls, nothing to suggest here, are mostly instant), and more of "
        "them are cancelled as the load grows, mostly the slow ones, so answer latency can fall with load "
        "while coverage falls; read it beside the answered / cancelled counts.",
        f"Plot: [{plot_name}]({plot_name}).", "",
    ]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [row["sessions"] for row in rows]

    def series(values: list[float | None]) -> list[float]:
        return [float("nan") if v is None else v for v in values]

    fig, (latency, coverage) = plt.subplots(1, 2, figsize=(10, 4))
    latency.plot(counts, series([row["latency_ms"]["p50"] for row in rows]), "o-", label="answer latency p50")
    latency.plot(counts, series([row["latency_ms"]["p90"] for row in rows]), "s--", label="answer latency p90")
    latency.plot(counts, series([row["pauses"]["time_to_ghost_ms"]["p90"] for row in rows]), "^:",
                 label="time to ghost text p90 (covered pauses)")
    latency.set(xlabel="developers at once (one codespec serve each)", ylabel="ms", title="one shared engine")
    latency.legend(fontsize=8)
    coverage.plot(counts, [100 * (row["pauses"]["coverage"] or 0.0) for row in rows], "o-")
    coverage.set(xlabel="developers at once", ylabel="pauses with ghost text, %", ylim=(0, 100),
                 title="coverage of pauses")
    for ax in (latency, coverage):
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(counts, [str(c) for c in counts])
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def start_engine(args: argparse.Namespace, slots: int) -> AbstractContextManager[Any]:
    """The shared engine: --engine as given, or llama-server on the --model GGUF with `slots` slots."""
    if args.engine:
        return nullcontext(argparse.Namespace(url=args.engine, command=lambda: [args.engine]))
    from codespec.llama_server import LlamaServer, find_llama_server
    from codespec.models import default_profile, gguf_of

    find_llama_server()
    gguf = gguf_of(args.model or default_profile().target, "--parallel")
    return LlamaServer(gguf, threads=args.threads, context=4096 * slots, slots=slots)


def run_parallel(args: argparse.Namespace) -> int:
    from codespec.benchmarks.replay import pick_sessions
    from codespec.benchmarks.report import portable, read_markdown, with_markdown_section
    from codespec.sessions.files import text_writer, write_all
    from codespec.sessions.replay import parse_speed

    counts = parse_counts(args.parallel)
    corpus = pick_sessions(args.sessions, max(max(counts), args.count))
    if not corpus:
        raise CodespecError("no sessions to replay")
    corpus = [corpus[i % len(corpus)] for i in range(max(len(corpus), max(counts)))]  # every server gets one
    speed = parse_speed(args.speed)
    rows = []
    with start_engine(args, max(counts)) as engine:
        command = engine_server_command(engine.url, args.model)
        for count in counts:
            row = asyncio.run(replay_at_once(corpus, count, command, speed=speed, drain_timeout_s=args.timeout,
                                             pause_ms=args.pause_ms))
            rows.append(row)
            ghost = row["pauses"]["time_to_ghost_ms"]
            print(f"N={count}: coverage {row['pauses']['coverage']}, time to ghost text p50/p90 {ghost['p50']} / "
                  f"{ghost['p90']} ms, {row['requests']} requests, {row['errors']} errors, {row['missing']} missing",
                  flush=True)
        engine_command = portable(engine.command())
    plot_path = args.out / "bench-replay-parallel.png"
    meta = {
        "command": "codespec bench replay " + " ".join(sys.argv[3:]) if sys.argv[1:3] == ["bench", "replay"]
        else f"codespec bench replay --parallel {args.parallel}",
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
        "engine": engine_command, "server": " ".join(command[1:]), "pause_ms": args.pause_ms,
        "speed": "max" if speed is None else speed, "plot": str(plot_path),
        "sessions": [s.name for s in corpus],
    }
    text = markdown(rows, meta)
    outputs = {
        args.out / "bench-replay-parallel.json": text_writer(json.dumps({"meta": meta, "rows": rows}, indent=2,
                                                                        default=str)),
        plot_path: lambda path: plot(rows, path),
    }
    if args.markdown:
        # the new text is computed from the file as it is now; write_all's writer gets a temporary path
        outputs[args.markdown] = text_writer(with_markdown_section(read_markdown(args.markdown), MARKER, text))
    write_all(outputs)
    print(text)
    return 0
