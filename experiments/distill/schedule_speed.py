"""Decode time of speculative decoding under several draft-length schedules, side by side in one run.

On the first N prompts of a bench's plain outputs (DIR/work/plain-outputs.json: [prompt ids, T] rows), each
draft under each schedule (START:MAX:CONF = start_draft:max_draft:min_confidence) and plain greedy, one after
the other for every prompt (so that a slower or busier stretch of the machine weighs on all alike), with the
real `Engine`: decode seconds, target forwards, drafted and accepted tokens; every output is checked equal to
T. What replay cannot tell: what the drafted tokens that were rejected cost.

    python experiments/distill/schedule_speed.py --plain RUN/work/plain-outputs.json --prompts 12 \\
        --config 4:8:0.3 --config 16:16:0.3 --out experiments/distill/schedule-speed.json \\
        bundled:qwen2.5-coder-0.5b runs/swa-last
"""

import argparse
import json
import time
from pathlib import Path

import torch
from replay_screen import schedule  # this folder: run as `python experiments/distill/schedule_speed.py`

from codespec.decode.engine import Engine
from codespec.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plain", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--config", action="append", required=True, metavar="START:MAX:CONF")
    parser.add_argument("--target", default="bundled:qwen2.5-coder-1.5b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("drafts", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    saved = json.loads(args.plain.read_text())
    rows, max_new, stops = saved["rows"][: args.prompts], saved["key"]["max_new_tokens"], saved["key"]["stop_ids"]
    target = load_model(args.target, dtype="fp32", progress=False)
    engines = {"plain": Engine(target, None, drafting="none", stop_token_ids=stops)}
    for spec in args.drafts:
        draft = load_model(spec, dtype="fp32", progress=False)
        for text in args.config:
            engines[f"{spec} {text}"] = Engine(target, draft, drafting="model", draft_config=schedule(text),
                                               stop_token_ids=stops)
    totals = {name: {"decode_s": 0.0, "target_forwards": 0, "drafted": 0, "accepted": 0, "new_tokens": 0,
                     "divergences": 0} for name in engines}
    for j, (prompt, path) in enumerate(rows):
        for name, engine in engines.items():
            engine.reset_cache()  # each run prefills alone: no prompt cache from the run before
            started = time.perf_counter()
            result = engine.generate(prompt, max_new_tokens=max_new, drafting=engine.drafting)
            elapsed = time.perf_counter() - started
            stats = result.stats
            total = totals[name]
            total["decode_s"] += stats.decode_s
            total["target_forwards"] += stats.target_forwards
            total["drafted"] += stats.drafted
            total["accepted"] += stats.accepted
            total["new_tokens"] += stats.new_tokens
            expected = path[:-1] if path and path[-1] in stops else path  # T without its stop token
            total["divergences"] += int(list(result.token_ids) != list(expected))
            print(f"{j} {name}: {elapsed:.1f} s, {stats.target_forwards} forwards", flush=True)
    plain_s = totals["plain"]["decode_s"]
    for name, total in totals.items():
        total["tau"] = round(total["new_tokens"] / total["target_forwards"], 4)
        total["vs_plain"] = round(plain_s / total["decode_s"], 4)
        total["decode_s"] = round(total["decode_s"], 2)
        print(name, json.dumps(total), flush=True)
    args.out.write_text(json.dumps({"plain": str(args.plain), "prompts": len(rows), "max_new_tokens": max_new,
                                    "threads": args.threads, "runs": totals}, indent=1))


if __name__ == "__main__":
    main()
