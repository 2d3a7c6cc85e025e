"""`codespec distill` with tiny random models: data, loss, training, resume, saving, loading, evaluation."""

import json
import textwrap

import pytest
import torch

from codespec.cli import main
from codespec.distill import DIVERGENCES, data
from codespec.distill.teacher import Labels, label_example
from codespec.distill.train import TrainConfig, distill_loss, draft_logits, position_weights
from codespec.errors import CodespecError
from codespec.models import load_model, stop_token_ids
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.engine.conftest import reference_greedy

torch.set_num_threads(1)

MODULE = '''
class Stack:
    """A list with push and pop."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)
        return item

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()
'''


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config.py").write_text("ignored = True\n")
    for i in range(5):
        (root / "pkg" / f"mod{i}.py").write_text(textwrap.dedent(MODULE).replace("Stack", f"Stack{i}"))
    (root / "README.txt").write_text("not code\n")
    return root


def distill(repo, out, *extra: str) -> int:
    # The file's own middles and windows only, unless a test asks for the models' middles (the defaults'
    # on-policy mix runs in the two-process test).
    return main(["distill", "--repo", str(repo), "--out", str(out), "--model", "tiny:0", "--draft-model", "tiny:1",
                 "--seq-len", "96", "--max-train-tokens", "700", "--max-eval-tokens", "300", "--batch", "2",
                 "--lr", "3e-3", "--epochs", "50", "--dtype", "fp32", "--quiet", "--fim-fraction", "0.5",
                 "--greedy-fraction", "0", "--onpolicy-fraction", "0", "--ce-weight", "0.1", *extra])


def test_files_split_by_file_deterministically(repo):
    files = data.collect_files(repo)
    assert [f.relpath for f in files] == [f"pkg/mod{i}.py" for i in range(5)]  # .git and .txt skipped
    train, held = data.split_files(files, 0.2, seed=0)
    assert len(held) == 1 and not {f.relpath for f in train} & {f.relpath for f in held}
    assert data.split_files(files, 0.2, seed=0) == (train, held)
    assert len({data.split_files(files, 0.2, seed=s)[1][0].relpath for s in range(12)}) > 1  # the seed matters
    with pytest.raises(CodespecError):
        data.split_files(files, 1.0, seed=0)


def test_examples_are_fim_and_left_to_right_and_seeded(repo):
    tokenizer = tiny_tokenizer()
    files = data.collect_files(repo)
    config = data.ExampleConfig(seq_len=96)
    examples = data.build_examples(files, tokenizer, config, seed=3)
    assert {e.kind for e in examples} == {"fim", "l2r"}
    assert data.fingerprint(examples) == data.fingerprint(data.build_examples(files, tokenizer, config, seed=3))
    assert data.fingerprint(examples) != data.fingerprint(data.build_examples(files, tokenizer, config, seed=4))
    pre, suf, mid = data.fim_marker_ids(tokenizer)
    for example in examples:
        assert len(example.ids) <= config.seq_len
        if example.kind == "fim":
            assert example.ids[0] == pre and suf in example.ids
            assert example.ids[example.train_from - 1] == mid  # trained from the first middle token on
            middle = tokenizer.decode(example.ids[example.train_from:])
            source = next(f.text for f in files if f.relpath == example.source)
            assert middle in source
            assert source[: source.index(middle)].rsplit("\n", 1)[-1].strip() == ""  # starts its line
        else:
            assert example.train_from == 1
    limited = data.build_examples(files, tokenizer, config, seed=3, max_positions=300)
    assert sum(len(e.ids) for e in limited) <= 300


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_loss_is_zero_for_the_target_itself_and_the_exact_divergence_for_another_model(repo, divergence):
    tokenizer = tiny_tokenizer()
    example = data.build_examples(data.collect_files(repo), tokenizer, data.ExampleConfig(seq_len=64), seed=0)[0]
    target, other = tiny_model(0), tiny_model(1)
    labels = label_example(target, example, top_k=len(tokenizer))  # the full distribution: the divergence is exact
    assert labels.ids.shape[0] == example.positions
    with torch.no_grad():
        same = distill_loss(draft_logits(target, example), labels, ce_weight=0.0, divergence=divergence)
        different = distill_loss(draft_logits(other, example), labels, ce_weight=0.0, divergence=divergence)
        with_ce = distill_loss(draft_logits(other, example), labels, ce_weight=2.0, divergence=divergence)
        log_p = torch.log_softmax(draft_logits(target, example).float(), -1)
        log_q = torch.log_softmax(draft_logits(other, example).float(), -1)
    exact = {"kl": (log_p.exp() * (log_p - log_q)).sum(-1), "rkl": (log_q.exp() * (log_q - log_p)).sum(-1),
             "tvd": 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1)}[divergence]
    assert float(same.abs().max()) < 1e-3
    assert float(different.mean()) > 0.01
    torch.testing.assert_close(different, exact, atol=1e-3, rtol=1e-3)
    # The CE is on the target's argmax, whichever divergence.
    ce = -log_q.gather(-1, log_p.argmax(-1, keepdim=True))[:, 0]
    torch.testing.assert_close(with_ce - different, 2.0 * ce, atol=1e-3, rtol=1e-3)


def test_an_unknown_divergence_is_a_clear_error():
    with pytest.raises(ValueError, match="one of kl, tvd, rkl"):
        distill_loss(torch.zeros(1, 4), Labels(torch.zeros(1, 2, dtype=torch.int32), torch.full((1, 2), -1.0)), 0.0,
                     "js")


def test_distill_trains_saves_a_loadable_draft_and_stays_lossless(repo, tmp_path, capsys):
    out = tmp_path / "draft"
    assert distill(repo, out, "--max-steps", "12", "--eval", "--eval-prompts", "2", "--eval-max-tokens", "12") == 0
    report = json.loads((out / "distill.json").read_text())
    losses = report["train"]["losses"]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3
    assert report["heldout_files"] and not set(report["heldout_files"]) & set(report["train_files"])
    assert report["agreement"]["after"]["kl"] < report["agreement"]["before"]["kl"]

    loaded = load_model(str(out))  # a plain HF directory: what --draft-model DIR and the server load
    base = tiny_model(1)
    changed = any(not torch.equal(p, base.state_dict()[n]) for n, p in loaded.model.state_dict().items())
    assert changed and not any("lora" in n for n in loaded.model.state_dict())

    evaluation = json.loads((out / "distill-eval.json").read_text())
    summary = evaluation["speculative"]["summary"]
    assert summary["base"]["divergences"] == 0 and summary["distilled"]["divergences"] == 0
    assert summary["distilled"]["target_forwards"] > 0

    from codespec.decode.engine import Engine

    target = load_model("tiny:0")
    engine = Engine(target, loaded, drafting="model")
    prompt = tiny_tokenizer().encode("def push(self, item):\n")
    expected = reference_greedy(target.model, prompt, 24, set(stop_token_ids(target.tokenizer)))
    result = engine.generate(prompt, max_new_tokens=24)
    assert result.token_ids == expected and result.stats.drafted > 0

    prompt_file = tmp_path / "prompt.py"
    prompt_file.write_text("def push(self, item):\n")
    assert main(["generate", "--prompt-file", str(prompt_file), "--model", "tiny:0", "--draft-model", str(out),
                 "--drafting", "model", "--max-tokens", "24", "--json"]) == 0  # the CLI's --draft-model DIR
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["token_ids"] == expected


@pytest.mark.parametrize("method", ["lora", "full"])
def test_resumed_training_equals_one_uninterrupted_run(repo, tmp_path, method):
    run = ("--checkpoint-every", "2", "--method", method, "--lr", "3e-3" if method == "lora" else "1e-3")
    assert distill(repo, tmp_path / "whole", "--max-steps", "6", *run) == 0
    assert distill(repo, tmp_path / "parts", "--max-steps", "3", *run) == 0
    assert distill(repo, tmp_path / "parts", "--max-steps", "6", *run) == 0
    whole = json.loads((tmp_path / "whole" / "distill.json").read_text())["train"]["losses"]
    parts = json.loads((tmp_path / "parts" / "distill.json").read_text())["train"]["losses"]
    assert len(whole) == 6 and parts == pytest.approx(whole, rel=1e-4)
    a = load_model(str(tmp_path / "whole")).model.state_dict()
    b = load_model(str(tmp_path / "parts")).model.state_dict()
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


def test_weight_averaging_saves_the_mean_of_the_weights_after_each_step_from_its_start(repo, tmp_path,
                                                                                      monkeypatch, capsys):
    run = ("--method", "full", "--lr", "1e-3", "--checkpoint-every", "2")
    # --average-from 0.5 of 6 steps: the mean of the weights after steps 3, 4, 5 and 6.
    assert distill(repo, tmp_path / "avg", "--max-steps", "6", "--average-from", "0.5", *run) == 0
    assert json.loads((tmp_path / "avg" / "distill.json").read_text())["train"]["averaged_steps"] == 4
    after_step = []
    for steps in range(1, 7):  # the same training, resumed one step further each time, without averaging
        assert distill(repo, tmp_path / "plain", "--max-steps", str(steps), *run) == 0
        after_step.append(load_model(str(tmp_path / "plain")).model.state_dict())
    averaged = load_model(str(tmp_path / "avg")).model.state_dict()
    moved = [n for n in averaged if not torch.equal(after_step[2][n], after_step[5][n])]
    assert moved
    for name in averaged:
        mean = sum(weights[name] for weights in after_step[2:]) / 4
        assert torch.allclose(averaged[name], mean, atol=1e-6), name

    # Stopped after step 5 (the checkpoint of step 4 holds the mean of steps 3-4) and run again: the same draft.
    from codespec.distill import train

    step = train._train_step

    def stop_at_five(*args):
        if args[5].step == 4 and not stopped:
            stopped.append(True)
            raise KeyboardInterrupt
        return step(*args)

    stopped: list[bool] = []
    monkeypatch.setattr(train, "_train_step", stop_at_five)
    assert distill(repo, tmp_path / "resumed", "--max-steps", "6", "--average-from", "0.5", *run) == 130
    assert distill(repo, tmp_path / "resumed", "--max-steps", "6", "--average-from", "0.5", *run) == 0
    resumed = load_model(str(tmp_path / "resumed")).model.state_dict()
    assert all(torch.allclose(resumed[n], averaged[n], atol=1e-6) for n in averaged)
    # The planned steps decide where averaging starts: another --max-steps cannot continue this average.
    capsys.readouterr()
    assert distill(repo, tmp_path / "resumed", "--max-steps", "8", "--average-from", "0.5", *run) == 2
    assert "averages weights from step 3, this run would from step 4" in capsys.readouterr().err


def test_full_fine_tuning_trains_all_but_the_embedding_in_fp32_and_stays_lossless(repo, tmp_path):
    out = tmp_path / "full"
    # bf16 compute over fp32 weights, which keep the small updates that bf16 weights would round away.
    assert distill(repo, out, "--method", "full", "--max-steps", "10", "--lr", "1e-3", "--dtype", "bf16") == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["method"] == "full" and report["train"]["autocast"] == "bfloat16"
    losses = report["train"]["losses"]
    assert len(losses) == 10 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3
    assert report["agreement"]["after"]["kl"] < report["agreement"]["before"]["kl"]

    loaded = load_model(str(out)).model
    base = tiny_model(1).state_dict()
    trained = loaded.state_dict()
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert torch.equal(trained["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    assert all(not torch.equal(trained[n], base[n]) for n in base
               if ".layers." in n and n.endswith("proj.weight"))  # every decoder layer's projections moved

    from codespec.decode.engine import Engine

    target = load_model("tiny:0")
    prompt = tiny_tokenizer().encode("    def pop(self):\n")
    expected = reference_greedy(target.model, prompt, 24, set(stop_token_ids(target.tokenizer)))
    result = Engine(target, load_model(str(out)), drafting="model").generate(prompt, max_new_tokens=24)
    assert result.token_ids == expected and result.stats.drafted > 0


@pytest.mark.parametrize("divergence", ["tvd", "rkl"])
def test_other_divergences_train_the_draft_towards_the_target(repo, tmp_path, divergence):
    out = tmp_path / divergence
    assert distill(repo, out, "--method", "full", "--max-steps", "10", "--lr", "1e-3", "--divergence", divergence) == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["train"]["divergence"] == divergence
    losses = report["train"]["losses"]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3
    # The held-out KL (the report's measure, whatever the training divergence) falls too.
    assert report["agreement"]["after"]["kl"] < report["agreement"]["before"]["kl"]


def test_bench_distill_reports_before_and_after(repo, tmp_path, capsys):
    out = tmp_path / "draft"
    assert distill(repo, out, "--max-steps", "2") == 0
    capsys.readouterr()
    assert main(["bench", "distill", "--draft-model", str(out), "--model", "tiny:0", "--eval-prompts", "2",
                 "--eval-max-tokens", "8", "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "| base |" in table and "| distilled |" in table
    evaluation = json.loads((out / "distill-eval.json").read_text())
    assert evaluation["agreement"]["base"]["positions"] > 0  # from the labels the run saved


def test_bench_distill_replays_tau_on_more_prompts_equal_to_the_speculative_runs(repo, tmp_path, capsys,
                                                                                 monkeypatch):
    from codespec.decode.engine import Engine

    out = tmp_path / "draft"
    assert distill(repo, out, "--max-steps", "30") == 0
    plain_runs = []
    generate = Engine.generate

    def counting(self, prompt_ids, **kwargs):
        if (kwargs.get("drafting") or self.drafting) == "none":
            plain_runs.append(list(prompt_ids))
        return generate(self, prompt_ids, **kwargs)

    monkeypatch.setattr(Engine, "generate", counting)
    # The target as the base draft: every token it drafts is accepted, the distilled draft's only some.
    bench = ["bench", "distill", "--draft-model", str(out), "--model", "tiny:0", "--base-draft", "tiny:0",
             "--eval-prompts", "3", "--eval-max-tokens", "16", "--quiet"]
    capsys.readouterr()
    assert main([*bench, "--replay-prompts", "5"]) == 0
    assert "replayed: tau" in capsys.readouterr().err
    report = json.loads((out / "distill-eval.json").read_text())
    replayed, spec = report["replayed"], report["speculative"]
    assert replayed["prompts"] == 5 and [r["prompt"] for r in replayed["runs"][:3]] == [r["prompt"] for r in spec["runs"]]
    # The replay counts exactly the target forwards the Engine took on the prompts both ran.
    assert replayed["engine_check"] == {"compared": 6, "equal": 6}
    summary = replayed["summary"]
    assert summary["base"]["accepted"] > summary["distilled"]["accepted"] > 0
    for row, again in zip(spec["runs"], replayed["runs"], strict=False):
        for name in ("base", "distilled"):
            assert again[name]["tokens"] == row[name]["tokens"] == row["tokens"]
    assert sum(r["distilled"]["target_forwards"] for r in replayed["runs"]) == \
        replayed["summary"]["distilled"]["target_forwards"]
    assert len(plain_runs) == 5  # three plain runs in the speculative eval, two more for the replay

    # A second bench keeps the plain outputs: only the sixth prompt is new to the replay.
    plain_runs.clear()
    assert main([*bench, "--replay-prompts", "6"]) == 0
    assert len(plain_runs) == 3 + 1
    again = json.loads((out / "distill-eval.json").read_text())["replayed"]
    assert again["runs"][:5] == replayed["runs"]

    capsys.readouterr()
    assert main([*bench, "--replay-prompts", "2"]) == 2
    assert "fewer than --eval-prompts 3" in capsys.readouterr().err


def test_user_errors_are_one_line(repo, tmp_path, capsys):
    assert distill(tmp_path / "missing", tmp_path / "o") == 2
    assert distill(repo, tmp_path / "o", "--holdout", "0", "--eval") == 2
    assert distill(repo, tmp_path / "o", "--method", "full", "--lora-layers", "2") == 2
    assert distill(repo, tmp_path / "o", "--method", "eagle", "--divergence", "tvd") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [f"codespec: error: --repo {tmp_path / 'missing'}: not a directory",
                      "codespec: error: --eval needs held-out files (--holdout > 0)",
                      "codespec: error: --lora-layers is for --method lora",
                      "codespec: error: --divergence is for a draft model (--method lora or full): an EAGLE head "
                      "regresses the target's features"]


def test_greedy_continuations_are_the_targets_greedy_output_batched_and_resumed(repo, tmp_path):
    from codespec.distill.teacher import greedy_continuations

    tokenizer = tiny_tokenizer()
    target = tiny_model(0)
    examples = data.build_examples(data.collect_files(repo), tokenizer, data.ExampleConfig(seq_len=64), seed=0)
    prompts = [e.ids[: e.train_from] for e in examples if e.kind == "fim"][:5]
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    plain = [reference_greedy(target, list(p), 10, set()) for p in prompts]
    stop = plain[1][4]  # a token the target writes: its continuation must end just before it
    expected = [reference_greedy(target, list(p), 10, {stop}) for p in prompts]
    path = tmp_path / "greedy.pt"
    got = greedy_continuations(target, prompts, 10, [stop], path, batch=3, progress=False)
    assert [list(g) for g in got] == expected and len(got[1]) <= 4
    # A second call reads the saved continuations (another model would write other ones).
    assert greedy_continuations(tiny_model(1), prompts, 10, [stop], path, batch=3, progress=False) == got
    assert greedy_continuations(tiny_model(1), prompts, 9, [stop], path, batch=3, progress=False) != got

    chosen = data.greedy_choice(examples, 0.5, seed=0)
    assert chosen == data.greedy_choice(examples, 0.5, seed=0)
    assert chosen and all(examples[i].kind == "fim" for i in chosen)
    middles = [(7,) * (i % 3) for i in range(len(chosen))]  # the empty middle: the target stopped at once
    replaced = data.with_middles(examples, chosen, middles, "fim-greedy")
    for i, middle in zip(chosen, middles, strict=True):
        e, r = examples[i], replaced[i]
        assert r.kind == "fim-greedy" and r.ids == (*e.ids[: e.train_from], *middle)
        assert r.positions == len(middle) + 1  # the position after the last token is trained: the stop
    assert [e for i, e in enumerate(replaced) if i not in chosen] == [e for i, e in enumerate(examples)
                                                                      if i not in chosen]


def test_distill_with_greedy_middles_and_bf16_training_saves_an_fp32_draft(repo, tmp_path, capsys):
    out = tmp_path / "draft"
    assert distill(repo, out, "--max-steps", "6", "--greedy-fraction", "0.5", "--greedy-tokens", "8",
                   "--dtype", "bf16") == 0
    report = json.loads((out / "distill.json").read_text())
    kinds = report["agreement"]["before"]["by_kind"]
    assert "fim-greedy" in kinds and kinds["fim-greedy"]["positions"] > 0
    assert report["agreement"]["after"]["by_kind"].keys() == kinds.keys()
    loaded = load_model(str(out))
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}  # merged into fp32 weights
    base = tiny_model(1)
    assert any(not torch.equal(p, base.state_dict()[n]) for n, p in loaded.model.state_dict().items())

    capsys.readouterr()
    assert main(["bench", "distill", "--draft-model", str(out), "--model", "tiny:0", "--eval-prompts", "2",
                 "--eval-max-tokens", "8", "--quiet"]) == 0
    evaluation = json.loads((out / "distill-eval.json").read_text())
    # Rebuilt from the saved greedy middles and labels (fp32 here, so only the positions are the run's).
    assert evaluation["agreement"]["base"]["by_kind"]["fim-greedy"]["positions"] == kinds["fim-greedy"]["positions"]
    assert evaluation["speculative"]["summary"]["distilled"]["divergences"] == 0
    assert (out / "distill-eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report records the keys its label and middle files were written under; `bench distill` reads
    # nothing written under another key.
    assert report["caches"]["labels"] == {"top_k": 32, "model": "tiny:0 bf16"}  # the target and its dtype
    assert report["dtype"] == {"labels_and_training": "bf16", "saved_and_eval": "auto"}
    for name, file in (("labels", "labels-heldout.pt"), ("greedy", "greedy-heldout.pt")):
        assert torch.load(out / "work" / file, weights_only=False)["key"] == report["caches"][name]
    report["caches"]["labels"]["top_k"] += 1
    (out / "distill.json").write_text(json.dumps(report))
    assert main(["bench", "distill", "--draft-model", str(out), "--model", "tiny:0", "--eval-prompts", "1",
                 "--eval-max-tokens", "4", "--quiet"]) == 0
    assert json.loads((out / "distill-eval.json").read_text())["agreement"] is None

    # --greedy-weight reweights the greedy positions (labels and greedy middles are reused from OUT/work).
    (tmp_path / "weighted" / "work").mkdir(parents=True)
    for name in ("labels-train.pt", "labels-heldout.pt", "greedy-train.pt", "greedy-heldout.pt"):
        (tmp_path / "weighted" / "work" / name).write_bytes((out / "work" / name).read_bytes())
    assert distill(repo, tmp_path / "weighted", "--max-steps", "6", "--greedy-fraction", "0.5", "--greedy-tokens", "8",
                   "--dtype", "bf16", "--greedy-weight", "5") == 0
    weighted = json.loads((tmp_path / "weighted" / "distill.json").read_text())
    assert weighted["agreement"]["before"] == report["agreement"]["before"]  # same data, same labels
    assert weighted["train"]["losses"] != report["train"]["losses"]


@pytest.mark.parametrize(("native_bf16", "speedup", "auto"), [(False, None, "fp32"), (True, 0.7, "fp32"),
                                                             (True, 4.0, "bf16")])
def test_training_dtype_is_bf16_only_where_the_cpu_computes_it_faster(monkeypatch, capsys, native_bf16, speedup,
                                                                     auto):
    from codespec.distill.pipeline import _training_dtype

    measured = []
    monkeypatch.setattr("codespec.models.cpu_has_native_bf16", lambda: native_bf16)
    monkeypatch.setattr("codespec.models.cpu_bf16_speedup", lambda: measured.append(1) or speedup)
    cpu = torch.device("cpu")
    assert _training_dtype("auto", cpu) == auto
    assert len(measured) == int(native_bf16)  # emulated bf16 is not worth measuring
    assert _training_dtype("fp32", cpu) == "fp32"
    capsys.readouterr()
    assert _training_dtype("bfloat16", cpu) == "bf16"  # asked for: it runs, with a warning where it is slower
    warning = capsys.readouterr().err
    assert ("warning: --dtype bfloat16" in warning) is (auto == "fp32")
    assert ("emulated" in warning) is (not native_bf16)
    with pytest.raises(CodespecError, match="bad dtype"):
        _training_dtype("int8", cpu)


def test_the_bf16_speedup_is_measured_once_per_thread_count():
    from codespec.models import cpu_bf16_speedup

    speedup = cpu_bf16_speedup()
    assert 0.01 < speedup < 100 and cpu_bf16_speedup() == speedup


def test_labels_are_kept_per_example_and_reused_across_example_sets(repo, tmp_path):
    from codespec.distill.teacher import label_examples, labels_key, saved_labels

    examples = data.build_examples(data.collect_files(repo), tiny_tokenizer(), data.ExampleConfig(seq_len=64), seed=0)
    examples = list({(e.ids, e.train_from): e for e in examples}.values())  # the same tokens are one example
    first, later = examples[:4], [*examples[2:4], *examples[4:7]]
    path = tmp_path / "labels.pt"
    labels = label_examples(tiny_model(0), first, 8, path, model_name="tiny:0 fp32", progress=False)
    # An overlapping set under the same name: the two shared examples keep the first labels (another model
    # stands in, to tell reuse from relabelling), the rest are new.
    other = tiny_model(1)
    relabelled = label_examples(other, later, 8, path, model_name="tiny:0 fp32", progress=False)
    for got, want in zip(relabelled[:2], labels[2:4], strict=True):
        assert torch.equal(got.ids, want.ids) and torch.equal(got.logprobs, want.logprobs)
    for got, example in zip(relabelled[2:], later[2:], strict=True):
        assert torch.equal(got.ids, label_example(other, example, 8).ids)
    key = labels_key(8, "tiny:0 fp32")
    assert saved_labels(path, examples[:7], key) is not None and saved_labels(path, examples[:8], key) is None
    assert saved_labels(path, examples[:7], labels_key(4, "tiny:0 fp32")) is None  # written under another key
    # Another model (or dtype) never reuses a label: all of them are new.
    again = label_examples(other, later, 8, path, model_name="tiny:1 fp32", progress=False)
    assert not torch.equal(again[0].logprobs, relabelled[0].logprobs)
    assert torch.equal(again[0].ids, label_example(other, later[0], 8).ids)
    assert saved_labels(path, later, labels_key(8, "tiny:1 fp32")) is not None and saved_labels(path, later, key) is None
    assert label_examples(tiny_model(0), later, 4, path, progress=False)[0].ids.shape[1] == 4  # another top-k


def test_offpath_weight_applies_after_the_drafts_first_disagreement_with_the_target():
    # prompt 7 8 9, drafted middle 1 2 3 4; the target's argmax after 9, 1, 2, 3, 4: 1 2 5 4 0.
    draft = data.Example(ids=(7, 8, 9, 1, 2, 3, 4), train_from=3, kind="fim-draft", source="a.py")
    target = torch.tensor([[1, 6], [2, 6], [5, 6], [4, 6], [0, 6]], dtype=torch.int32)
    labels = Labels(ids=target, logprobs=torch.log(torch.full((5, 2), 0.5)))
    weights = position_weights(draft, labels, TrainConfig(offpath_weight=0.25))
    # On the path: the first three positions (the third, where 5 was wanted and 3 drafted, included).
    assert weights.tolist() == [1.0, 1.0, 1.0, 0.25, 0.25]
    assert position_weights(draft, labels, TrainConfig()).tolist() == [1.0] * 5
    greedy = data.Example(ids=draft.ids, train_from=3, kind="fim-greedy", source="a.py")
    assert position_weights(greedy, labels, TrainConfig(greedy_weight=4, offpath_weight=0)).tolist() == [4.0] * 5
    fim = data.Example(ids=draft.ids, train_from=3, kind="fim", source="a.py")
    assert position_weights(fim, labels, TrainConfig(offpath_weight=0)).tolist() == [1.0] * 5


def test_onpolicy_middles_are_the_drafts_own_greedy_continuations(repo, tmp_path, capsys):
    out = tmp_path / "draft"
    assert distill(repo, out, "--max-steps", "4", "--greedy-fraction", "0.25", "--onpolicy-fraction", "0.25",
                   "--greedy-tokens", "8", "--max-eval-tokens", "1500", "--fim-fraction", "0.8") == 0
    report = json.loads((out / "distill.json").read_text())
    kinds = report["agreement"]["before"]["by_kind"]
    assert {"fim", "fim-greedy", "fim-draft"} <= kinds.keys()
    assert "FIM with the draft's own middle" in capsys.readouterr().err
    # Rebuild the held-out examples: the fim-draft middles are what the (untrained) draft writes greedily.
    files = [f for f in data.collect_files(repo) if f.relpath in report["heldout_files"]]
    examples = data.build_examples(files, tiny_tokenizer(), data.ExampleConfig(**report["example_config"]),
                                   seed=1, max_positions=report["max_eval_tokens"])
    greedy = data.greedy_choice(examples, 0.25, seed=1)
    onpolicy = data.onpolicy_choice(examples, 0.25, seed=1, exclude=greedy)
    assert onpolicy and not set(onpolicy) & set(greedy) and all(examples[i].kind == "fim" for i in onpolicy)
    saved = torch.load(out / "work" / "onpolicy-heldout.pt", weights_only=False)
    assert saved["key"]["model"] == "tiny:1 fp32"
    stop = set(stop_token_ids(tiny_tokenizer()))
    draft = tiny_model(1)
    assert len(saved["by_prompt"]) == len(onpolicy)
    for i in onpolicy:
        prompt = list(examples[i].ids[: examples[i].train_from])
        assert tuple(reference_greedy(draft, prompt, 8, stop)) in saved["by_prompt"].values()
    assert kinds["fim-draft"]["positions"] == sum(len(m) + 1 for m in saved["by_prompt"].values())
    assert distill(repo, tmp_path / "o", "--greedy-fraction", "0.6", "--onpolicy-fraction", "0.6") == 2
    # Off-path positions may weigh nothing: training still runs on the rest and the draft is saved.
    assert distill(repo, tmp_path / "off", "--max-steps", "2", "--onpolicy-fraction", "0.5", "--greedy-tokens", "8",
                   "--offpath-weight", "0") == 0
    assert json.loads((tmp_path / "off" / "distill.json").read_text())["train"]["offpath_weight"] == 0.0
    assert distill(repo, tmp_path / "o", "--offpath-weight", "2") == 2


def test_two_processes_under_accelerate_launch_train_like_one(repo, tmp_path):
    """Multi-device training is accelerate's DDP (gloo on this CPU, NCCL on GPUs): each process takes its
    share of every batch and the gradients are summed, so two processes train what one does."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # With --max-minutes and no --max-train-tokens: the other process must plan and take the same examples
    # as the main one, which alone generates and labels them within its deadline.
    common = ["--repo", str(repo), "--model", "tiny:0", "--draft-model", "tiny:1", "--seq-len", "96",
              "--max-minutes", "30", "--max-eval-tokens", "300", "--batch", "3", "--lr", "3e-3",
              "--max-steps", "4", "--quiet", "--threads", "1"]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--main_process_port", str(port), "--mixed_precision", "no",
              "--dynamo_backend", "no", "-m", "codespec.cli", "distill", "--out", str(tmp_path / "two"), *common]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count(" files: 4 for training") == 2  # both processes ran
    assert main(["distill", "--out", str(tmp_path / "one"), *common]) == 0
    two, one = (json.loads((tmp_path / d / "distill.json").read_text()) for d in ("two", "one"))
    assert two["train"]["steps"] == one["train"]["steps"] == 4
    assert two["train_examples"] == one["train_examples"] > 20
    assert two["train"]["losses"] == pytest.approx(one["train"]["losses"], rel=1e-4)
    merged_two, merged_one = (load_model(str(tmp_path / d)).model.state_dict() for d in ("two", "one"))
    for name, weight in merged_one.items():
        assert torch.allclose(merged_two[name], weight, atol=1e-5), name


def _allow(asks: int):
    """An `out_of_time` that says no `asks` times, then yes: a deadline that does not depend on the clock."""
    state = {"asked": 0}

    def out_of_time() -> bool:
        state["asked"] += 1
        return state["asked"] > asks

    return out_of_time


def test_a_deadline_keeps_a_prefix_of_the_examples_and_a_rerun_completes_them(repo, tmp_path, monkeypatch):
    import argparse

    from codespec.distill import pipeline

    monkeypatch.setattr(pipeline, "CHUNK_EXAMPLES", 4)  # several chunks from the tiny repository
    target, draft = load_model("tiny:0"), load_model("tiny:1")
    models = {"greedy": (target, "tiny:0"), "onpolicy": (draft, "tiny:1")}
    args = argparse.Namespace(method="lora", greedy_fraction=0.25, onpolicy_fraction=0.25, greedy_tokens=6, greedy_batch=1,
                              top_k=8, quiet=True, dtype="fp32")
    examples = data.build_examples(data.collect_files(repo), target.tokenizer, data.ExampleConfig(seq_len=64), seed=0)
    assert len(examples) > 8
    whole, whole_labels = pipeline._prepared_split(models, examples, args, 0, tmp_path / "a", "train", None)
    assert len(whole) == len(examples) and {"fim-greedy", "fim-draft"} <= {e.kind for e in whole}

    # Cut short: a prefix of the same examples (middles included) with the same labels, nothing else.
    cut, cut_labels = pipeline._prepared_split(models, examples, args, 0, tmp_path / "b", "train", _allow(7))
    assert 0 < len(cut) < len(whole) and cut == whole[: len(cut)] and len(cut_labels) == len(cut)
    for got, want in zip(cut_labels, whole_labels, strict=False):
        assert torch.equal(got.ids, want.ids)
    # Run again with no deadline: the rest is done, what was done is read back, the result is the whole set.
    again, again_labels = pipeline._prepared_split(models, examples, args, 0, tmp_path / "b", "train", None)
    assert again == whole and len(again_labels) == len(whole)
    # Out of time from the start: nothing new is computed, what is saved is still used.
    assert pipeline._prepared_split(models, examples, args, 0, tmp_path / "c", "train", _allow(0)) == ([], [])
    saved, _ = pipeline._prepared_split(models, examples, args, 0, tmp_path / "b", "train", _allow(0))
    assert saved == whole


def test_the_data_phase_reads_each_cache_file_once_and_writes_the_labels_once(repo, tmp_path, monkeypatch):
    import argparse
    from collections import Counter

    from codespec.distill import pipeline, teacher

    monkeypatch.setattr(pipeline, "CHUNK_EXAMPLES", 4)  # many chunks: per-chunk I/O would show
    reads, writes = Counter(), Counter()
    load, save = teacher.load_cache, teacher.save_atomic
    monkeypatch.setattr(teacher, "load_cache", lambda path, *a: reads.update([path.name]) or load(path, *a))
    monkeypatch.setattr(teacher, "save_atomic", lambda path, payload: writes.update([path.name]) or save(path, payload))
    target, draft = load_model("tiny:0"), load_model("tiny:1")
    models = {"greedy": (target, "tiny:0"), "onpolicy": (draft, "tiny:1")}
    args = argparse.Namespace(method="lora", greedy_fraction=0.25, onpolicy_fraction=0.25, greedy_tokens=6, greedy_batch=1,
                              top_k=8, quiet=True, dtype="fp32")
    examples = data.build_examples(data.collect_files(repo), target.tokenizer, data.ExampleConfig(seq_len=64), seed=0)
    ready, labels = pipeline._prepared_split(models, examples, args, 0, tmp_path, "train", None)
    assert len(ready) == len(labels) == len(examples) > 3 * pipeline.CHUNK_EXAMPLES
    assert reads == {"labels-train.pt": 1, "greedy-train.pt": 1, "onpolicy-train.pt": 1}
    # The labels once at the end (within the minute between saves); middles after each batch of 1 prompt
    # (equal prompts are generated once).
    middles = [len({e.ids[: e.train_from] for e in ready if e.kind == kind}) for kind in ("fim-greedy", "fim-draft")]
    assert writes == {"labels-train.pt": 1, "greedy-train.pt": middles[0], "onpolicy-train.pt": middles[1]}
    # What was written is what a later run reads: nothing is computed again.
    monkeypatch.setattr(teacher, "label_example", None)
    monkeypatch.setattr(teacher.CacheFile, "put", None)
    again, again_labels = pipeline._prepared_split(models, examples, args, 0, tmp_path, "train", None)
    assert again == ready and all(torch.equal(a.ids, b.ids) for a, b in zip(again_labels, labels, strict=True))


def test_data_only_labels_and_stops_and_the_same_command_then_trains_on_those_labels(repo, tmp_path, monkeypatch,
                                                                                        capsys):
    from codespec.distill import teacher

    out = tmp_path / "draft"
    mix = ("--greedy-fraction", "0.2", "--onpolicy-fraction", "0.3", "--greedy-tokens", "6", "--max-steps", "2")
    assert distill(repo, out, *mix, "--data-only") == 0
    assert "training and" in capsys.readouterr().err
    work = sorted(p.name for p in (out / "work").iterdir())
    assert work == sorted(f"{name}-{split}.pt" for name in ("labels", "greedy", "onpolicy") for split in ("train", "heldout"))
    assert not (out / "config.json").exists() and not (out / "distill.json").exists()
    # The run that trains computes no label and no middle: all of them are read back.
    monkeypatch.setattr(teacher, "label_example", None)
    monkeypatch.setattr(teacher.CacheFile, "put", None)
    assert distill(repo, out, *mix) == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["train"]["steps"] == 2 and (out / "config.json").exists()
    assert {"fim-greedy", "fim-draft"} <= report["agreement"]["before"]["by_kind"].keys()
    assert distill(repo, tmp_path / "x", "--data-only", "--eval") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "codespec: error: --data-only stops before training: there is nothing to --eval")


def test_max_minutes_bounds_the_whole_run_and_bench_reads_a_cut_run(repo, tmp_path, monkeypatch, capsys):
    from codespec.distill import pipeline

    monkeypatch.setattr(pipeline, "CHUNK_EXAMPLES", 4)
    # The deadlines of the held-out and the training data, in the order the run asks for them.
    deadlines = iter([_allow(3), _allow(5)])
    monkeypatch.setattr(pipeline, "_deadline", lambda at: next(deadlines) if at is not None else None)
    out = tmp_path / "draft"
    # No --max-train-tokens: with --max-minutes as many as fit. Training stops by the clock (1000 epochs).
    assert main(["distill", "--repo", str(repo), "--out", str(out), "--model", "tiny:0", "--draft-model", "tiny:1",
                 "--seq-len", "96", "--max-eval-tokens", "600", "--batch", "2", "--epochs", "1000", "--dtype", "fp32",
                 "--quiet", "--greedy-fraction", "0.2", "--onpolicy-fraction", "0.3", "--greedy-batch", "1",
                 "--max-minutes", "0.2"]) == 0
    report = json.loads((out / "distill.json").read_text())
    assert report["budget"]["data_cut_by_time"] == {"train": True, "heldout": True}
    assert report["train"]["stopped_by"] == "time" and report["train"]["steps"] >= 1
    assert 0 < report["train_examples"] and 0 < report["heldout_examples"]
    assert "examples were ready in the data phase's time" in capsys.readouterr().err
    # `bench distill` rebuilds exactly the held-out examples the cut run used, from the saved labels.
    assert main(["bench", "distill", "--draft-model", str(out), "--model", "tiny:0", "--eval-prompts", "2",
                 "--eval-max-tokens", "6", "--quiet"]) == 0
    evaluation = json.loads((out / "distill-eval.json").read_text())
    assert evaluation["agreement"]["base"]["positions"] == report["agreement"]["before"]["positions"]

    deadlines = iter([_allow(3), _allow(0)])  # no training example in time: a clear error, not a base draft
    assert distill(repo, tmp_path / "late", "--max-minutes", "5") == 2
    assert distill(repo, tmp_path / "o", "--data-share", "1") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[-2:] == ["codespec: error: --max-minutes 5: no training example was labelled in the data phase "
                           "(0.4 of it); give more minutes or a larger --data-share",
                           "codespec: error: --data-share must be in (0, 1): the rest of --max-minutes is for training"]


def test_extra_repo_adds_the_training_examples_a_run_on_it_alone_would_make(repo, tmp_path, capsys):
    other = tmp_path / "other"
    (other / "lib").mkdir(parents=True)
    for i in range(5):
        (other / "lib" / f"queue{i}.py").write_text(textwrap.dedent(MODULE).replace("Stack", f"Queue{i}")
                                                    .replace("push", "put").replace("pop", "get"))
    alone, mine, both = tmp_path / "alone", tmp_path / "mine", tmp_path / "both"
    for source, out, extra in ((other, alone, ()), (repo, mine, ()), (repo, both, ("--extra-repo", str(other)))):
        assert distill(source, out, "--max-steps", "1", *extra) == 0
    alone_report, mine_report, report = (json.loads((d / "distill.json").read_text()) for d in (alone, mine, both))
    # Held out and evaluated: --repo's files only, as without --extra-repo.
    assert report["heldout_files"] == mine_report["heldout_files"] and report["train_files"] == mine_report["train_files"]
    (extra,) = report["extra_repos"]
    assert extra["repo"] == str(other.resolve()) and extra["train_files"] == alone_report["train_files"]
    assert extra["train_examples"] == alone_report["train_examples"]
    assert report["train_examples"] == mine_report["train_examples"] + alone_report["train_examples"]
    # The same examples as the run on `other` alone (by their digests), in their own folder: that run's
    # OUT/work/labels-train.pt copied there would be reused, nothing relabelled.
    saved = torch.load(both / extra["work"] / "labels-train.pt", weights_only=False)["by_example"]
    assert set(saved) == set(torch.load(alone / "work" / "labels-train.pt", weights_only=False)["by_example"])
    mine_saved = torch.load(both / "work" / "labels-train.pt", weights_only=False)["by_example"]
    assert not set(saved) & set(mine_saved)

    capsys.readouterr()
    assert distill(repo, tmp_path / "again", "--extra-repo", str(repo)) == 2
    assert distill(repo, tmp_path / "again", "--extra-repo", str(tmp_path / "missing")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"codespec: error: --extra-repo {repo} is --repo itself",
        f"codespec: error: --extra-repo {tmp_path / 'missing'}: not a directory"]
