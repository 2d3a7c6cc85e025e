"""Print the tables of experiments/cheap-verify/log.md from the raw files beside this script (no model runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
FORMATS = sys.argv[1:] or ["bundled", "q4_0", "q4_0-q8out", "iq4_nl"]


def curves(name: str) -> None:
    path = HERE / name
    if not path.exists():
        return
    data = json.loads(path.read_text())["median_ms"]
    names = list(data)
    print(f"\n{name}: median ms over the rounds (ratio to k=1)\n")
    print("| k | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in data[names[0]]:
        print(f"| {k} | " + " | ".join(f"{data[n][k]:.1f} ({data[n][k] / data[n]['1']:.2f}x)" for n in names) + " |")


def quality() -> None:
    print("\n| format | HumanEval single pass@1 (post / raw) | multi pass@1 (post / raw) | n per kind "
          "| HumanEval first-line exact single / multi | real-code first-line exact (n) |")
    print("|---|---|---|---|---|---|")
    for fmt in FORMATS:
        cells = [fmt]
        rows_path = HERE / f"humaneval-{fmt}.jsonl"
        rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
        by_kind = {kind: [r for r in rows if r["kind"] == kind] for kind in ("single", "multi")}
        for kind in ("single", "multi"):
            subset = by_kind[kind]
            cells.append(f"{sum(r['pass_post'] for r in subset) / len(subset):.3f} / "
                         f"{sum(r['pass_raw'] for r in subset) / len(subset):.3f}" if subset else "-")
        cells.append("/".join(str(len(by_kind[k])) for k in ("single", "multi")))
        cells.append(" / ".join(f"{sum(r['exact_post'] for r in s) / len(s):.3f}" if s else "-"
                                for s in by_kind.values()))
        first = HERE / f"firstline-{fmt}.json"
        if first.exists():
            entry = json.loads(first.read_text())["first_line"]["anchored"]
            cells.append(f"{entry['match'] / entry['n']:.3f} ({entry['match']}/{entry['n']})")
        else:
            cells.append("-")
        print("| " + " | ".join(cells) + " |")


def speed() -> None:
    print("\n| format | plain tok/s (decode) | lookup tok/s (decode) | lookup / plain (decode) | lookup / plain "
          "(end to end) | tau | acceptance | drafting off | divergences |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fmt in FORMATS:
        found = sorted((HERE / f"generate-{fmt}").glob("bench-generate-*.json"))
        if not found:
            continue
        summary = json.loads(found[-1].read_text())["summary"]
        for kind, per_mode in summary.items():
            plain, lookup = per_mode.get("plain", {}), per_mode.get("lookup", {})
            print(f"| {fmt} ({kind}) | {plain.get('decode_tokens_per_s')} | {lookup.get('decode_tokens_per_s')} | "
                  f"{lookup.get('decode_speedup_vs_plain')} | {lookup.get('speedup_vs_plain')} | {lookup.get('tau')} | "
                  f"{lookup.get('acceptance_rate')} | {lookup.get('drafting_off')}/{lookup.get('prompts')} | "
                  f"{lookup.get('divergences')} |")


if __name__ == "__main__":
    curves("cost_curves.json")
    for name in ("ik_cost_curves.json", "sandwich-mainline-1.json", "sandwich-ik.json", "sandwich-mainline-2.json"):
        curves(name)
    quality()
    speed()
