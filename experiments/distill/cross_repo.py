"""A draft distilled on one repository, measured on another's held-out prompts: is the gain the repository's
or the target's?

Runs plain greedy and each given draft on the first N held-out prompts of RUN (the ones `codespec bench
distill` measured there), joins them with the base draft's rows of RUN/distill-eval.json (greedy decoding is
deterministic: plain greedy's token count per prompt is checked against the report), and reports tau against
the base draft with a paired bootstrap interval, next to RUN's own distilled draft.

    python experiments/distill/cross_repo.py --out experiments/distill/cross-repo.json RUN:DRAFT [RUN:DRAFT ...]
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
    parser.add_argument("pairs", nargs="+", help="RUN:DRAFT, the run whose held-out prompts, the draft to measure")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {}
    targets = {}  # by spec: each RUN is measured against its own target
    for pair in args.pairs:
        run, draft_dir = map(Path, pair.split(":"))
        meta = json.loads((run / "distill.json").read_text())
        bench = json.loads((run / "distill-eval.json").read_text())
        spec = bench["speculative"]
        if meta["target"] not in targets:
            targets[meta["target"]] = load_model(meta["target"])
        target = targets[meta["target"]]
        prompts = eval_prompts(heldout_files(meta), target.tokenizer, spec["prompts"], meta["seed"],
                               prefix_tokens=bench.get("prefix_tokens", 256))
        assert [p.name for p in prompts] == [r["prompt"] for r in spec["runs"]], "not the bench's prompts"
        new = speculative_eval(target, {"cross": load_model(str(draft_dir))}, prompts, spec["max_new_tokens"])
        rows = []
        for old, row in zip(spec["runs"], new["runs"], strict=True):
            assert old["tokens"] == row["tokens"], f"{old['prompt']}: plain greedy differs from the report"
            rows.append({"prompt": old["prompt"], "base": old["base"], "own": old["distilled"], "cross": row["cross"]})
        key = f"{draft_dir.name} on {run.name}"
        result[key] = {"cross": tau_ratio_interval(rows, "base", "cross"), "own": tau_ratio_interval(rows, "base", "own"),
                       "divergences": sum(not r["cross"]["identical"] for r in rows), "runs": rows}
        print(f"{key}: tau vs base {result[key]['cross']}; {run.name}'s own draft {result[key]['own']}; "
              f"divergences {result[key]['divergences']}/{len(rows)}", flush=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
