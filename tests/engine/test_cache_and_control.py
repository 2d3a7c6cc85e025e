"""KV cache rollback and reuse, cancellation, limits, streaming text."""

import threading

import pytest
import torch

from codespec.decode.engine import CancelToken, Engine
from codespec.errors import CodespecError
from codespec.tiny import tiny_model
from tests.engine.conftest import Bundle, reference_greedy


def stop_at_strings(strings):
    """A stop rule for literal stop strings, which may span token boundaries: cut before the first one."""

    def stop(text: str) -> int | None:
        cuts = [i for i in (text.find(s) for s in strings if s) if i >= 0]
        return min(cuts) if cuts else None

    return stop


@torch.inference_mode()
def test_cache_after_rollback_equals_full_recompute(target, draft):
    engine = Engine(target, draft, drafting="both", stop_token_ids=[])
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    result = engine.generate(prompt, max_new_tokens=40)
    assert result.stats.drafted > result.stats.accepted  # rejections happened, so rollbacks happened
    sequence = prompt + result.token_ids
    assert engine.runtime._cache.get_seq_length() == len(sequence) - 1 == len(engine.runtime.cached)
    cached = engine.runtime.forward(sequence[-1:], logits=1)[0]
    full = target.model(input_ids=torch.tensor([sequence])).logits[0, -1]
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)


def test_shared_prefix_is_not_prefilled_again(target, draft):
    engine = Engine(target, draft, drafting="both", stop_token_ids=[])
    first = list(b"import os\nimport sys\n\ndef main():\n    ")
    engine.generate(first, max_new_tokens=10)
    second = first + list(b"pri")  # the user typed on
    result = engine.generate(second, max_new_tokens=10)
    assert result.stats.reused_tokens == len(first)
    assert result.stats.prefill_tokens == 3
    assert result.token_ids == reference_greedy(target.model, second, 10, set())
    diverged = first[:-4] + list(b"\treturn")  # an edit before the end of the previous prompt
    result = engine.generate(diverged, max_new_tokens=10)
    assert result.stats.reused_tokens == len(first) - 4
    assert result.token_ids == reference_greedy(target.model, diverged, 10, set())


def test_cancel_stops_within_one_step(target):
    engine = Engine(target, drafting="lookup", stop_token_ids=[], step_delay_s=0.01)
    token = CancelToken()
    steps = 0
    forwards_at_cancel = None
    events = engine.stream(list(b"while True:\n"), max_new_tokens=500, cancel=token)
    for event in events:
        steps += 1
        if steps == 5:
            forwards_at_cancel = steps
            threading.Thread(target=token.cancel).start()
        if event.done:
            result = event.result
    assert result.finish_reason == "cancelled"
    assert result.stats.forwards_after_cancel <= 1
    assert result.stats.target_forwards <= forwards_at_cancel + 1
    assert len(result.token_ids) < 500


def test_chunked_prefill_equals_one_shot_and_plain_greedy(target):
    prompt = list(b"import os\nimport sys\n\ndef main(argv):\n    for arg in argv:\n        ")
    one_shot = Engine(target, stop_token_ids=[], prefill_chunk=10_000).generate(prompt, max_new_tokens=12)
    chunked = Engine(target, stop_token_ids=[], prefill_chunk=5).generate(prompt, max_new_tokens=12)
    assert chunked.token_ids == one_shot.token_ids == reference_greedy(target.model, prompt, 12, set())
    for bad in (0, -1):
        with pytest.raises(CodespecError, match="prefill_chunk"):
            Engine(target, prefill_chunk=bad)


def test_cancel_during_prefill_stops_within_one_chunk_and_keeps_its_kv(target):
    engine = Engine(target, stop_token_ids=[], prefill_chunk=8)
    prompt = list(b"def fibonacci(n):\n    if n < 2:\n        return n\n    return fib")  # 8 chunks
    token = CancelToken()
    forward, chunks = engine.runtime.forward, []

    def cancel_during_the_second_chunk(tokens, logits):
        chunks.append(len(tokens))
        if len(chunks) == 2:
            token.cancel()
        return forward(tokens, logits)

    engine.runtime.forward = cancel_during_the_second_chunk
    result = engine.generate(prompt, max_new_tokens=20, cancel=token)
    assert result.finish_reason == "cancelled" and result.token_ids == []
    assert chunks == [8, 8]  # the chunk running at the cancel finished; nothing else ran
    assert result.stats.prefill_tokens == 16 and result.stats.forwards_after_cancel == 1
    assert result.stats.target_forwards == 0
    engine.runtime.forward = forward
    again = engine.generate(prompt, max_new_tokens=20)  # the next request starts from the chunks done
    assert again.stats.reused_tokens == 16 and again.stats.prefill_tokens == len(prompt) - 16
    assert again.token_ids == reference_greedy(target.model, prompt, 20, set())


def test_cancel_before_start_runs_no_decode_forward(target):
    token = CancelToken()
    token.cancel()
    result = Engine(target, stop_token_ids=[]).generate([1, 2, 3], max_new_tokens=50, cancel=token)
    assert result.finish_reason == "cancelled"
    assert result.stats.target_forwards == 0
    assert result.token_ids == []


def test_time_limit(target):
    engine = Engine(target, stop_token_ids=[], step_delay_s=0.02)
    result = engine.generate([5, 6, 7], max_new_tokens=10_000, max_time_s=0.1)
    assert result.finish_reason == "time"
    assert 0 < len(result.token_ids) < 100


def test_stream_text_concatenates_to_result_and_stop_callback_cuts(target, tokenizer):
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    prompt = tokenizer.encode("def f():\n    return 1\n")
    full = engine.generate(prompt, max_new_tokens=60)
    cut_at = len(full.text) // 2
    events = list(engine.stream(prompt, max_new_tokens=60, stop=lambda text: cut_at if len(text) >= cut_at else None))
    result = events[-1].result
    assert result.finish_reason == "stop"
    assert result.text == full.text[:cut_at]
    assert "".join(e.text for e in events) == result.text
    streamed = list(engine.stream(prompt, max_new_tokens=60))
    assert "".join(e.text for e in streamed) == full.text == tokenizer.decode(full.token_ids)


def test_multibyte_characters_are_never_split_in_the_stream(target, tokenizer):
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    text = "# π ≈ 3.14159 😀 — ok"
    tokens = tokenizer.encode(text)  # byte-level: the emoji is four tokens
    shown = [engine._decode_text(tokens[:n]) for n in range(len(tokens) + 1)]
    for n, prefix in enumerate(shown):
        assert text.startswith(prefix), n
    assert "\ufffd" not in "".join(shown)
    # Random output is full of invalid byte sequences; the stream still only ever appends.
    events = list(engine.stream(tokens, max_new_tokens=60))
    final = events[-1].result.text
    streamed = ""
    for event in events:
        streamed += event.text
        assert final.startswith(streamed)
    assert streamed == final == tokenizer.decode(events[-1].result.token_ids)


def test_bad_input_is_a_clear_error(target, draft):
    engine = Engine(target, stop_token_ids=[])
    with pytest.raises(CodespecError, match="empty prompt"):
        engine.generate([])
    with pytest.raises(CodespecError, match="context window"):
        engine.generate([1] * 10, max_new_tokens=target.model.config.max_position_embeddings)
    with pytest.raises(CodespecError, match="needs a draft model"):
        Engine(target, drafting="model")
    with pytest.raises(CodespecError, match="does not share the target's tokenizer"):
        Engine(target, tiny_model(3, vocab_size=16), drafting="model")
    with pytest.raises(CodespecError, match="unknown drafting"):
        Engine(target, drafting="fast")
    # The engine still works after errors.
    assert Engine(target, Bundle(draft.model, draft.tokenizer), drafting="both", stop_token_ids=[]).generate(
        [1, 2], max_new_tokens=3
    ).token_ids == reference_greedy(target.model, [1, 2], 3, set())


def test_stop_strings_across_token_boundaries(target, tokenizer):
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    prompt = tokenizer.encode("x = 1\n")
    full = engine.generate(prompt, max_new_tokens=40).text
    needle = full[10:13]  # three byte-tokens: the stop string spans token boundaries
    result = engine.generate(prompt, max_new_tokens=40, stop=stop_at_strings(["never-there", needle]))
    assert result.finish_reason == "stop"
    assert result.text == full[: full.find(needle)]
