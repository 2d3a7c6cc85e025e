"""The replayed tau of greedy drafting equals what the Engine measures, step for step, with tiny models."""

import copy

import pytest
import torch

from codespec.decode.drafters import DraftModelConfig
from codespec.decode.engine import Engine
from codespec.distill.tau import DraftPredictions, draft_predictions, replay
from codespec.models import load_model

torch.set_num_threads(1)

CONFIGS = [DraftModelConfig(), DraftModelConfig(max_draft=3, min_confidence=0.0),
           DraftModelConfig(max_draft=12, start_draft=1, min_confidence=0.05)]


def _perturbed(target, scale: float, seed: int):
    """A draft that agrees with the target often but not always: the target with seeded noise on its weights."""
    draft = copy.deepcopy(target)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in draft.model.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * scale * weight.std())
    return draft


@pytest.mark.parametrize("scale", [0.02, 0.1])
def test_replay_counts_the_target_forwards_and_accepted_tokens_the_engine_does(scale):
    target = load_model("tiny:0")
    draft = _perturbed(target, scale, seed=1)
    stops = [0]
    prompts = [target.tokenizer.encode(text) for text in ("def add(a, b):\n    return", "class Stack:\n    def pu",
                                                           "for i in range(10):\n", "x = [1, 2, 3]\ny =")]
    checked = set()
    for config in CONFIGS:
        engine = Engine(target, draft, drafting="model", draft_config=config, stop_token_ids=stops)
        for prompt in prompts:
            plain = engine.generate(prompt, max_new_tokens=40, drafting="none")
            assert plain.finish_reason == "max_tokens"
            spec = engine.generate(prompt, max_new_tokens=40, drafting="model")
            assert spec.token_ids == plain.token_ids
            replayed = replay(draft_predictions(draft.model, prompt, plain.token_ids), plain.token_ids, 40, stops,
                              config)
            assert (replayed.new_tokens, replayed.target_forwards, replayed.accepted) == \
                (spec.stats.new_tokens, spec.stats.target_forwards, spec.stats.accepted)
            checked.add((spec.stats.target_forwards, spec.stats.accepted))
    assert len(checked) >= 4  # drafts of many lengths were accepted and rejected, not one trivial case


def test_replay_ends_where_the_engine_stops_at_a_stop_token():
    target = load_model("tiny:0")
    draft = _perturbed(target, 0.05, seed=2)
    prompt = target.tokenizer.encode("def add(a, b):\n    return")
    output = Engine(target, None, drafting="none", stop_token_ids=[0]).generate(prompt, max_new_tokens=40).token_ids
    cuts = [i for i, token in enumerate(output) if token not in output[:i]]  # first occurrences
    assert len(cuts) >= 3 and cuts[-1] > 5
    for cut in cuts:  # declare the token at `cut` a stop token: generation ends there
        stops = [output[cut]]
        engine = Engine(target, draft, drafting="model", stop_token_ids=stops)
        spec = engine.generate(prompt, max_new_tokens=40, drafting="model")
        assert spec.finish_reason == "eos" and spec.token_ids == output[:cut]
        ended = output[: cut + 1]  # T with the stop token that ended it
        replayed = replay(draft_predictions(draft.model, prompt, ended), ended, 40, stops)
        assert (replayed.new_tokens, replayed.target_forwards) == (spec.stats.new_tokens, spec.stats.target_forwards)


def test_replay_by_hand():
    """T = a b c d e f (no stop), 6 new tokens: drafts of 4 (start), a mismatch at the 3rd token, then 3 left."""
    target = [1, 2, 3, 4, 5, 6]
    predictions = DraftPredictions(tokens=[1, 2, 9, 4, 5, 6], confidence=[1.0] * 6)
    # step 1: limit min(4, 5) drafts 1 2 9 -> 2 accepted + the target's 3; length 3
    # step 2: limit min(3, 2) drafts 4 5 -> both accepted + 6; done in 2 forwards
    assert replay(predictions, target, 6, [0]) == replay(predictions, target, 6, []) and \
        (replay(predictions, target, 6, []).target_forwards, replay(predictions, target, 6, []).accepted) == (2, 4)
    # a confidence below the threshold after the first token stops the draft there (the first is always drafted)
    shy = DraftPredictions(tokens=[1, 2, 3, 4, 5, 6], confidence=[0.1, 0.1, 1.0, 1.0, 1.0, 1.0])
    assert replay(shy, target, 6, [], DraftModelConfig(min_confidence=0.3)).accepted == 4  # 1 | 3 4 5 (+2, +6)


def test_replay_by_draft_step():
    """A drafter whose prediction depends on its draft step: `by_step` gives draft tokens 0, 1, ... of each step."""
    target = [1, 2, 3, 4, 5, 6]
    later = DraftPredictions(tokens=[9] * 6, confidence=[1.0] * 6)  # wrong wherever it is asked
    first = DraftPredictions(tokens=target, confidence=[1.0] * 6)  # right as every step's first draft token
    # Each step: its first draft token accepted, the second (from `later`) rejected, + the target's token:
    # 2 tokens per forward, 3 forwards for 6 tokens.
    result = replay(later, target, 6, [], by_step=[first])
    assert (result.target_forwards, result.accepted) == (3, 3)
    # With every step's drafts right, the by-step replay is the plain one.
    assert replay(later, target, 6, [], by_step=[first] * 8) == replay(first, target, 6, [])
