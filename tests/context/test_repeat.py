"""Drafts from what the editor knows (codespec/context/repeat.py): the line above re-typed with one change, and
an earlier suggestion realigned to what was typed since; and the streams the context hands to prompt lookup."""

from codespec.context.build import build_context
from codespec.context.document import Document
from codespec.context.repeat import predict_rest, realigned_suggestion, repeat_line_predictions
from codespec.tiny import tiny_tokenizer


def test_a_renamed_line_continues_with_the_rename_applied():
    assert predict_rest('x_train = data["train"]', 'x_test = data["') == 'test"]'
    assert predict_rest("self.foo = foo", "self.bar = ") == "bar"
    assert predict_rest("    a[0] = f(0, b0)", "    a[1] = f(") == "1, b1)"


def test_typing_inside_a_word_finishes_it_from_the_reference():
    assert predict_rest("result = compute(alpha, beta)", "result = comp") == "ute(alpha, beta)"


def test_no_prediction_without_a_single_clean_substitution():
    assert predict_rest("self.foo = foo", "self.ba") is None  # the changed word is still being typed
    assert predict_rest("x = compute(a, b)", "y = other(") is None  # two changes
    assert predict_rest("x = 1", "totally different line") is None
    assert predict_rest("x = a", "x = a") is None  # nothing left
    assert predict_rest("x = a + b", "   ") is None


def test_lines_above_are_searched_within_the_block_at_the_same_indentation():
    above = ["def f(data):", '    x_train = data["train"]', "    if x:", "        y = 1", ""]
    assert repeat_line_predictions(above, '    x_test = data["') == ['test"]']
    assert repeat_line_predictions(["class A:", "    x = 1", "def g():"], "    y = ") == []  # out of block


def test_an_old_suggestion_is_realigned_with_its_further_lines():
    shown = "    result = compute(alpha, beta)\n    return result"
    assert realigned_suggestion(shown, "    result = compute(gamma, ") == "beta)\n    return result"
    assert realigned_suggestion(shown, "    other = thing(") is None


def test_context_gives_lookup_a_prediction_that_starts_with_the_prompts_tail():
    tokenizer = tiny_tokenizer()
    text = 'def load(data):\n    x_train = data["train"]\n    x_test = data["\n    return 1\n'
    doc = Document("file:///t.py", "python", text, 1)
    ctx = build_context(doc, 2, len('    x_test = data["'), tokenizer=tokenizer,
                        recent_completions=('    x_test = data["test"][0]',))
    sources = {stream.source: stream for stream in ctx.extra_streams}
    assert set(sources) == {"suggestions", "repeat-line", "realigned"}
    predicted = sources["repeat-line"]
    anchor = len(predicted) - len(tokenizer.encode('test"]', add_special_tokens=False))
    assert predicted[:anchor] == ctx.prompt_ids[-anchor:]  # lookup matches it at the first step
    assert tokenizer.decode(predicted[anchor:]) == 'test"]'
    assert tokenizer.decode(sources["realigned"][anchor:]) == 'test"][0]'  # the old suggestion, realigned
