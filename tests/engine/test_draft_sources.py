"""Drafts from every source (prompt lookup, labelled streams such as a predicted line) equal plain greedy, are
counted per source, and the engine stops drafting where no draft can pay (and still measures now and then)."""

import pytest

from codespec.decode.api import TokenStream
from codespec.decode.drafters import CostAwareLength
from codespec.decode.engine import EXPLORE_EVERY, Engine
from tests.engine.conftest import reference_greedy


def test_a_labelled_stream_drafts_the_plain_output_and_is_counted_by_source(target):
    prompt = list(b"def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    expected = reference_greedy(target.model, prompt, 24, set())
    engine = Engine(target, None, drafting="lookup", stop_token_ids=[])
    # A stream that predicts the plain output exactly after the prompt's tail, as a repeat-line stream does.
    sure = TokenStream(prompt[-12:] + expected, "repeat-line")
    wrong = TokenStream(prompt[-12:] + [(t + 1) % 256 for t in expected], "realigned")
    for streams, source in (([sure], "repeat-line"), ([wrong], "realigned")):
        result = engine.generate(prompt, max_new_tokens=24, extra_streams=streams)
        assert result.token_ids == expected
        assert result.stats.forwards_by.get(source, 0) > 0
        assert set(result.stats.drafted_by) >= {source}
    sure_run = engine.generate(prompt, max_new_tokens=24, extra_streams=[sure])
    assert sure_run.stats.tokens_per_forward_by()["repeat-line"] > 4  # a sure draft is accepted in long runs
    assert sure_run.stats.accepted_by["repeat-line"] >= 20


def test_drafting_is_off_where_no_draft_can_pay_and_output_is_unchanged(target):
    prompt = list(b"x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\n")
    expected = reference_greedy(target.model, prompt, 20, set())
    engine = Engine(target, None, drafting="lookup", stop_token_ids=[])
    # A verify over k + 1 tokens costs k + 1 single steps: no draft can ever pay.
    engine.draft_length = CostAwareLength(lambda k: float(k))
    assert not engine.draft_length.may_pay(20)
    runs = [engine.generate(prompt, max_new_tokens=20) for _ in range(2 * EXPLORE_EVERY)]
    assert all(run.token_ids == expected for run in runs)
    assert sum(run.stats.drafting_off for run in runs) == 2 * (EXPLORE_EVERY - 1)
    assert all(run.stats.drafted == 0 for run in runs)  # exploring calls score drafts without verifying them


def test_drafting_stays_on_where_a_draft_pays(target):
    engine = Engine(target, None, drafting="lookup", stop_token_ids=[])
    engine.draft_length = CostAwareLength(lambda k: 1.0)  # verifying more tokens is free
    assert engine.draft_length.may_pay(20)
    prompt = list(b"x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\n")
    result = engine.generate(prompt, max_new_tokens=20)
    assert not result.stats.drafting_off and result.token_ids == reference_greedy(target.model, prompt, 20, set())


def test_each_decode_forward_is_timed_by_the_tokens_it_verified(target):
    # The forwards as they ran, by size: their count is the target forwards, their tokens the forwards plus
    # the draft tokens verified (what the server sets beside the cost curve).
    engine = Engine(target, None, drafting="lookup", stop_token_ids=[])
    prompt = list(b"x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\n")
    stats = engine.generate(prompt, max_new_tokens=20).stats
    timed = stats.forward_s_by_tokens
    assert stats.drafted > 0 and any(k > 1 for k in timed)
    assert sum(n for n, _ in timed.values()) == stats.target_forwards
    assert sum(k * n for k, (n, _) in timed.items()) == stats.target_forwards + stats.drafted
    assert all(seconds > 0 for _, seconds in timed.values())


def curve(k: int) -> float:  # seconds, as a runtime's curve: a step 30 ms, 4 tokens 60 ms, 8 tokens 120 ms
    return {1: 0.030, 2: 0.045, 3: 0.055, 4: 0.060}.get(k, 0.015 * k)


def test_verifies_that_cost_more_in_the_server_than_on_the_curve_shorten_drafts():
    idle = CostAwareLength(curve, prior=0.6)
    adapting = CostAwareLength(curve, prior=0.6, in_situ=True)
    assert adapting.length("lookup", 7) == idle.length("lookup", 7) > 0
    for policy in (idle, adapting):
        for _ in range(40):  # steps as the curve says; verifies at twice its cost
            policy.timed(1, 0.030)
            policy.timed(4, 0.120)
    assert idle.cost(4) == curve(4) and idle.length("lookup", 7) > 0  # without in_situ nothing changes
    assert adapting.scale(False) == pytest.approx(1.0) and adapting.scale(True) > 1.8
    assert adapting.cost(4) == pytest.approx(curve(4) * adapting.scale(True))
    assert adapting.length("lookup", 7) == 0 and not adapting.may_pay(7)
    for _ in range(200):  # the server's verifies come back to the curve: drafting returns
        adapting.timed(4, 0.060)
    assert adapting.length("lookup", 7) == idle.length("lookup", 7) > 0
    assert adapting.to_dict()["cost x verify"] == pytest.approx(1.0, abs=0.1)
