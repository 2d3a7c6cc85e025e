"""Another draft directory from a `codespec distill --method full` run, for comparing its weights:

    last   the last weights of the run (what it saves without --average-from), from DIR/work/checkpoint.pt
    w=F    base + F * (DIR's draft - base): F = 1 is DIR itself, F > 1 extrapolates the fine-tuning's change
    soup=DIR2,DIR3,...   the mean of the weights of DIR and the other full fine-tuning runs of the same draft

The new directory gets DIR's distill.json (for `codespec bench distill`) and its work/ labels and plain-output
cache linked (not copied), so that a bench there reuses them.

    python experiments/distill/weights_variant.py DIR last NEW
    python experiments/distill/weights_variant.py DIR w=1.5 NEW
    python experiments/distill/weights_variant.py DIR soup=runs/ce0 NEW
"""

import json
import sys
from pathlib import Path

import torch

from codespec.models import load_model


def main() -> None:
    run, variant, new = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    meta = json.loads((run / "distill.json").read_text())
    assert meta["method"] == "full", "only --method full keeps every trained weight in the checkpoint"
    draft = load_model(meta["draft"], dtype="fp32", progress=False)
    parameters = dict(draft.model.named_parameters())
    with torch.no_grad():
        if variant == "last":
            saved = torch.load(run / "work" / "checkpoint.pt", weights_only=False)
            for name, value in saved["weights"].items():
                parameters[name].copy_(value)
        elif variant.startswith("w="):
            factor = float(variant[2:])
            trained = load_model(str(run), dtype="fp32", progress=False).model.state_dict()
            for name, p in parameters.items():
                p.add_(trained[name].float() - p, alpha=factor)
        elif variant.startswith("soup="):
            runs = [run, *(Path(other) for other in variant[5:].split(","))]
            for p in parameters.values():
                p.zero_()
            for member in runs:
                weights = load_model(str(member), dtype="fp32", progress=False).model.state_dict()
                for name, p in parameters.items():
                    p.add_(weights[name].float() / len(runs))
        else:
            raise SystemExit(f"unknown variant {variant!r}: last, w=F or soup=DIR2,...")
    new.mkdir(parents=True, exist_ok=True)
    draft.model.save_pretrained(str(new), safe_serialization=True)
    draft.tokenizer.save_pretrained(str(new))
    (new / "distill.json").write_text(json.dumps({**meta, "variant": {"of": str(run), "weights": variant}}, indent=1))
    (new / "work").mkdir(exist_ok=True)
    for item in (run / "work").iterdir():
        if item.name != "checkpoint.pt" and not (new / "work" / item.name).exists():
            (new / "work" / item.name).symlink_to(item.resolve())


if __name__ == "__main__":
    main()
