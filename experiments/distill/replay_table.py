"""Table and figure of a replay_tau.py output: tau and its change per drafting configuration and draft.

    python experiments/distill/replay_table.py experiments/distill/replay-asyncio.json experiments/distill/replay-asyncio.png [SKIP ...]

SKIP: drafts left out of the figure (in the table still), e.g. the target as its own draft, far above the rest.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    source, figure = Path(sys.argv[1]), Path(sys.argv[2])
    result = json.loads(source.read_text())
    drafts = result["drafts"]
    names = list(drafts)
    print("| max_draft : min_confidence | tau, base | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for config in result["configs"]:
        cells = []
        for name in names:
            entry = drafts[name][config]
            low, high = entry["ratio"]["ci95"]
            cells.append(f"{entry['tau']:.3f}, {entry['ratio']['ratio'] - 1:+.1%} ({low - 1:+.1%} .. {high - 1:+.1%})")
        print(f"| {config} | {drafts[names[0]][config]['tau_base']:.3f} | " + " | ".join(cells) + " |")
    plotted = [name for name in names if name not in sys.argv[3:]]
    confidences = sorted({float(c.split(":")[1]) for c in result["configs"]})
    fig, axes = plt.subplots(1, len(plotted), figsize=(4.2 * len(plotted), 4), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], plotted, strict=True):
        for confidence in confidences:
            configs = sorted((int(c.split(":")[0]), c) for c in result["configs"] if float(c.split(":")[1]) == confidence)
            ax.plot([m for m, _ in configs], [(drafts[name][c]["ratio"]["ratio"] - 1) * 100 for _, c in configs],
                    marker="o", label=f"min_confidence {confidence:g}")
        ax.axhline(20, color="black", linewidth=0.8, linestyle="--")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("max_draft")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"tau change vs base draft (%), {result['prompts']} held-out prompts")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figure, dpi=110)


if __name__ == "__main__":
    main()
