"""`codespec bench replay`: keystroke latency on replayed sessions through the real server.

Two server processes, one after the other: speculative decoding (the server's default drafting) and
plain greedy (`--draft none`). In the speculative server every session is replayed twice, warm (all
latency features on) and cold (caches, typing-along, early answer and prefetch off, switched with
workspace/didChangeConfiguration), alternating which goes first, so that machine noise lands on both
alike; the plain server replays the sessions warm. Ratios come from the same run. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError

WARM = {"cache": True, "typingAlong": True, "earlyAnswer": True, "prefetch": True}
COLD = {"cache": False, "typingAlong": False, "earlyAnswer": False, "prefetch": False}
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "sessions" / "data"
SECTION = "## Keystroke latency (replay)"


def register_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sessions", nargs="*", type=Path, help=f"session files or directories (default: {CORPUS})"
    )
    parser.add_argument("--count", type=int, default=10, help="replay the N shortest sessions (default 10)")
    parser.add_argument("--speed", default="1", help="time factor or max (default 1: real typing speed)")
    parser.add_argument("--model", help="target model spec for the server (default: the server's)")
    parser.add_argument("--draft-model", help='draft model spec for the speculative server (or "none")')
    parser.add_argument(
        "--draft",
        choices=["lookup", "model", "both"],
        help="the speculative server's drafting (default: its own)",
    )
    parser.add_argument("--threads", type=int, help="CPU threads for the server's model")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain-decoding server")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for answers at a close")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="directory for JSON and plots")
    parser.add_argument("--markdown", type=Path, help=f'rewrite the "{SECTION}" section of this file')
    parser.set_defaults(func=run_bench)


def server_command(args: argparse.Namespace, *, plain: bool) -> list[str]:
    command = [sys.executable, "-m", "codespec.cli", "serve", "--stdio"]
    if args.model:
        command += ["--model", args.model]
    if args.draft_model and not plain:
        command += ["--draft-model", args.draft_model]
    if args.draft and not plain:
        command += ["--draft", args.draft]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if plain:
        command += ["--draft", "none"]
    return command


def pick_sessions(paths: list[Path], count: int):
    from codespec.sessions.cli import load_sessions

    sessions = load_sessions(paths or [CORPUS])
    return sorted(sessions, key=lambda s: (s.keystrokes(), s.name))[:count]


def bench_replay(
    sessions: list,
    speculative_server: list[str],
    plain_server: list[str] | None,
    *,
    speed: float | None = 1.0,
    drain_timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Replay `sessions` warm and cold through the speculative server and warm through the plain one;
    returns {"variants": {name: summary}, "ratios": {...}, "results": {server: ReplayResult}}."""
    from codespec.sessions.replay import Play, replay, summarize

    plays = []
    for index, session in enumerate(sessions):
        pair = [Play(session, WARM, "warm"), Play(session, COLD, "cold")]
        plays += pair if index % 2 == 0 else pair[::-1]
    results = {"speculative": replay(plays, speculative_server, speed=speed, drain_timeout_s=drain_timeout_s)}
    variants = {
        "speculative warm": summarize(results["speculative"], "warm"),
        "speculative cold": summarize(results["speculative"], "cold"),
    }
    if plain_server is not None:
        plain_plays = [Play(s, WARM, "warm") for s in sessions]
        results["plain"] = replay(plain_plays, plain_server, speed=speed, drain_timeout_s=drain_timeout_s)
        variants["plain warm"] = summarize(results["plain"], "warm")
    return {"variants": variants, "ratios": ratios(variants), "results": results}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(variants: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, what in (("latency_ms", "all answers"), ("latency_items_ms", "items answers")):
        warm, cold = variants["speculative warm"][key], variants["speculative cold"][key]
        out |= {f"warm/cold {q}, {what}": _ratio(warm[q], cold[q]) for q in ("p50", "p90")}
        if "plain warm" in variants:
            plain = variants["plain warm"][key]
            out |= {f"speculative/plain {q}, {what}": _ratio(warm[q], plain[q]) for q in ("p50", "p90")}
    return out


def markdown(report: dict[str, Any], meta: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f}"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    lines = [
        SECTION,
        "",
        f"`codespec bench replay` on {meta['sessions']} corpus sessions ({meta['keystrokes']} keystrokes, "
        f"{meta['session_s']:.0f} s of typing each way) at speed {meta['speed']}, {meta['machine']}. "
        f"Servers: `{meta['speculative_server']}`"
        + (f" and `{meta['plain_server']}`" if meta.get("plain_server") else "")
        + f". Wall time {meta['wall_s']:.0f} s. Latency is send-to-response of answered requests "
        "(items or null); cancelled requests were superseded by a newer keystroke before an answer.",
        "",
        "| variant | requests | answered (items / null) | cancelled | errors | p50 / p90 / p99 ms, all answers "
        "| p50 / p90 / p99 ms, items | shown | accepted | chars saved / keystroke |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in report["variants"].items():
        lat, items = s["latency_ms"], s["latency_items_ms"]
        per_key = s["chars_saved_per_keystroke"]
        lines.append(
            f"| {name} | {s['requests']} | {s['answered']} ({s['items']} / {s['null']}) | {s['cancelled']} "
            f"| {s['errors']} | {' / '.join(ms(lat[q]) for q in ('p50', 'p90', 'p99'))} "
            f"| {' / '.join(ms(items[q]) for q in ('p50', 'p90', 'p99'))} | {s['shown']} "
            f"| {pct(s['accepted_rate'])} | {'-' if per_key is None else f'{per_key:.3f}'} |"
        )
    lines += ["", "| ratio (same run) | value |", "|---|---:|"]
    for name, value in report["ratios"].items():
        lines.append(f"| {name} | {'-' if value is None else f'{value:.2f}x'} |")
    checks = [
        f"{name}: {s['answered_after_cancel']} answers after cancellation, {s['documents_mismatched']} of "
        f"{s['documents_checked']} documents differing from the session's final text"
        for name, s in report["variants"].items()
    ]
    lines += ["", "Correctness during the run: " + "; ".join(checks) + "."]
    for plot in meta.get("plots", []):
        lines += ["", f"![{Path(plot).stem}]({Path(plot).name})"]
    return "\n".join(lines) + "\n"


def replace_section(path: Path, text: str) -> None:
    """Put `text` (starting with the section heading) in place of that section, or append it."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text + (old[end + 1 :] if end >= 0 else "")
    path.write_text(new, encoding="utf-8")


def plot_variants(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, label, result_key in (("speculative warm", "warm", "speculative"),
                                    ("speculative cold", "cold", "speculative"),
                                    ("plain warm", "warm", "plain")):  # fmt: skip
        result = report["results"].get(result_key)
        if result is None:
            continue
        values = sorted(r.latency_ms for r in result.records
                        if r.label == label and r.outcome in ("items", "null") and r.latency_ms is not None)  # fmt: skip
        if values:
            ax.plot(
                values, [(i + 1) / len(values) for i in range(len(values))], label=f"{name} ({len(values)})"
            )
    ax.set_xscale("log")
    ax.set_xlabel("answered latency (ms)")
    ax.set_ylabel("share of answered requests")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def display(command: list[str]) -> str:
    if command[1:3] == ["-m", "codespec.cli"]:
        return "codespec " + " ".join(command[3:])
    return shlex.join(command)


def run_bench(args: argparse.Namespace) -> int:
    from codespec.sessions.replay import format_table, parse_speed, plot_result

    sessions = pick_sessions(args.sessions, args.count)
    if not sessions:
        raise CodespecError("no sessions to replay")
    speed = parse_speed(args.speed)
    spec_server = server_command(args, plain=False)
    plain_server = None if args.no_plain else server_command(args, plain=True)
    started = time.perf_counter()
    report = bench_replay(sessions, spec_server, plain_server, speed=speed, drain_timeout_s=args.timeout)
    wall = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    plots = [args.out / "bench-replay-cdf.png", args.out / "bench-replay-warm.png"]
    plot_variants(report, plots[0])
    plot_result(report["results"]["speculative"], str(plots[1]), "speculative server: warm and cold plays")
    meta = {
        "sessions": len(sessions),
        "keystrokes": sum(s.keystrokes() for s in sessions),
        "session_s": sum(s.duration for s in sessions),
        "speed": "max" if speed is None else speed,
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
        "speculative_server": display(spec_server),
        "plain_server": None if plain_server is None else display(plain_server),
        "wall_s": wall,
        "plots": [str(p) for p in plots],
        "names": [s.name for s in sessions],
    }
    data = {"meta": meta, "variants": report["variants"], "ratios": report["ratios"]}
    (args.out / "bench-replay.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    with (args.out / "bench-replay-records.jsonl").open("w", encoding="utf-8") as out:
        for server, result in report["results"].items():
            for record in result.records:
                out.write(json.dumps({"server": server, **record.to_json()}) + "\n")
    for name, summary in report["variants"].items():
        print(f"== {name}\n{format_table(summary)}\n")
    text = markdown(report, meta)
    print(text)
    if args.markdown:
        replace_section(args.markdown, text)
    return 0
