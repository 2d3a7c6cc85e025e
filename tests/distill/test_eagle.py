"""`codespec distill --method eagle` and decoding with an EAGLE head, with tiny random models: the head
learns to agree with the target, is saved and loaded like a draft, and never changes the output."""

import json
import textwrap

import pytest
import torch

from codespec.cli import main
from codespec.decode.eagle import EagleDrafter, EagleHead, load_head
from codespec.decode.engine import Engine, drafter_from
from codespec.decode.runtimes.kv import FeatureBuffer
from codespec.decode.sampling import Sampler
from codespec.distill import data
from codespec.distill.head import head_agreement, head_loss, head_positions
from codespec.distill.teacher import feature_example, feature_examples, features_key, saved_labels
from codespec.errors import CodespecError
from codespec.models import load_model, stop_token_ids
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.distill.test_distill import MODULE, distill
from tests.engine.conftest import reference_greedy

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle") / "repo"
    (root / "pkg").mkdir(parents=True)
    for i in range(5):
        (root / "pkg" / f"mod{i}.py").write_text(textwrap.dedent(MODULE).replace("Stack", f"Stack{i}"))
    return root


@pytest.fixture(scope="module")
def trained(repo, tmp_path_factory):
    """One trained head for the module's tests (training is the slow part)."""
    out = tmp_path_factory.mktemp("eagle") / "head"
    assert distill(repo, out, "--method", "eagle", "--max-steps", "60", "--checkpoint-every", "20") == 0
    return out


def test_eagle_training_lowers_the_loss_and_raises_held_out_agreement(trained):
    report = json.loads((trained / "distill.json").read_text())
    assert report["method"] == "eagle" and report["train"]["steps"] == 60
    losses = report["train"]["losses"]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    agreement = report["agreement"]
    assert agreement["after"]["agreement"] > agreement["before"]["agreement"] + 0.1
    assert agreement["after"]["positions"] == agreement["base_draft"]["positions"] > 0  # the same positions
    assert report["caches"]["labels"] == features_key("tiny:0 fp32")
    assert sorted(p.name for p in trained.iterdir()) >= ["distill.json", "eagle.json", "eagle.safetensors"]
    assert not (trained / "model.safetensors").exists()  # the head only: the target's embedding is not copied


def test_a_trained_head_drafts_tokens_the_target_accepts_and_greedy_output_is_unchanged(trained, tmp_path, capsys):
    target = load_model("tiny:0")
    head = load_model(str(trained))  # what --draft-model DIR loads
    assert isinstance(head.model, EagleHead)
    engine = Engine(target, head, drafting="model")
    stops = set(stop_token_ids(target.tokenizer))
    accepted = 0
    for text in ("def push(self, item):\n", "    def pop(self):\n        if not", "class Stack9:\n"):
        prompt = tiny_tokenizer().encode(text)
        expected = reference_greedy(target.model, prompt, 24, stops)
        for drafting in ("model", "both"):
            result = engine.generate(prompt, max_new_tokens=24, drafting=drafting)
            assert result.token_ids == expected
        assert len(engine.runtime.features) == len(engine.runtime.cached)  # one feature per cached target position
        accepted += result.stats.accepted_by.get("eagle", 0)
    assert accepted > 0

    prompt_file = tmp_path / "prompt.py"
    prompt_file.write_text("def push(self, item):\n")
    assert main(["generate", "--prompt-file", str(prompt_file), "--model", "tiny:0", "--draft-model", str(trained),
                 "--drafting", "model", "--max-tokens", "24", "--json"]) == 0
    expected = reference_greedy(target.model, tiny_tokenizer().encode("def push(self, item):\n"), 24, stops)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["token_ids"] == expected


def test_features_missing_from_a_reused_cache_are_computed_again():
    target = tiny_model(0)
    head = EagleHead.for_target(target, seed=3)
    engine = Engine(target, None, drafting="none", stop_token_ids=[])
    prompt = list(range(10, 40))
    plain = engine.generate(prompt, max_new_tokens=12).token_ids  # cached without features
    assert len(engine.runtime.features) == 0
    drafter = drafter_from(head)
    result = engine.generate(prompt + plain[:4], max_new_tokens=8, drafting="model", drafter=drafter)
    assert result.token_ids == plain[4:12] and result.stats.drafted > 0
    assert result.stats.reused_tokens == 0 and len(engine.runtime.features) == len(engine.runtime.cached)
    again = engine.generate(prompt + plain[:6], max_new_tokens=6, drafting="model", drafter=drafter)
    assert again.token_ids == plain[6:12] and again.stats.reused_tokens > 0  # now the features are there


def test_the_engine_keeps_the_targets_last_hidden_states_as_features():
    target = tiny_model(0)
    engine = Engine(target, EagleHead.for_target(target), drafting="model", stop_token_ids=[])
    prompt = list(range(5, 25))
    result = engine.generate(prompt, max_new_tokens=10)
    ids = prompt + result.token_ids
    with torch.inference_mode():
        reference = target.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    cached = len(engine.runtime.cached)
    assert cached == len(ids) - 1
    assert torch.allclose(engine.runtime.features.rows(0, cached), reference[:cached], atol=1e-4)


def test_sampling_with_a_head_is_seeded_and_its_drafts_carry_distributions():
    target = tiny_model(0)
    engine = Engine(target, EagleHead.for_target(target), drafting="model", stop_token_ids=[])
    prompt = list(range(5, 25))
    first = engine.generate(prompt, max_new_tokens=16, temperature=0.8, seed=7)
    second = engine.generate(prompt, max_new_tokens=16, temperature=0.8, seed=7)
    assert first.token_ids == second.token_ids and len(first.token_ids) == 16
    proposer = engine.model_drafter
    assert isinstance(proposer, EagleDrafter)
    draft = proposer.propose(prompt + first.token_ids[:1], 3, Sampler(0.8, 1.0, 1))
    assert draft is not None and draft.probs is not None and draft.probs.shape[0] == len(draft.tokens)


def test_head_loss_covers_both_passes_and_falls_to_the_target_for_its_own_features(repo):
    target = tiny_model(0)
    example = data.build_examples(data.collect_files(repo), tiny_tokenizer(), data.ExampleConfig(seq_len=64),
                                  seed=0)[0]
    label = feature_example(target, example)
    assert label.features.shape == (len(example.ids), target.config.hidden_size)
    head = EagleHead.for_target(target)
    loss = head_loss(head, example, label, ce_weight=0.1)
    assert loss.shape == (head_positions(len(example.ids)),) and bool(torch.isfinite(loss).all())
    agreement = head_agreement(head, [example], [label])
    assert 0.0 <= agreement["agreement"] <= 1.0 and agreement["positions"] == len(example.ids) - max(
        example.train_from - 1, 2)


def test_features_are_cached_per_example(repo, tmp_path):
    examples = data.build_examples(data.collect_files(repo), tiny_tokenizer(), data.ExampleConfig(seq_len=64), seed=0)
    path = tmp_path / "features.pt"
    first = feature_examples(tiny_model(0), examples[:3], path, model_name="tiny:0 fp32", progress=False)
    again = feature_examples(tiny_model(1), examples[:3], path, model_name="tiny:0 fp32", progress=False)
    assert all(torch.equal(a.features, b.features) for a, b in zip(first, again, strict=True))  # read, not recomputed
    assert saved_labels(path, examples[:3], features_key("tiny:0 fp32")) is not None
    assert saved_labels(path, examples[:3], features_key("tiny:1 fp32")) is None


def test_a_head_loads_only_with_a_target_of_its_shape(trained):
    head = load_head(trained, torch.device("cpu"), torch.float32)
    with pytest.raises(CodespecError, match="another target"):
        head.attach(tiny_model(0, hidden=32))
    with pytest.raises(CodespecError, match="attach"):
        EagleHead(head.config, head.target_vocab_size)(torch.zeros(1, 2, 64), torch.zeros(1, 2, dtype=torch.long))


def test_feature_buffer_grows_and_truncates():
    buffer = FeatureBuffer()
    rows = torch.arange(600 * 4, dtype=torch.float32).reshape(600, 4)
    buffer.append(rows[:300])
    buffer.append(rows[300:])
    assert len(buffer) == 600 and torch.equal(buffer.rows(0, 600), rows)
    buffer.truncate(10)
    buffer.append(rows[:2])
    assert len(buffer) == 12 and torch.equal(buffer.rows(10, 12), rows[:2])


def test_the_head_drafts_only_from_its_draft_vocabulary(trained):
    report = json.loads((trained / "distill.json").read_text())
    head = load_head(trained, torch.device("cpu"), torch.float32).attach(tiny_model(0))
    vocab = head.draft_vocab
    assert len(vocab) == report["agreement"]["draft_vocab"] < head.target_vocab_size
    assert torch.equal(vocab, torch.unique(vocab))  # sorted, no repeats
    logits = head.logits(torch.randn(3, head.config.hidden_size))
    outside = torch.ones(head.target_vocab_size, dtype=torch.bool)
    outside[vocab] = False
    assert torch.isinf(logits[:, outside]).all() and torch.isfinite(logits[:, vocab]).all()
    assert torch.equal(head.vocab_index(vocab[[0, -1]]), torch.tensor([0, len(vocab) - 1]))
    missing = int(outside.nonzero()[0])
    assert int(head.vocab_index(torch.tensor([missing]))) == -100  # ignored by the cross-entropy


def test_bench_distill_measures_a_head_against_the_base_draft(trained, capsys):
    capsys.readouterr()
    assert main(["bench", "distill", "--draft-model", str(trained), "--model", "tiny:0", "--eval-prompts", "2",
                 "--eval-max-tokens", "12", "--quiet"]) == 0
    table = capsys.readouterr().out
    evaluation = json.loads((trained / "distill-eval.json").read_text())
    after = evaluation["agreement"]["distilled"]["agreement"]
    assert f"| distilled | {after:.1%} |" in table  # the head's held-out agreement, from the run's report
    summary = evaluation["speculative"]["summary"]
    assert summary["base"]["divergences"] == summary["distilled"]["divergences"] == 0
    assert summary["distilled"]["acceptance_rate"] > 0 and evaluation["prefix_tokens"] == 256
