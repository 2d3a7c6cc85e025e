"""tau of distilled drafts on many held-out prompts and drafting configurations, replayed.

1. Plain greedy output of the target (fp32 `Engine`, as `codespec bench distill`) on the first `--total`
   prompts of the run's seeded held-out list, kept in `--plain` (JSON; extended, never recomputed), with the
   stop token that ended each one.
2. Per draft (the run's base draft and every DIR), one forward per prompt gives its greedy token and
   confidence after every prefix of that output; `codespec.distill.tau` turns them into the target
   forwards and accepted tokens of speculative decoding with `ModelDrafter` under each `--config`
   (max_draft:min_confidence; the first is the default).
3. Where a draft's DIR/distill-eval.json (and `--engine-rows`, outputs of more_prompts.py) measured the same
   prompts with the real Engine, the replayed target forwards are compared with them, prompt by prompt.

    python experiments/distill/replay_tau.py --plain PLAIN.json --total 160 \\
        --out experiments/distill/replay-asyncio.json DIR [DIR ...]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from codespec.decode.drafters import DraftModelConfig
from codespec.decode.engine import Engine
from codespec.distill.evaluate import eval_prompts, tau_ratio_interval
from codespec.distill.pipeline import heldout_files
from codespec.distill.tau import draft_predictions, replay
from codespec.models import load_model


def plain_outputs(meta: dict, total: int, path: Path, max_new: int) -> tuple[list[dict], list[int]]:
    """The rows, and the engine's stop tokens (kept in the file: no target load once all rows exist)."""
    saved = json.loads(path.read_text()) if path.exists() else {"rows": []}
    rows = saved["rows"]
    if len(rows) >= total:
        return rows[:total], saved["stop_ids"]
    target = load_model(meta["target"], dtype="auto")
    prompts = eval_prompts(heldout_files(meta), target.tokenizer, total, meta["seed"], prefix_tokens=256)
    assert [r["prompt"] for r in rows] == [p.name for p in prompts[: len(rows)]], "another prompt list"
    engine = Engine(target, None, drafting="none", stop_token_ids=target.stop_ids or None)
    for prompt in prompts[len(rows):]:
        t0 = time.time()
        result = engine.generate(prompt.ids, max_new_tokens=max_new, drafting="none")
        rows.append({"prompt": prompt.name, "prompt_ids": prompt.ids, "tokens": result.token_ids,
                     "finish": result.finish_reason, "stop": result.stop_token})
        path.write_text(json.dumps({"target": meta["target"], "max_new_tokens": max_new,
                                    "stop_ids": sorted(engine.stop_token_ids), "rows": rows}))
        print(len(rows), prompt.name, len(result.token_ids), result.finish_reason, f"{time.time() - t0:.1f}s",
              flush=True)
    return rows, sorted(engine.stop_token_ids)


def engine_rows(draft: Path, extra: list[Path]) -> dict[int, dict]:
    """Prompt index -> {"prompt", "base", "distilled"} measured by the Engine (bench distill: the first prompts,
    more_prompts.py: the next ones). By index: two prompts may start on the same line (spans of two lengths)."""
    rows: dict[int, dict] = {}
    report = draft / "distill-eval.json"
    if report.exists():
        for i, r in enumerate(json.loads(report.read_text())["speculative"]["runs"]):
            rows[i] = {"prompt": r["prompt"], "base": r["base"], "distilled": r["distilled"]}
    for path in extra:
        more = json.loads(path.read_text())
        first = more["prompts"] - more["measured_here"]
        for i, r in enumerate(more["new_runs"], start=first):
            if draft.name in r:
                rows.setdefault(i, {"prompt": r["prompt"], "base": r["base"], "distilled": r[draft.name]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("drafts", nargs="+", type=Path)
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--total", type=int, default=160)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--config", action="append", default=None,
                        help="max_draft:min_confidence (repeatable; default 8:0.3, the engine's)")
    parser.add_argument("--engine-rows", type=Path, action="append", default=[])
    parser.add_argument("--model", action="append", default=[],
                        help="NAME=SPEC: another draft by model spec (e.g. the target itself, the ceiling)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    default = DraftModelConfig()
    configs = {spec: DraftModelConfig(max_draft=int(spec.split(":")[0]), min_confidence=float(spec.split(":")[1]))
               for spec in (args.config or [f"{default.max_draft}:{default.min_confidence}"])}
    meta = json.loads((args.drafts[0] / "distill.json").read_text())
    rows, stops = plain_outputs(meta, args.total, args.plain, args.max_new_tokens)
    result = {"prompts": len(rows), "max_new_tokens": args.max_new_tokens, "plain": str(args.plain),
              "configs": list(configs), "drafts": {}}
    replayed: dict[str, dict[str, list]] = {}
    others = dict(m.split("=", 1) for m in args.model)
    for name, spec in [("base", meta["draft"]), *[(d.name, str(d)) for d in args.drafts], *others.items()]:
        draft = load_model(spec, dtype="auto")
        t0 = time.time()
        predictions = []
        for row in rows:
            tokens = row["tokens"] + ([row["stop"]] if row["stop"] is not None else [])
            predictions.append((draft_predictions(draft.model, row["prompt_ids"], tokens), tokens))
        replayed[name] = {c: [replay(p, t, args.max_new_tokens, stops, config) for p, t in predictions]
                          for c, config in configs.items()}
        print(f"{name}: {len(rows)} prompts replayed in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        del draft
    dirs = {d.name: d for d in args.drafts}
    for name in [*dirs, *others]:
        entry = {}
        for c in configs:
            runs = [{"prompt": row["prompt"],
                     **{k: {"tokens": r.new_tokens, "target_forwards": r.target_forwards, "accepted": r.accepted}
                        for k, r in (("base", replayed["base"][c][i]), (name, replayed[name][c][i]))}}
                    for i, row in enumerate(rows)]
            tau = {k: sum(r[k]["tokens"] for r in runs) / sum(r[k]["target_forwards"] for r in runs)
                   for k in ("base", name)}
            entry[c] = {"tau_base": round(tau["base"], 4), "tau": round(tau[name], 4),
                        "ratio": tau_ratio_interval(runs, "base", name), "runs": runs}
            print(f"{name} {c}: tau {tau['base']:.3f} -> {tau[name]:.3f} {entry[c]['ratio']}", flush=True)
        measured = engine_rows(dirs[name], args.engine_rows) if name in dirs else {}
        first = next(iter(configs))
        assert all(measured[i]["prompt"] == rows[i]["prompt"] for i in measured if i < len(rows))
        checked = [(row["prompt"], k, measured[i][k]["target_forwards"], run[key]["target_forwards"])
                   for i, (row, run) in enumerate(zip(rows, entry[first]["runs"], strict=True)) if i in measured
                   for k, key in (("base", "base"), ("distilled", name))]
        entry["engine_check"] = {"config": first, "compared": len(checked),
                                 "equal": sum(a == b for _, _, a, b in checked),
                                 "differ": [c for c in checked if c[2] != c[3]]}
        print(f"{name}: replayed target forwards equal the Engine's on {entry['engine_check']['equal']} "
              f"of {len(checked)} (prompt, draft) pairs", flush=True)
        for c in list(configs)[1:]:  # per-prompt rows for the default configuration only
            del entry[c]["runs"]
        result["drafts"][name] = entry
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
