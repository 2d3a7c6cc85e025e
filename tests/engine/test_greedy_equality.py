"""Speculative greedy decoding must produce exactly the tokens of plain greedy, for every drafter."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codespec.decode.drafters import DraftModelConfig
from codespec.decode.engine import Engine
from codespec.modes import DRAFTING_MODES
from tests.engine.conftest import Bundle, reference_greedy

MODES = list(DRAFTING_MODES)
# Prompts built from a few repeated chunks: the drafters then find long matches (long accepts).
chunk = st.lists(st.integers(min_value=0, max_value=255), min_size=1, max_size=12)
repetitive_prompt = st.lists(chunk, min_size=1, max_size=6).flatmap(
    lambda chunks: st.lists(st.sampled_from(chunks), min_size=1, max_size=10).map(
        lambda seq: [t for c in seq for t in c]
    )
)


@pytest.fixture(scope="module")
def engines(target, draft):
    return {mode: Engine(target, draft, drafting=mode, stop_token_ids=[]) for mode in MODES}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=repetitive_prompt, max_new=st.integers(min_value=1, max_value=40))
def test_every_drafter_matches_plain_greedy(engines, target, prompt, max_new):
    expected = reference_greedy(target.model, prompt, max_new, set())
    for mode, engine in engines.items():
        result = engine.generate(prompt, max_new_tokens=max_new)
        assert result.token_ids == expected, mode
        assert result.finish_reason == "max_tokens"
        assert result.stats.new_tokens == max_new


def test_target_as_its_own_draft_accepts_everything(target):
    engine = Engine(target, Bundle(target.model, target.tokenizer), drafting="model", stop_token_ids=[],
                    draft_config=DraftModelConfig(min_confidence=0.0))
    prompt = list(b"def add(a, b):\n    return a + b\n")
    result = engine.generate(prompt, max_new_tokens=30)
    assert result.token_ids == reference_greedy(target.model, prompt, 30, set())
    assert result.stats.drafted > 0
    assert result.stats.accepted == result.stats.drafted
    assert result.stats.tokens_per_forward > 3


def test_eos_inside_a_draft_stops_exactly_where_greedy_stops(target):
    prompt = list(b"x = [1, 2, 3]\ny = [1, 2, 3]\n")
    free = reference_greedy(target.model, prompt, 40, set())
    # Choose a stop token that greedy emits mid-way, so it can sit inside an accepted draft.
    stop = free[len(free) // 2]
    expected = reference_greedy(target.model, prompt, 40, {stop})
    assert len(expected) < 40
    for mode in MODES:
        engine = Engine(target, Bundle(target.model, target.tokenizer), drafting=mode, stop_token_ids=[stop])
        result = engine.generate(prompt, max_new_tokens=40)
        assert result.token_ids == expected, mode
        assert result.finish_reason == "eos"


def test_earlier_completion_as_extra_stream_gives_long_accepts(target):
    prompt = list(b"def area(r):\n    return 3.14 * r * r\n\ndef")
    earlier = reference_greedy(target.model, prompt, 80, set())
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    cold = engine.generate(prompt, max_new_tokens=80)
    engine.reset_cache()
    warm = engine.generate(prompt, max_new_tokens=80, extra_streams=[prompt + earlier])
    assert cold.token_ids == warm.token_ids == earlier
    # The earlier completion is re-proposed and accepted in long runs.
    assert warm.stats.tokens_per_forward > 4
    assert warm.stats.target_forwards < cold.stats.target_forwards / 3


def test_empty_drafts_and_single_token_budget(target):
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    prompt = [7]  # nothing to look up in a one-token prompt
    assert engine.generate(prompt, max_new_tokens=1).token_ids == reference_greedy(target.model, prompt, 1, set())
    result = engine.generate(prompt, max_new_tokens=5)
    assert result.token_ids == reference_greedy(target.model, prompt, 5, set())


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_draft_ends_at_a_token_that_ends_the_generation(target, draft, temperature):
    from codespec.decode.drafters import ModelDrafter
    from codespec.decode.sampling import Sampler

    prompt = list(b"for i in range(10):\n    print(i)\n")
    config = DraftModelConfig(min_confidence=0.0, start_draft=8)
    free = ModelDrafter(draft.model, config).propose(prompt, 8, Sampler(temperature, 1.0, 0))
    assert len(free.tokens) == 8
    stop = free.tokens[2]
    stopping = ModelDrafter(draft.model, config, stop_ids={stop})
    cut = stopping.propose(prompt, 8, Sampler(temperature, 1.0, 0))
    # Whatever follows a stop token is discarded whether the target accepts it or not: never drafted.
    assert cut.tokens == free.tokens[: free.tokens.index(stop) + 1]
    if temperature:
        assert cut.probs is not None and len(cut.probs) == len(cut.tokens)


def test_the_engine_gives_its_stop_tokens_to_the_draft(target, draft):
    prompt = list(b"x = [1, 2, 3]\ny = [1, 2, 3]\n")
    free = reference_greedy(target.model, prompt, 40, set())
    stop = free[len(free) // 2]
    engine = Engine(target, Bundle(target.model, target.tokenizer), drafting="model", stop_token_ids=[stop],
                    draft_config=DraftModelConfig(min_confidence=0.0, start_draft=8, max_draft=16))
    assert engine.model_drafter.stop_ids == {stop}
    result = engine.generate(prompt, max_new_tokens=40)
    assert result.token_ids == reference_greedy(target.model, prompt, 40, {stop})
    # The target as its own draft: every drafted token is accepted and none lies past the stop token.
    assert result.stats.drafted == result.stats.accepted <= len(result.token_ids) + 1
