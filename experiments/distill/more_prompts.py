"""More held-out prompts for drafts already measured by `codespec bench distill` on the first N.

Runs plain greedy, the base draft and every given draft on prompts N+1 .. M of the same seeded list
(`eval_prompts` is a prefix-stable list: its first N prompts are the ones the bench used), then joins
each draft's per-prompt rows from its DIR/distill-eval.json with the new ones and reports tau on all M
prompts with a paired bootstrap interval. Greedy decoding is deterministic: the base draft's rows on the
first N prompts are the same in every report, which this checks.

    python experiments/distill/more_prompts.py --total 64 --out experiments/distill/more-prompts.json DIR [DIR ...]

`--base-from JSON` (an earlier output of this script on the same held-out prompts) takes the base draft's
rows on the new prompts from there instead of running the base draft again (greedy: they would be the
same; the prompt names and plain greedy's token counts are checked); plain greedy still runs, to check
every draft's output against it.
"""

import argparse
import json
from pathlib import Path

import torch

from codespec.distill.evaluate import eval_prompts, speculative_eval, tau_ratio_interval
from codespec.distill.pipeline import heldout_files
from codespec.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("drafts", nargs="+", type=Path)
    parser.add_argument("--total", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--base-from", type=Path, help="base rows of the new prompts from this earlier output")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    reports = {d.name: json.loads((d / "distill-eval.json").read_text()) for d in args.drafts}
    meta = json.loads((args.drafts[0] / "distill.json").read_text())
    bench = next(iter(reports.values()))
    first = bench["speculative"]
    done, max_new = first["prompts"], first["max_new_tokens"]
    for name, report in reports.items():
        spec = report["speculative"]
        assert (spec["prompts"], spec["max_new_tokens"]) == (done, max_new), name
        assert [r["base"] for r in spec["runs"]] == [r["base"] for r in first["runs"]], f"{name}: base rows differ"
    target = load_model(meta["target"], dtype=args.dtype)
    drafts = {} if args.base_from else {"base": load_model(meta["draft"], dtype=args.dtype)}
    drafts.update({d.name: load_model(str(d), dtype=args.dtype) for d in args.drafts})
    prompts = eval_prompts(heldout_files(meta), target.tokenizer, args.total, meta["seed"],
                           prefix_tokens=bench.get("prefix_tokens", 256))
    names = [r["prompt"] for r in first["runs"]]
    assert [p.name for p in prompts[:done]] == names, "the prompt list is not the one the bench used"
    new = speculative_eval(target, drafts, prompts[done:], max_new)
    if args.base_from:
        earlier = json.loads(args.base_from.read_text())
        assert earlier["max_new_tokens"] == max_new and len(earlier["new_runs"]) == len(new["runs"])
        for row, old in zip(new["runs"], earlier["new_runs"], strict=True):
            assert (row["prompt"], row["tokens"]) == (old["prompt"], old["tokens"]), "not the same prompts"
            row["base"] = old["base"]
        new["summary"]["base"] = earlier["new_summary"]["base"]
    result = {"prompts": args.total, "measured_here": len(prompts) - done, "max_new_tokens": max_new,
              "new_runs": new["runs"], "new_summary": new["summary"], "drafts": {}}
    for name, report in reports.items():
        rows = [{"prompt": r["prompt"], "base": r["base"], name: r["distilled"]} for r in report["speculative"]["runs"]]
        rows += [{"prompt": r["prompt"], "base": r["base"], name: r[name]} for r in new["runs"]]
        tau = {k: sum(r[k]["tokens"] for r in rows) / sum(r[k]["target_forwards"] for r in rows) for k in ("base", name)}
        result["drafts"][name] = {"tau_base": round(tau["base"], 4), "tau": round(tau[name], 4),
                                  "divergences": sum(not r[name]["identical"] for r in rows),
                                  "first": tau_ratio_interval(rows[:done], "base", name),
                                  "new": tau_ratio_interval(rows[done:], "base", name),
                                  "all": tau_ratio_interval(rows, "base", name)}
        d = result["drafts"][name]
        print(f"{name}: tau {d['tau_base']:.3f} -> {d['tau']:.3f} on {len(rows)} prompts, ratio {d['all']}; "
              f"first {done}: {d['first']['ratio']}, next {len(rows) - done}: {d['new']['ratio']}; "
              f"divergences {d['divergences']}")
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
