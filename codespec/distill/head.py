"""Training of an EAGLE draft head on the target's features, and its held-out agreement with the target.

Training and held-out agreement of an EAGLE head (`--method eagle`, codespec/eagle.py) on the target's
features: at every position j of an example the head reads (feature j, token j+1) and must predict feature
j+1, both the vector (smooth L1, the regression EAGLE trains) and what the target's LM head makes of it
(cross-entropy on the target's argmax at j+1, the token greedy verification accepts). A second pass feeds
the head its own predicted features, as drafting does from its second token on, and is trained the same way."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from codespec.distill.data import Example
from codespec.distill.teacher import FeatureLabels

# EAGLE's uniform noise on the input features (its paper: U(-0.1, 0.1)): the head must cope with features
# that are not exactly the target's, since from the second draft token on they are its own predictions.
FEATURE_NOISE = 0.2


def head_loss(head, example: Example, label: FeatureLabels, ce_weight: float, *, noise: bool = True,
              unrolled: bool = True) -> torch.Tensor:
    """Per-position loss of one example (pairs j = 0 .. len-2, then j = 1 .. len-2 unrolled)."""
    device = next(head.parameters()).device
    features = label.features.to(device).float()[None]
    ids = torch.tensor([example.ids], device=device)
    argmax = label.argmax.to(device).long()
    inputs = features[:, :-1]
    if noise:
        inputs = inputs + (torch.rand_like(inputs) - 0.5) * FEATURE_NOISE
    predicted = head(inputs, ids[:, 1:])
    losses = [_step_loss(head, predicted, features[:, 1:], argmax[1:], ce_weight)]
    if unrolled and len(example.ids) > 2:
        # Feature j+1 as the head predicted it, with token j+2: the head's second draft step.
        again = head(predicted[:, :-1], ids[:, 2:])
        losses.append(_step_loss(head, again, features[:, 2:], argmax[2:], ce_weight))
    return torch.cat(losses)


def head_positions(length: int) -> int:
    """How many per-position losses `head_loss` returns for an example of `length` tokens."""
    return 2 * length - 3 if length > 2 else max(length - 1, 0)


def _step_loss(head, predicted: torch.Tensor, features: torch.Tensor, argmax: torch.Tensor,
               ce_weight: float) -> torch.Tensor:
    regression = F.smooth_l1_loss(predicted[0].float(), features[0], reduction="none").mean(-1)
    # Over the draft vocabulary: the target's choices outside it cannot be drafted, and weigh nothing.
    ce = F.cross_entropy(head.vocab_logits(predicted[0]).float(), head.vocab_index(argmax), reduction="none")
    return regression + ce_weight * ce


@torch.inference_mode()
def head_agreement(head, examples: Sequence[Example], labels: Sequence[FeatureLabels], *,
                   autocast: str | None = None) -> dict:
    """Teacher-forced agreement with the target's argmax at each example's trained positions (the middle of
    a FIM example; as `evaluate.agreement` counts them for a draft model): from the target's own feature
    (a first draft token) and from the head's own predicted feature (a second one)."""
    from codespec.distill.train import compute_context

    device = next(head.parameters()).device
    first = second = positions = 0
    for example, label in zip(examples, labels, strict=True):
        ids = torch.tensor([example.ids], device=device)
        features = label.features.to(device)[None]
        argmax = label.argmax.to(device).long()
        with compute_context(head, autocast):
            predicted = head(features[:, :-1], ids[:, 1:])
            again = head(predicted[:, :-1], ids[:, 2:])
            hits1 = head.logits(predicted[0]).argmax(-1) == argmax[1:]
            hits2 = head.logits(again[0]).argmax(-1) == argmax[2:]
        # Trained position p (>= train_from - 1) predicts token p+1: pair j = p-1 of the first pass and
        # j = p-2 of the second.
        start = max(example.train_from - 1, 2)
        first += int(hits1[start - 1 :].sum())
        second += int(hits2[start - 2 :].sum())
        positions += len(example.ids) - start
    return {"agreement": first / positions if positions else 0.0,
            "agreement_own_feature": second / positions if positions else 0.0, "positions": positions}


@torch.inference_mode()
def draft_agreement(model, examples: Sequence[Example], labels: Sequence[FeatureLabels]) -> dict:
    """The same count for a draft model (the base draft an EAGLE head is compared with)."""
    from codespec.distill.train import draft_logits

    agree = positions = 0
    for example, label in zip(examples, labels, strict=True):
        start = max(example.train_from - 1, 2)
        logits = draft_logits(model, example)  # positions train_from-1 .. len-1
        hits = logits.argmax(-1).cpu() == label.argmax.long()[example.train_from - 1 :]
        agree += int(hits[start - (example.train_from - 1) :].sum())
        positions += len(example.ids) - start
    return {"agreement": agree / positions if positions else 0.0, "positions": positions}
