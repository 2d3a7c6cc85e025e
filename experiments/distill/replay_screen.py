"""Screen saved drafts by replay on the prompts a `codespec bench distill --replay-prompts N` already ran.

Takes the plain greedy outputs T that bench kept (DIR/work/plain-outputs.json: [prompt ids, T] rows), so no
target runs at all: one forward of each draft per prompt (`codespec.distill.tau.draft_predictions`), then
tau under the engine's default drafting and max_draft 12 (or the `--config`s given), the change against the
base draft with its 95 % paired bootstrap interval (as bench), and where along T the draft's argmax is not the
target's token: how many such positions, how many of the base draft's it fixed and how many it broke.
It also prints what tau would be if a random share of the draft's remaining mismatches along T were fixed
(`--what-if`): how far the draft's agreement on the target's own path is from a given gain. With `--target`,
the same counts by the target's own probability of its token (one target forward per prompt): whether the
mismatches left are where the target itself hesitates.

    python experiments/distill/replay_screen.py --plain RUN/work/plain-outputs.json \\
        --out experiments/distill/loss-screen.json --what-if runs/swa-last runs/swa-last runs/tvd ...
"""

import argparse
import json
import random
from pathlib import Path

import torch

from codespec.decode.drafters import DraftModelConfig
from codespec.distill.evaluate import tau_ratio_interval
from codespec.distill.tau import DraftPredictions, draft_predictions, replay
from codespec.models import load_model

CONFIGS = {"8:0.3": DraftModelConfig(), "12:0.3": DraftModelConfig(max_draft=12)}


def schedule(text: str) -> DraftModelConfig:
    """START:MAX:CONF -> the drafting configuration with that start_draft, max_draft and min_confidence."""
    start, longest, confidence = text.split(":")
    return DraftModelConfig(start_draft=int(start), max_draft=int(longest), min_confidence=float(confidence))


def predictions(spec: str, rows: list) -> list[DraftPredictions]:
    model = load_model(spec, device="cpu", dtype="fp32", progress=False).model
    return [draft_predictions(model, prompt, path) for prompt, path in rows]


BINS = ("<0.5", "0.5-0.8", ">=0.8")


@torch.inference_mode()
def target_bins(spec: str, rows: list) -> dict[tuple[int, int], str]:
    """(prompt, position along T) -> the bin of the target's probability of T's token there."""
    model = load_model(spec, device="cpu", dtype="fp32", progress=False).model
    bins = {}
    for j, (prompt, path) in enumerate(rows):
        logits = model(input_ids=torch.tensor([[*prompt, *path[:-1]]])).logits[0, len(prompt) - 1:]
        probs = torch.softmax(logits.float(), dim=-1).gather(-1, torch.tensor(path)[:, None])[:, 0]
        for i, prob in enumerate(probs.tolist()):
            bins[(j, i)] = BINS[0] if prob < 0.5 else BINS[1] if prob < 0.8 else BINS[2]
    del model
    return bins


def replayed(preds: list[DraftPredictions], rows: list, max_new: int, stop_ids: list[int], config) -> list[dict]:
    out = []
    for (_, path), draft in zip(rows, preds, strict=True):
        result = replay(draft, path, max_new, stop_ids, config)
        out.append({"tokens": result.new_tokens, "target_forwards": result.target_forwards})
    return out


def tau(runs: list[dict]) -> float:
    return sum(r["tokens"] for r in runs) / sum(r["target_forwards"] for r in runs)


def mismatches(preds: list[DraftPredictions], rows: list) -> set[tuple[int, int]]:
    return {(j, i) for j, ((_, path), draft) in enumerate(zip(rows, preds, strict=True))
            for i, token in enumerate(path) if draft.tokens[i] != token}


def with_fixed(preds: list[DraftPredictions], rows: list, fixed: set[tuple[int, int]]) -> list[DraftPredictions]:
    """The draft with the target's token (at confidence >= 0.5: drafting goes on) at the `fixed` positions."""
    return [DraftPredictions([path[i] if (j, i) in fixed else t for i, t in enumerate(draft.tokens)],
                             [max(c, 0.5) if (j, i) in fixed else c for i, c in enumerate(draft.confidence)])
            for j, ((_, path), draft) in enumerate(zip(rows, preds, strict=True))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--base", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--what-if", help="a draft DIR: tau if 10/20/30 %% of its mismatches along T were fixed")
    parser.add_argument("--target", help="the target SPEC: mismatches by the target's probability of its token")
    parser.add_argument("--config", action="append", metavar="START:MAX:CONF",
                        help="drafting configurations to replay instead of 8:0.3 and 12:0.3 (start_draft:max_draft:"
                             "min_confidence; repeatable; the first one is printed and used by --what-if)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("drafts", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    saved = json.loads(args.plain.read_text())
    rows, max_new, stop_ids = saved["rows"], saved["key"]["max_new_tokens"], saved["key"]["stop_ids"]
    positions = sum(len(path) for _, path in rows)
    configs = {text: schedule(text) for text in args.config} if args.config else CONFIGS
    first = next(iter(configs))
    base = predictions(args.base, rows)
    base_wrong = mismatches(base, rows)
    base_runs = {name: replayed(base, rows, max_new, stop_ids, config) for name, config in configs.items()}
    bin_of = target_bins(args.target, rows) if args.target else None
    report = {"plain": str(args.plain), "prompts": len(rows), "positions_along_T": positions, "base": args.base,
              "base_mismatches": len(base_wrong), "drafts": {}}
    for spec in args.drafts:
        preds = predictions(spec, rows)
        wrong = mismatches(preds, rows)
        entry = {"mismatches": len(wrong), "fixed": len(base_wrong - wrong), "broke": len(wrong - base_wrong)}
        if bin_of is not None:
            entry["by_target_probability"] = {
                label: {"positions": sum(b == label for b in bin_of.values()),
                        "base_mismatches": sum(bin_of[k] == label for k in base_wrong),
                        "mismatches": sum(bin_of[k] == label for k in wrong),
                        "fixed": sum(bin_of[k] == label for k in base_wrong - wrong),
                        "broke": sum(bin_of[k] == label for k in wrong - base_wrong)} for label in BINS}
            print(f"  by the target's probability of its token: {entry['by_target_probability']}", flush=True)
        for name, config in configs.items():
            runs = [{"base": b, "draft": d} for b, d in zip(base_runs[name],
                                                            replayed(preds, rows, max_new, stop_ids, config),
                                                            strict=True)]
            entry[name] = {"base_tau": round(tau([r["base"] for r in runs]), 4),
                           "tau": round(tau([r["draft"] for r in runs]), 4),
                           **tau_ratio_interval(runs, "base", "draft")}
        report["drafts"][spec] = entry
        default = entry[first]
        print(f"{spec}: tau {default['base_tau']:.3f} -> {default['tau']:.3f}, {default['ratio'] - 1:+.1%} "
              f"(CI {default['ci95'][0] - 1:+.1%} .. {default['ci95'][1] - 1:+.1%}); mismatches along T "
              f"{len(base_wrong)} -> {len(wrong)} of {positions}: fixed {entry['fixed']}, broke {entry['broke']}",
              flush=True)
        if spec == args.what_if:
            base_tau = default["base_tau"]
            report["what_if"] = {"draft": spec, "fixed_share": {}}
            for share in (0.1, 0.2, 0.3):
                changes = []
                for seed in range(5):
                    fixed = set(random.Random(seed).sample(sorted(wrong), int(share * len(wrong))))
                    changes.append(tau(replayed(with_fixed(preds, rows, fixed), rows, max_new, stop_ids,
                                                configs[first])) / base_tau - 1)
                report["what_if"]["fixed_share"][share] = round(sum(changes) / len(changes), 4)
                print(f"  what if {share:.0%} of its mismatches along T were fixed: {sum(changes) / len(changes):+.1%}")
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
