"""Probe: does the target's last hidden state ("feature") help a distilled draft agree with it?

A fusion head on a frozen draft model: at draft step i of a speculative step (i = 0 for the first draft token)
the draft's input position p is i + 1 positions after the last position the target has verified, whose
feature f (what the target's LM head read to give the step's own token) is known. The head adds a projection of
it to the draft's last hidden state before the draft's LM head: logits = lm_head(h[p] + P_d f[p - d]), one
zero-initialised P_d (target width -> draft width) per distance d = i + 1 <= D, and the draft alone beyond D.
Drafting would then cost one small matrix product more per token; nothing of the draft model itself changes.

1. The run's examples, middles and top-k labels, read from RUN/work (as `codespec distill` made them; the same
   arguments as that run) and the target's features for them, computed once into RUN/work/features-*.pt.
2. The draft's hidden states (one forward per example, frozen), then P_1..P_D trained on the run's loss (KL over
   the top-k partition + 0.5 CE), epoch by epoch, with the held-out teacher-forced agreement and KL at each d.
3. Replayed tau on the prompts of a bench's plain outputs (`--plain`), as `codespec.distill.tau` does for a
   draft model, with the fused prediction at each step's distance (the target's features along prompt + T: one
   target forward per prompt).

    python experiments/distill/fusion_probe.py --run runs/fused --draft runs/swa-last \\
        --plain RUN/work/plain-outputs.json --out experiments/distill/fusion-probe.json -- \\
        --repo $A --max-train-tokens 40000 --max-eval-tokens 4000 --fim-fraction 0.85 --greedy-fraction 0.1 \\
        --onpolicy-fraction 0.8 --greedy-batch 16 --ce-weight 0.5 --method full
"""

import argparse
import json
import random
import time
from pathlib import Path

import torch

from codespec.decode.drafters import DraftModelConfig
from codespec.distill import cli, pipeline, teacher
from codespec.distill.evaluate import tau_ratio_interval
from codespec.distill.tau import DraftPredictions, Replayed, draft_predictions, replay
from codespec.distill.train import distill_loss
from codespec.models import load_model


def fused(heads, h: torch.Tensor, f: torch.Tensor, positions: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft hidden states at `positions` with P_d f[p - d] added where p - d >= 0 (and which those are)."""
    source = positions - d
    known = source >= 0
    x = h.clone()
    x[known] = h[known] + heads[d - 1](f[source[known]])
    return x, known


def counts(result: Replayed) -> dict:
    return {"tokens": result.new_tokens, "target_forwards": result.target_forwards}


def held_out(heads, data, lm_head: torch.Tensor, distances: int) -> dict:
    agree = [0] * (distances + 1)
    kl = [0.0] * (distances + 1)
    n = 0
    with torch.no_grad():
        for example, label, f, h in data:
            positions = torch.arange(example.train_from - 1, len(example.ids))
            top = label.ids[:, 0].long()
            for d in range(distances + 1):
                logits = (h if d == 0 else fused(heads, h, f, positions, d)[0]) @ lm_head.T
                agree[d] += int((logits.argmax(-1) == top).sum())
                kl[d] += float(distill_loss(logits, label, 0.0).sum())
            n += len(top)
    return {f"d={d}" if d else "draft alone": {"agreement": round(agree[d] / n, 4), "kl": round(kl[d] / n, 4)}
            for d in range(distances + 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=Path, required=True, help="a distill OUT whose work/ holds the labels")
    parser.add_argument("--draft", required=True, help="the (distilled) draft the heads sit on, frozen")
    parser.add_argument("--base", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--distances", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("distill_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    run_parser = argparse.ArgumentParser()
    cli.add_distill_arguments(run_parser)
    run = run_parser.parse_args([a for a in args.distill_args if a != "--"] + ["--out", str(args.run)])
    run.dtype = "fp32"
    work = args.run / "work"
    target, _, _, train, held, train_labels, held_labels, _ = pipeline._labelled_examples(run, "cpu", work, fresh=False,
                                                                                   deadlines=None)
    name = pipeline._run_name(run.target, run)
    features = {split: teacher.feature_examples(target.model, examples, work / f"features-{split}.pt", model_name=name)
                for split, examples in (("heldout", held), ("train", train))}
    draft = load_model(args.draft, dtype="fp32", progress=False).model.eval().requires_grad_(False)
    lm_head = draft.lm_head.weight

    def prepared(examples, labels, feats):
        with torch.inference_mode():
            return [(e, lab, fl.features.float(), draft.model(input_ids=torch.tensor([e.ids])).last_hidden_state[0,
                     e.train_from - 1:].clone()) for e, lab, fl in zip(examples, labels, feats, strict=True)]

    train_data = prepared(train, train_labels, features["train"])
    held_data = prepared(held, held_labels, features["heldout"])
    width = features["train"][0].features.shape[-1]
    heads = torch.nn.ModuleList(torch.nn.Linear(width, lm_head.shape[1], bias=False) for _ in range(args.distances))
    for head in heads:
        torch.nn.init.zeros_(head.weight)
    report = {"draft": args.draft, "distances": args.distances, "lr": args.lr, "train_examples": len(train),
              "heldout_examples": len(held), "epochs": [{"epoch": 0, "held_out": held_out(heads, held_data, lm_head,
                                                                                         args.distances)}]}
    optimizer = torch.optim.Adam(heads.parameters(), lr=args.lr)
    rng = random.Random(0)
    for epoch in range(1, args.epochs + 1):
        order = list(range(len(train_data)))
        rng.shuffle(order)
        total = count = 0.0
        started = time.monotonic()
        for k in range(0, len(order), 4):
            optimizer.zero_grad()
            loss, n = 0.0, 0
            for i in order[k : k + 4]:
                example, label, f, h = train_data[i]
                positions = torch.arange(example.train_from - 1, len(example.ids))
                for d in range(1, args.distances + 1):
                    x, known = fused(heads, h, f, positions, d)
                    loss = loss + distill_loss(x @ lm_head.T, label, 0.5)[known].sum()
                    n += int(known.sum())
            (loss / n).backward()
            optimizer.step()
            total, count = total + loss.item(), count + n
        report["epochs"].append({"epoch": epoch, "train_loss": round(total / count, 4),
                                 "seconds": round(time.monotonic() - started), "held_out": held_out(
                                     heads, held_data, lm_head, args.distances)})
        print(json.dumps(report["epochs"][-1]), flush=True)

    saved = json.loads(args.plain.read_text())
    plain, max_new, stops = saved["rows"], saved["key"]["max_new_tokens"], saved["key"]["stop_ids"]
    config = DraftModelConfig()
    rows = [{"prompt": i} for i in range(len(plain))]
    base = load_model(args.base, dtype="fp32", progress=False).model
    with torch.inference_mode():
        for row, (prompt, path) in zip(rows, plain, strict=True):
            row["base"] = counts(replay(draft_predictions(base, prompt, path), path, max_new, stops, config))
            ids = torch.tensor([[*prompt, *path[:-1]]])
            f = target.model.base_model(input_ids=ids).last_hidden_state[0]
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(path))
            h = draft.model(input_ids=ids).last_hidden_state[0][positions]  # one draft forward: alone and fused
            per_distance = []
            for d in range(args.distances + 1):
                x = h if d == 0 else fused(heads, h, f, positions, d)[0]
                confidence, tokens = torch.softmax(x @ lm_head.T, -1).max(-1)
                per_distance.append(DraftPredictions(tokens.tolist(), confidence.tolist()))
            row["draft"] = counts(replay(per_distance[0], path, max_new, stops, config))
            # Draft token i of a step is i + 1 positions past the last verified feature.
            row["fused"] = counts(replay(per_distance[0], path, max_new, stops, config, by_step=per_distance[1:]))
    report["replay"] = {}
    for label in ("base", "draft", "fused"):
        tokens = sum(r[label]["tokens"] for r in rows)
        forwards = sum(r[label]["target_forwards"] for r in rows)
        report["replay"][label] = {"tau": round(tokens / forwards, 4), "target_forwards": forwards,
                                   "vs_base": tau_ratio_interval(rows, "base", label) if label != "base" else None}
    report["replay"]["fused_vs_draft"] = tau_ratio_interval(rows, "draft", "fused")
    print(json.dumps(report["replay"], indent=1))
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
