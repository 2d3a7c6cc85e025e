"""Speculative sampling must reproduce the target's distribution exactly. On a 4-token vocabulary the
distribution of 3-token continuations (64 outcomes) is computed exactly and compared with samples."""

import itertools
from collections import Counter

import pytest
import torch

from codespec.decode.engine import Engine
from codespec.decode.sampling import Sampler
from codespec.tiny import tiny_model

VOCAB = 4
NEW = 3
SAMPLES = 2500


@pytest.fixture(scope="module")
def small_target():
    return tiny_model(10, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def small_draft():
    return tiny_model(11, vocab_size=VOCAB, layers=1)


@torch.inference_mode()
def exact_distribution(model, prompt, sampler) -> dict[tuple[int, ...], float]:
    dist = {}
    for seq in itertools.product(range(VOCAB), repeat=NEW):
        ids = list(prompt) + list(seq)
        probs = sampler.probs(model(input_ids=torch.tensor([ids])).logits[0])
        p = 1.0
        for i, token in enumerate(seq):
            p *= float(probs[len(prompt) - 1 + i, token])
        dist[seq] = p
    return dist


def chi_square(counts: Counter, dist: dict, n: int) -> tuple[float, int]:
    """Pearson's statistic with rare outcomes pooled (expected count < 5) and its degrees of freedom."""
    stat, df = 0.0, -1
    pooled_obs = pooled_exp = 0.0
    for seq, p in dist.items():
        expected = p * n
        if expected < 5:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += expected
            continue
        stat += (counts.get(seq, 0) - expected) ** 2 / expected
        df += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-9)
        df += 1
    return stat, df


def sample_counts(engine, prompt, temperature, top_p, drafting) -> Counter:
    counts = Counter()
    for seed in range(SAMPLES):
        result = engine.generate(prompt, max_new_tokens=NEW, temperature=temperature, top_p=top_p, seed=seed,
                                 drafting=drafting)
        counts[tuple(result.token_ids)] += 1
    return counts


def threshold(df: int) -> float:
    return df + 6 * (2 * df) ** 0.5  # about 6 standard deviations above the mean of chi-square(df)


@pytest.mark.parametrize(
    "drafting,temperature,top_p",
    [("model", 1.0, 1.0), ("lookup", 0.8, 1.0), ("both", 1.0, 0.9)],
)
def test_speculative_sampling_matches_target_distribution(small_target, small_draft, drafting, temperature, top_p):
    prompt = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]  # repetitive: lookup proposes point-mass drafts
    engine = Engine(small_target, small_draft, drafting="both", stop_token_ids=[])
    target_dist = exact_distribution(small_target, prompt, Sampler(temperature, top_p))
    assert abs(sum(target_dist.values()) - 1) < 1e-4
    counts = sample_counts(engine, prompt, temperature, top_p, drafting)
    stat, df = chi_square(counts, target_dist, SAMPLES)
    assert stat < threshold(df), (stat, df)


def test_the_check_can_fail_sampling_the_draft_is_rejected(small_target, small_draft):
    """The same statistic clearly rejects the draft's own distribution, so the test above has teeth."""
    prompt = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    draft_only = Engine(small_draft, stop_token_ids=[], drafting="none")
    target_dist = exact_distribution(small_target, prompt, Sampler(1.0, 1.0))
    counts = sample_counts(draft_only, prompt, 1.0, 1.0, "none")
    stat, df = chi_square(counts, target_dist, SAMPLES)
    assert stat > threshold(df)


def test_top_p_keeps_the_smallest_nucleus():
    sampler = Sampler(1.0, 0.7, seed=0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    out = sampler.probs(probs.log().unsqueeze(0))[0]
    torch.testing.assert_close(out, torch.tensor([0.625, 0.375, 0.0, 0.0]))


def test_sampling_is_deterministic_per_seed(small_target, small_draft):
    engine = Engine(small_target, small_draft, drafting="both", stop_token_ids=[])
    a = engine.generate([1, 2, 3], max_new_tokens=20, temperature=1.0, seed=42).token_ids
    b = engine.generate([1, 2, 3], max_new_tokens=20, temperature=1.0, seed=42).token_ids
    assert a == b
