"""Before/after measurements of a distilled draft on held-out files: agreement and real speculative decoding.

1. Teacher-forced agreement: how often the draft's argmax equals the target's at each held-out position
   (cheap: the target labels exist already, only draft forwards run).
2. Real speculative decoding with the Engine (drafting="model") on FIM prompts from held-out files:
   acceptance rate, tau (tokens per target forward) and decode time, each draft on the same prompts
   right after plain greedy, whose output every draft's output must equal token for token."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from codespec.distill.data import ExampleConfig, SourceFile, fim_prompt, line_start_spans
from codespec.distill.teacher import Labels
from codespec.distill.train import compute_context, distill_loss, draft_logits


@torch.inference_mode()
def agreement(model: torch.nn.Module, examples: Sequence, labels: Sequence[Labels], *,
              autocast: str | None = None) -> dict:
    """Share of positions where the draft's argmax is the target's, and the KL, in all and per kind of
    example (fim: the file's middle; fim-greedy: the target's own continuation, what decoding meets).
    `autocast`: computed as in training (see TrainConfig.autocast)."""
    loss = 0.0
    kinds: dict[str, list[int]] = {}  # kind -> [agreeing positions, positions]
    for example, label in zip(examples, labels, strict=True):
        with compute_context(model, autocast):
            logits = draft_logits(model, example)
        kind = kinds.setdefault(example.kind, [0, 0])
        kind[0] += int((logits.argmax(-1).cpu() == label.ids[:, 0].long()).sum())
        kind[1] += example.positions
        loss += float(distill_loss(logits, label, 0.0).sum())
    agree = sum(a for a, _ in kinds.values())
    positions = sum(n for _, n in kinds.values())
    return {"agreement": agree / positions if positions else 0.0,
            "kl": loss / positions if positions else 0.0, "positions": positions,
            "by_kind": {k: {"agreement": a / n, "positions": n} for k, (a, n) in sorted(kinds.items()) if n}}


@dataclass(frozen=True)
class EvalPrompt:
    name: str
    ids: list[int]


def eval_prompts(files: Sequence[SourceFile], tokenizer, n: int, seed: int, *, prefix_tokens: int = 256,
                 suffix_tokens: int = 48) -> list[EvalPrompt]:
    """FIM prompts with the cursor at the start of a multi-line span and that span cut out (the suffix is the
    code after it), as in the training FIM examples and in the editor when the user writes that span;
    round-robin over the files."""
    rng = random.Random(seed)
    per_file = []
    for file in files:
        spans = [s for s in line_start_spans(file, ExampleConfig().max_middle_lines)
                 if file.text.count("\n", s[0], s[1]) >= 1]
        rng.shuffle(spans)
        per_file.append((file, spans))
    prompts: list[EvalPrompt] = []
    while len(prompts) < n and any(spans for _, spans in per_file):
        for file, spans in per_file:
            if spans and len(prompts) < n:
                start, end = spans.pop()
                line = file.text.count("\n", 0, start) + 1
                ids = fim_prompt(tokenizer, file.text[:start], file.text[end:], prefix_tokens, suffix_tokens)
                prompts.append(EvalPrompt(f"{file.relpath}:{line}", ids))
    return prompts


def speculative_eval(target, drafts: dict[str, object], prompts: Sequence[EvalPrompt], max_new_tokens: int, *,
                     progress: bool = True, plain_paths: dict[tuple, list[int]] | None = None) -> dict:
    """Per draft: acceptance, tau, decode seconds vs plain greedy, and prompts whose output differs.
    `plain_paths` (prompt ids -> plain greedy tokens with their stop token) gets every plain run, for a replay."""
    from tqdm import tqdm

    from codespec.decode.engine import Engine, drafter_from
    from codespec.distill.tau import target_path

    names = list(drafts)
    # One engine, each run given its drafter: the target's KV cache for the prompt is then reused by every
    # run of the same prompt (only the first run pays the prefill).
    drafters = {name: drafter_from(draft) for name, draft in drafts.items()}
    engine = Engine(target, drafts[names[0]], drafting="model", drafter=drafters[names[0]],
                    stop_token_ids=getattr(target, "stop_ids", None) or None)
    totals = {name: {"drafted": 0, "accepted": 0, "new_tokens": 0, "target_forwards": 0, "decode_s": 0.0,
                     "divergences": 0} for name in ["plain", *names]}
    runs = []
    bar = tqdm(total=len(prompts) * (len(names) + 1), desc="speculative eval", unit="run", disable=not progress,
               dynamic_ncols=True)
    for prompt in prompts:
        plain = engine.generate(prompt.ids, max_new_tokens=max_new_tokens, drafting="none")
        _add(totals["plain"], plain.stats.to_dict())
        if plain_paths is not None:
            plain_paths[tuple(prompt.ids)] = target_path(plain)
        bar.update()
        row = {"prompt": prompt.name, "tokens": len(plain.token_ids)}
        for name in names:
            result = engine.generate(prompt.ids, max_new_tokens=max_new_tokens, drafting="model",
                                     drafter=drafters[name])
            stats = result.stats.to_dict()
            _add(totals[name], stats)
            same = result.token_ids == plain.token_ids
            totals[name]["divergences"] += 0 if same else 1
            row[name] = {"tau": round(stats["tokens_per_forward"], 3), "acceptance": round(stats["acceptance_rate"], 3),
                         "tokens": stats["new_tokens"], "target_forwards": stats["target_forwards"],
                         "identical": same}
            bar.update()
        runs.append(row)
    bar.close()
    summary = {name: _summary(t, totals["plain"]["decode_s"]) for name, t in totals.items()}
    result = {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "summary": summary, "runs": runs}
    if len(names) == 2:
        result["tau_ratio"] = tau_ratio_interval(runs, names[0], names[1])
    return result


def tau_ratio_interval(runs: Sequence[dict], base: str, new: str, *, samples: int = 2000, seed: int = 0) -> dict:
    """tau(new) / tau(base) with a 95 % paired bootstrap interval over prompts (tau = tokens / target
    forwards summed over the resampled prompts), so that a change can be told from prompt-to-prompt noise."""
    rows = [r for r in runs if r[base]["target_forwards"] and r[new]["target_forwards"]]
    if not rows:
        return {"ratio": None, "ci95": None}

    def ratio(chosen: Sequence[dict]) -> float:
        tau = lambda name: sum(r[name]["tokens"] for r in chosen) / sum(r[name]["target_forwards"] for r in chosen)  # noqa: E731
        return tau(new) / tau(base)

    rng = random.Random(seed)
    draws = sorted(ratio([rng.choice(rows) for _ in rows]) for _ in range(samples))
    return {"ratio": round(ratio(rows), 4),
            "ci95": [round(draws[int(0.025 * samples)], 4), round(draws[int(0.975 * samples) - 1], 4)]}


def _add(total: dict, stats: dict) -> None:
    for key in ("drafted", "accepted", "new_tokens", "target_forwards", "decode_s"):
        total[key] += stats[key]


def _summary(total: dict, plain_s: float) -> dict:
    return {
        "acceptance_rate": round(total["accepted"] / total["drafted"], 4) if total["drafted"] else None,
        "tau": round(total["new_tokens"] / total["target_forwards"], 4) if total["target_forwards"] else None,
        "tokens": total["new_tokens"],
        "target_forwards": total["target_forwards"],
        "decode_s": round(total["decode_s"], 3),
        "speedup_vs_plain": round(plain_s / total["decode_s"], 3) if total["decode_s"] else None,
        "divergences": total["divergences"],
    }


def markdown(report: dict) -> str:
    """The before/after table for docs/distill.md."""
    lines = ["| draft | agreement (teacher-forced) | on the target's greedy middles | acceptance | tau "
             "| decode speedup vs plain | divergences |",
             "|---|---|---|---|---|---|---|"]
    spec = report.get("speculative", {}).get("summary", {})
    agree = report.get("agreement") or {}
    cell = lambda v, f: f.format(v) if v is not None else "-"  # noqa: E731
    for name in [n for n in spec if n != "plain"] or list(agree):
        row = spec.get(name, {})
        a = (agree.get(name) or {}).get("agreement")
        g = (agree.get(name) or {}).get("by_kind", {}).get("fim-greedy", {}).get("agreement")
        lines.append(f"| {name} | {cell(a, '{:.1%}')} | {cell(g, '{:.1%}')} | {cell(row.get('acceptance_rate'), '{:.1%}')} "
                     f"| {cell(row.get('tau'), '{:.3f}')} | {cell(row.get('speedup_vs_plain'), '{:.2f}x')} "
                     f"| {row.get('divergences', '-')}/{report.get('speculative', {}).get('prompts', '-')} |")
    return "\n".join(lines)


def tau_change(spec: dict) -> str | None:
    """'tau A -> B (+x %, 95 % interval)' of a `speculative_eval` result with a base and a distilled draft."""
    summary = spec.get("summary", {})
    base, new = summary.get("base", {}).get("tau"), summary.get("distilled", {}).get("tau")
    if not (base and new):
        return None
    ci = spec.get("tau_ratio", {}).get("ci95")
    interval = f", 95 % paired bootstrap {ci[0] - 1:+.1%} .. {ci[1] - 1:+.1%}" if ci else ""
    return f"tau {base:.3f} -> {new:.3f} ({new / base - 1:+.1%}{interval})"


def plot(report: dict, path) -> None:
    """Per held-out prompt, tau with the distilled draft against tau with the base one (above the diagonal:
    better), and the teacher-forced agreement per kind of held-out example, before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_prompt, by_kind) = plt.subplots(1, 2, figsize=(11, 4.5))
    runs = report.get("speculative", {}).get("runs", [])
    base = [r["base"]["tau"] for r in runs if "base" in r and "distilled" in r]
    new = [r["distilled"]["tau"] for r in runs if "base" in r and "distilled" in r]
    per_prompt.scatter(base, new, s=18, color="#2a7")
    top = max([*base, *new, 1.0]) * 1.05
    per_prompt.plot([0, top], [0, top], color="black", linewidth=0.8)
    per_prompt.set_title(tau_change(report.get("speculative", {})) or "", fontsize=10)
    per_prompt.set_xlabel("tau, base draft (per held-out prompt)")
    per_prompt.set_ylabel("tau, distilled draft")
    agree = report.get("agreement") or {}
    kinds = sorted((agree.get("base") or {}).get("by_kind", {}))
    for offset, name, color in ((-0.2, "base", "#888"), (0.2, "distilled", "#2a7")):
        values = [agree[name]["by_kind"][k]["agreement"] * 100 for k in kinds]
        bars = by_kind.bar([i + offset for i in range(len(kinds))], values, width=0.4, label=name, color=color)
        by_kind.bar_label(bars, fmt="%.1f", fontsize=8)
    by_kind.set_xticks(range(len(kinds)),
                       [f"{k}\n({agree['base']['by_kind'][k]['positions']} pos.)" for k in kinds], fontsize=8)
    by_kind.set_ylim(50, 100)
    by_kind.set_ylabel("teacher-forced agreement with the target (%)")
    by_kind.set_title("held-out agreement per kind of example", fontsize=10)
    if kinds:
        by_kind.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
