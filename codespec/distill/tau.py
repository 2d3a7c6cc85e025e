"""tau of greedy speculative decoding with a draft model, replayed from one draft forward per prompt.

With greedy verification the output is the target's plain greedy output T whatever the draft proposes, and
every draft starts from a prefix of T. As long as its tokens match T, the draft model sees exactly the
context a teacher-forced forward over prompt + T gives it; the first token that does not match is rejected
and whatever it drafts after that is rejected with it. So the draft's argmax and its probability after each
prefix of T (one forward) decide every step of `Engine` with `ModelDrafter`: how many tokens are
accepted, when the draft stops for low confidence, how its length adapts, how many target forwards the
generation takes. Once T is known (one plain greedy run of the target per prompt), tau for any draft and
any drafting configuration costs one draft forward per prompt instead of a speculative decode, which is
what makes measuring many held-out prompts, many drafts and many configurations possible on a CPU.
Not replayed: how many tokens are drafted after a rejected one (that needs the draft off T's path), so the
acceptance rate and the draft's cost are not known here, only accepted tokens and target forwards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from codespec.decode.drafters import DraftModelConfig


@dataclass(frozen=True)
class DraftPredictions:
    """The draft's greedy token and its probability after prompt + T[:i], for i = 0 .. len(T) - 1."""

    tokens: list[int]
    confidence: list[float]


@dataclass(frozen=True)
class Replayed:
    new_tokens: int  # as GenerationStats.new_tokens: T without its stop token
    target_forwards: int
    accepted: int  # drafted tokens the target accepted, up to T's stop token

    @property
    def tau(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0


@torch.inference_mode()
def draft_predictions(model, prompt_ids: Sequence[int], target_tokens: Sequence[int]) -> DraftPredictions:
    """One forward of the draft over prompt + T (T: the target's greedy output, with the stop token that
    ended it, if any)."""
    ids = [*prompt_ids, *target_tokens[:-1]]
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, len(prompt_ids) - 1:]
    confidence, tokens = torch.softmax(logits.float(), dim=-1).max(dim=-1)  # as Sampler.draft, greedy
    return DraftPredictions(tokens.tolist(), confidence.tolist())


def replay(predictions: DraftPredictions, target_tokens: Sequence[int], max_new_tokens: int,
           stop_ids: Sequence[int], config: DraftModelConfig | None = None, *,
           by_step: Sequence[DraftPredictions] = ()) -> Replayed:
    """`Engine.generate(drafting="model", temperature 0)` step by step, as `ModelDrafter` drafts.
    `by_step`: for a drafter whose prediction depends on how many tokens it has drafted since the target's last
    forward, the predictions of its draft tokens 0, 1, ... of every step (`predictions` for those after them)."""
    config = config or DraftModelConfig()
    stops = set(stop_ids)
    length = config.start_draft
    produced = forwards = accepted_total = 0
    while produced < max_new_tokens:
        limit = min(length, max_new_tokens - produced - 1)  # the target's own token takes the last slot
        accepted, all_accepted = 0, True
        for i in range(limit):
            at = produced + i
            if at >= len(target_tokens):  # past T's stop token: this step ends the generation anyway
                break
            prediction = by_step[i] if i < len(by_step) else predictions
            if i and prediction.confidence[at] < config.min_confidence:
                break
            if prediction.tokens[at] != target_tokens[at]:
                all_accepted = False
                break
            accepted += 1
        forwards += 1
        accepted_total += accepted
        if limit > 0:  # as ModelDrafter.feedback; a rejected draft had more tokens than were accepted
            length = config.next_length(length, accepted + (not all_accepted), accepted)
        step = target_tokens[produced : produced + accepted + 1]
        stop_at = next((i for i, token in enumerate(step) if token in stops), None)
        if stop_at is not None:  # the engine cuts the output at the first stop token
            return Replayed(produced + stop_at, forwards, accepted_total)
        produced += accepted + 1
    return Replayed(produced, forwards, accepted_total)


def target_path(result) -> list[int]:
    """T of a plain greedy `GenerationResult`: its tokens and the stop token that ended it, if one did."""
    return [*result.token_ids, *([result.stop_token] if result.stop_token is not None else [])]


def plain_paths(target, prompts: Sequence, max_new_tokens: int, *, known: dict[tuple, list[int]] | None = None,
                progress: bool = True) -> list[list[int]]:
    """T for every prompt (`.ids`): taken from `known` (prompt ids -> T) where it is there, else one plain
    greedy run of the target each, added to `known`."""
    from tqdm import tqdm

    from codespec.decode.engine import Engine

    known = {} if known is None else known
    engine = Engine(target, None, drafting="none", stop_token_ids=getattr(target, "stop_ids", None) or None)
    missing = [p for p in prompts if tuple(p.ids) not in known]
    for prompt in tqdm(missing, desc="plain greedy (replay)", unit="prompt", disable=not progress or not missing,
                       dynamic_ncols=True):
        known[tuple(prompt.ids)] = target_path(engine.generate(prompt.ids, max_new_tokens=max_new_tokens))
    return [known[tuple(p.ids)] for p in prompts]


def replay_eval(drafts: dict[str, object], prompts: Sequence, paths: Sequence[Sequence[int]], max_new_tokens: int,
                stop_ids: Sequence[int], *, config: DraftModelConfig | None = None, progress: bool = True) -> dict:
    """Per draft (LoadedModel-like or bare HF model): tau and target forwards of greedy speculative decoding
    on every prompt, replayed from T (`paths`); with two drafts, the ratio of the second's tau to the first's
    and its 95 % paired bootstrap interval (as `speculative_eval`)."""
    from tqdm import tqdm

    from codespec.distill.evaluate import tau_ratio_interval

    names = list(drafts)
    runs = [{"prompt": p.name, "tokens": None} for p in prompts]
    bar = tqdm(total=len(prompts) * len(names), desc="replay", unit="run", disable=not progress, dynamic_ncols=True)
    for name, draft in drafts.items():
        model = draft if isinstance(draft, torch.nn.Module) else draft.model
        for row, prompt, path in zip(runs, prompts, paths, strict=True):
            result = replay(draft_predictions(model, prompt.ids, path), path, max_new_tokens, stop_ids, config)
            row["tokens"] = result.new_tokens
            row[name] = {"tau": round(result.tau, 3), "tokens": result.new_tokens,
                         "target_forwards": result.target_forwards, "accepted": result.accepted}
            bar.update()
    bar.close()
    summary = {}
    for name in names:
        tokens = sum(r[name]["tokens"] for r in runs)
        forwards = sum(r[name]["target_forwards"] for r in runs)
        summary[name] = {"tau": round(tokens / forwards, 4) if forwards else None, "tokens": tokens,
                         "target_forwards": forwards, "accepted": sum(r[name]["accepted"] for r in runs)}
    result = {"prompts": len(prompts), "max_new_tokens": max_new_tokens,
              "config": {"max_draft": (config or DraftModelConfig()).max_draft,
                         "min_confidence": (config or DraftModelConfig()).min_confidence},
              "summary": summary, "runs": runs}
    if len(names) == 2:
        result["tau_ratio"] = tau_ratio_interval(runs, names[0], names[1])
    return result
