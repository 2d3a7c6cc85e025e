"""Long, sure drafts from what the editor knows: a line the user re-types with one name or number changed.

Two cases share one rule. The line above (`x_train = data["train"]`) and the line being typed (`x_test = data["`):
the typed words follow the reference line word by word up to one substitution (`x_train` -> `x_test`, whose
changed core is `train` -> `test`), so the rest of the reference, with the same substitution, is a likely
continuation (`test"]`). The other reference is the suggestion that was on screen when the user typed a
different character or edited inside it: the old suggestion realigned to the new typing.

These are drafts, never output: the target verifies every token, so a wrong guess costs one verify."""

from __future__ import annotations

import re

WORD = re.compile(r"\w+|\s+|[^\w\s]")
MIN_PREDICTED = 2  # characters: shorter predictions are not worth a stream
LINES_ABOVE = 3  # reference lines looked at above the cursor (same indentation, nearest first)


def predict_rest(reference: str, typed: str) -> str | None:
    """The rest of `reference` as `typed` (a line up to the cursor) would continue it, or None when the typed
    words do not follow the reference up to at most one substitution."""
    if not typed.strip() or reference.startswith(typed) and len(reference) == len(typed):
        return None
    ref, cur = WORD.findall(reference), WORD.findall(typed)
    old_core = new_core = None
    for i, word in enumerate(cur):
        if i >= len(ref):
            return None
        expected = _substituted(ref[i], old_core, new_core)
        last = i == len(cur) - 1
        if word == expected:
            continue
        if last and expected.startswith(word):  # the cursor is inside this word: the reference finishes it
            rest = expected[len(word):] + _substituted("".join(ref[i + 1 :]), old_core, new_core)
            return rest if len(rest) >= MIN_PREDICTED else None
        if old_core is not None or last or not _same_kind(ref[i], word):
            return None  # a second change, or a word still being typed whose end is unknown
        old_core, new_core = _changed_core(ref[i], word)
        if not old_core:
            return None  # an insertion: nothing to substitute in the rest
    rest = _substituted("".join(ref[len(cur) :]), old_core, new_core)
    return rest if len(rest) >= MIN_PREDICTED else None


def repeat_line_predictions(lines_above: list[str], typed: str) -> list[str]:
    """Predicted rests of the cursor line from the nearest lines above with its indentation."""
    indent = typed[: len(typed) - len(typed.lstrip())]
    found: list[str] = []
    looked = 0
    for line in reversed(lines_above):
        if not line.strip():
            continue
        if line[: len(line) - len(line.lstrip())] != indent:
            if len(line) - len(line.lstrip()) < len(indent):
                break  # out of the enclosing block
            continue
        looked += 1
        rest = predict_rest(line, typed)
        if rest is not None and rest not in found:
            found.append(rest)
        if looked >= LINES_ABOVE:
            break
    return found


def realigned_suggestion(line_and_suggestion: str, typed: str) -> str | None:
    """An earlier suggestion (the line it was shown on, up to its anchor, followed by its text) realigned to
    the typed line: its first line through `predict_rest`, then the suggestion's further lines as they were."""
    first, newline, further = line_and_suggestion.partition("\n")
    rest = predict_rest(first, typed)
    if rest is None:
        return None
    return rest + newline + further


def _substituted(text: str, old: str | None, new: str | None) -> str:
    return text.replace(old, new) if old and new is not None else text


def _same_kind(a: str, b: str) -> bool:
    """A substitution swaps a name for a name, a number for a number: not a word for punctuation."""
    return bool(a and b) and (a[0].isalnum() or a[0] == "_") == (b[0].isalnum() or b[0] == "_") \
        and not a.isspace() and not b.isspace()


def _changed_core(old: str, new: str) -> tuple[str, str]:
    """The part of a word that changed: `x_train` -> `x_test` changed `train` to `test`."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return old[start : len(old) - end], new[start : len(new) - end]
