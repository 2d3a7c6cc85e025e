"""`codespec bench layout`: FIM prompt layouts compared on what typing costs and what the model writes.

(a) keystrokes: the recorded sessions (tests/sessions/data/*.jsonl) replayed into Documents in-process;
    at each inline-completion request the context is built and the tokens a KV-reusing engine would
    prefill are counted: len(prompt_ids) minus the prefix shared with the previous prompt.
    Tokenizer only (cheap).
(b) first line: FIM prompts cut from this Python's stdlib files (at statement starts and mid-line;
    the rest of the line removed), completed greedily through build_context -> Engine -> postprocess;
    exact first-line match per layout.
(c) HumanEval single-line infilling is `codespec bench humaneval --layout ...` (the same runner).

Layouts are named "psm", "near0", "near1", "near2" (near-suffix with N lines after the cursor line) and
"anchored" / "anchoredW" (the pinned block made from the document at the cut, a cursor window of W tokens;
ContextConfig's default window without W)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from codespec.context.build import ContextCache, ContextConfig, build_context
from codespec.context.document import Document
from codespec.decode.runtimes.kv import common_prefix_len
from codespec.flags import add_deprecated_flag
from codespec.modes import DRAFTING_MODES, RUNTIMES
from codespec.stats import percentile

SESSIONS = Path(__file__).resolve().parents[2] / "tests" / "sessions" / "data"
LAYOUT_NAMES = ("psm", "near0", "near1", "near2")


def layout_config(name: str, base: ContextConfig | None = None) -> ContextConfig:
    """The ContextConfig of a layout name: "psm" or "nearN" (near-suffix with N lines)."""
    base = base or ContextConfig()
    if name == "psm":
        return dataclasses.replace(base, layout="psm")
    if name.startswith("near") and name[4:].isdigit():
        return dataclasses.replace(base, layout="near-suffix", near_suffix_lines=int(name[4:]))
    if name == "anchored":
        return dataclasses.replace(base, layout="anchored")
    if name.startswith("anchored") and name[8:].isdigit():
        return dataclasses.replace(base, layout="anchored", window_tokens=int(name[8:]))
    raise ValueError(f"unknown layout {name!r}: psm, nearN, anchored or anchoredW")


# ----------------------------------------------------------------------------------------------- (a)


def session_requests(path: Path) -> Iterator[tuple[dict[str, Document], Document, int, int]]:
    """Replays one session file (read and checked by the sessions module): yields (open documents,
    document, line, character) at each inline-completion request, with every earlier edit applied."""
    from codespec.sessions.format import DID_CHANGE, DID_CLOSE, DID_OPEN, INLINE_COMPLETION, read_session

    docs: dict[str, Document] = {}
    for event in read_session(path).events:
        params, uri = event.params, event.uri
        if event.method == DID_OPEN:
            item = params["textDocument"]
            docs[uri] = Document(uri, item["languageId"], item["text"], item.get("version", 0))
        elif event.method == DID_CHANGE:
            for change in params["contentChanges"]:
                span = change.get("range")
                rng = None
                if span is not None:
                    rng = (
                        (span["start"]["line"], span["start"]["character"]),
                        (span["end"]["line"], span["end"]["character"]),
                    )
                docs[uri].apply_change(rng, change["text"], params["textDocument"].get("version"))
        elif event.method == DID_CLOSE:
            docs.pop(uri, None)
        elif event.method == INLINE_COMPLETION and uri in docs:
            position = params["position"]
            yield docs, docs[uri], position["line"], position["character"]


def keystroke_costs(tokenizer, config: ContextConfig, sessions: Sequence[Path]) -> dict[str, Any]:
    """Tokens prefilled per request (new tokens against the previous model prompt of the session)."""
    costs: list[int] = []
    lengths: list[int] = []
    full = 0
    for path in sessions:
        cache = ContextCache()
        previous: list[int] = []
        for docs, doc, line, character in session_requests(path):
            others = [d for d in docs.values() if d is not doc]
            ctx = build_context(doc, line, character, tokenizer=tokenizer, other_docs=others, config=config, cache=cache)
            if ctx.mode == "none":
                continue  # no model call: the engine keeps the previous prompt's KV
            ids = ctx.prompt_ids
            shared = common_prefix_len(previous, ids)
            if previous:
                costs.append(len(ids) - shared)
                full += shared == 0 or shared < len(ids) // 2
            lengths.append(len(ids))
            previous = ids
    return {
        "requests": len(costs),
        "p50": percentile(costs, 50),
        "p90": percentile(costs, 90),
        "mean": round(statistics.fmean(costs), 1) if costs else 0.0,
        "over_half_prompt": full,
        "mean_prompt_tokens": round(statistics.fmean(lengths), 1) if lengths else 0.0,
    }


# ----------------------------------------------------------------------------------------------- (b)


@dataclasses.dataclass
class Cut:
    name: str
    text: str  # the document with the rest of the cursor's line removed
    line: int
    character: int
    expected: str  # the removed rest of the line


def stdlib_cuts(n: int, seed: int = 0, stdlib: Path | None = None) -> list[Cut]:
    """`n` cuts from stdlib modules, half at a statement's start (after its indentation), half mid-line
    (after an identifier or punctuation), on lines with enough file above and below."""
    root = stdlib or Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if 8_000 < p.stat().st_size < 200_000)
    rng = random.Random(seed)
    rng.shuffle(files)
    cuts: list[Cut] = []
    for path in files:
        if len(cuts) >= n:
            break
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        candidates = [
            i for i in range(60, len(lines) - 60)
            if len(lines[i].strip()) >= 8 and not lines[i].lstrip().startswith(("#", '"', "'"))
        ]
        if not candidates:
            continue
        row = rng.choice(candidates)
        text = lines[row]
        indent = len(text) - len(text.lstrip())
        if len(cuts) % 2 == 0:
            column = indent
        else:
            stops = [i + 1 for i, ch in enumerate(text) if i > indent + 2 and ch in " (.=,[:" and i < len(text) - 3]
            if not stops:
                continue
            column = rng.choice(stops)
        expected = text[column:]
        document = "\n".join(lines[:row] + [text[:column]] + lines[row + 1 :])
        cuts.append(Cut(f"{path.name}:{row + 1}:{column + 1}", document, row, column, expected))
    return cuts


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip()


def first_line_matches(engine, cuts: Sequence[Cut], layouts: Sequence[str], *, max_new_tokens: int = 48,
                       base: ContextConfig | None = None,
                       progress: Callable[[dict], None] | None = None) -> list[dict]:
    from codespec.context.parsecheck import parse_checked
    from codespec.context.postprocess import postprocess

    rows = []
    for cut in cuts:
        row: dict[str, Any] = {"cut": cut.name, "expected": cut.expected}
        for name in layouts:
            doc = Document(f"file:///stdlib/{cut.name.split(':')[0]}", "python", cut.text)
            ctx = build_context(doc, cut.line, cut.character, tokenizer=engine.tokenizer,
                                config=layout_config(name, base), cache=ContextCache())
            started = time.perf_counter()
            raw = ""
            if ctx.mode != "none":
                raw = engine.generate(ctx.prompt_ids, max_new_tokens=max_new_tokens, stop=ctx.stop).text
            post = parse_checked(postprocess(raw, ctx), ctx)
            row[name] = {
                "match": first_line(post).strip() == cut.expected.strip(),
                "post": first_line(post),
                "mode": ctx.mode,
                "prompt_tokens": len(ctx.prompt_ids),
                "seconds": round(time.perf_counter() - started, 2),
            }
        rows.append(row)
        if progress:
            progress(row)
    return rows


# ----------------------------------------------------------------------------------------------- CLI


def run(args: argparse.Namespace) -> int:
    from codespec.benchmarks.context import load_bench_tokenizer

    layouts = args.layouts.split(",")
    for name in layouts:
        layout_config(name)  # fail early on a bad name
    report: dict[str, Any] = {"layouts": layouts}
    if args.part in ("keystrokes", "all"):
        tokenizer, used = load_bench_tokenizer(args.tokenizer)
        sessions = sorted(Path(args.sessions).glob("*.jsonl"))
        report["tokenizer"] = used
        report["sessions"] = len(sessions)
        report["keystrokes"] = {}
        for name in layouts:
            report["keystrokes"][name] = keystroke_costs(tokenizer, layout_config(name), sessions)
            print(name, json.dumps(report["keystrokes"][name]), flush=True)
    if args.part in ("first-line", "all"):
        from codespec.decode.engine import Engine
        from codespec.models import load_model

        # The torch runtime, as `bench humaneval` loads it: greedy output is the reference model's.
        target = load_model(args.model, threads=args.threads, progress=False, runtime=args.runtime)
        engine = Engine(target, None, args.drafting, stop_token_ids=getattr(target, "stop_ids", None) or None)
        cuts = stdlib_cuts(args.n, seed=args.seed)

        def show(row: dict) -> None:
            print(json.dumps({k: (v["match"], v["seconds"]) if isinstance(v, dict) else v
                              for k, v in row.items() if k != "expected"}), flush=True)

        base = ContextConfig(max_prompt_tokens=args.budget)
        rows = first_line_matches(engine, cuts, layouts, max_new_tokens=args.max_tokens, base=base, progress=show)
        report["first_line"] = {
            name: {"n": len(rows), "match": sum(r[name]["match"] for r in rows),
                   "mean_seconds": round(statistics.fmean(r[name]["seconds"] for r in rows), 2)}
            for name in layouts
        }
        # Paired against the first layout: prompts only one of the two got right.
        base = layouts[0]
        for name in layouts[1:]:
            report["first_line"][name]["wins_vs_" + base] = sum(r[name]["match"] and not r[base]["match"] for r in rows)
            report["first_line"][name]["losses_vs_" + base] = sum(r[base]["match"] and not r[name]["match"] for r in rows)
        if args.jsonl:
            Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(json.dumps(report, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def register_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=("keystrokes", "first-line", "all"), default="keystrokes")
    parser.add_argument("--layouts", default=",".join(LAYOUT_NAMES), help="comma-separated: psm, nearN")
    parser.add_argument("--tokenizer", default="bundled:qwen2.5-coder-0.5b", help="(a): whose tokenizer")
    parser.add_argument("--sessions", default=str(SESSIONS), help="(a): folder of session .jsonl files")
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b", help="(b): the model")
    parser.add_argument("--drafting", default="lookup", choices=DRAFTING_MODES)
    add_deprecated_flag(parser, "--draft", "--drafting", "drafting", choices=DRAFTING_MODES)
    parser.add_argument("--n", type=int, default=40, help="(b): prompts cut from stdlib files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--budget", type=int, default=ContextConfig().max_prompt_tokens,
                        help="(b): ContextConfig.max_prompt_tokens (smaller: faster on a slow CPU)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--runtime", default="torch", choices=RUNTIMES[1:],
                        help="(b): torch (greedy output is the reference model's) or llamacpp (the CPU default)")
    parser.add_argument("--jsonl", help="(b): per-prompt rows")
    parser.add_argument("--json-out", help="the report as JSON")
    parser.set_defaults(func=run)

