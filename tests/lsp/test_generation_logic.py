"""The pure parts of the generation manager: anchors, typing along, early answers."""

from __future__ import annotations

from lsp.completion import Anchor, Generation, first_line
from lsp.stats import GenerationRecord, ServerStats, percentile


class Token:
    cancelled = False


class Ctx:
    pass


def generation(text: str, *, done: bool, anchor_text: str = "x = \ny = 2\n", offset: int = 4) -> Generation:
    return Generation(
        id=1,
        kind="request",
        anchor=Anchor(uri="file:///a.py", version=1, text=anchor_text, offset=offset),
        ctx=Ctx(),
        prompt_ids=[],
        token=Token(),  # a fresh one per generation
        record=GenerationRecord(id=1, kind="request"),
        position=(0, 4),
        text=text,
        done=done,
    )


def identity(text: str, ctx: object) -> str:
    return text


def test_typed_since_requires_an_insertion_at_the_anchor_cursor():
    g = generation("compute(1)", done=True)
    assert g.typed_since("x = \ny = 2\n", 4) == ""
    assert g.typed_since("x = com\ny = 2\n", 7) == "com"
    assert g.typed_since("x = com\ny = 2\n") == "com"  # cursor inferred
    assert g.typed_since("x = com\ny = 2\n", 6) is None  # cursor elsewhere
    assert g.typed_since("z = com\ny = 2\n", 7) is None  # text before the cursor changed
    assert g.typed_since("x = com\ny = 3\n", 7) is None  # text after the cursor changed
    assert g.typed_since("x =\ny = 2\n", 3) is None  # deletion


def test_consistent_with_typed_prefix_of_the_suggestion():
    done = generation("compute(1)", done=True)
    assert done.consistent_with("comp", postprocess=identity)
    assert not done.consistent_with("cmp", postprocess=identity)
    assert not done.consistent_with("compute(1)", postprocess=identity)  # nothing left to suggest
    running = generation("comp", done=False)
    assert running.consistent_with("co", postprocess=identity)
    assert not running.consistent_with("compu", postprocess=identity)  # typed past what exists
    cut_short = generation("compute(", done=True)
    cut_short.token.cancelled = True  # a cancelled generation's text is not a complete suggestion
    assert not cut_short.consistent_with("comp", postprocess=identity)


def test_early_answer_waits_for_a_complete_first_line():
    assert generation("\n    retu", done=False).suggestion(postprocess=identity, early=True) is None
    partial = generation("\n    return 1\n    pri", done=False)
    assert partial.suggestion(postprocess=identity, early=True) == "\n    return 1"
    assert partial.suggestion(postprocess=identity, early=False) is None
    assert generation("abc", done=True).suggestion(postprocess=identity, early=False) == "abc"


def test_first_line_keeps_leading_breaks_and_the_first_line_with_content():
    assert first_line("\n    return 1\n    x") == "\n    return 1"
    assert first_line("a + b") == "a + b"
    assert first_line("a\nb") == "a"


def test_stats_percentiles_and_counts():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5
    assert percentile(values, 90) == 90.1
    stats = ServerStats()
    report = stats.to_dict()
    assert report["requests"] == 0 and report["acceptanceRate"] is None and report["generations"]["tau"] is None
