"""Synthesis: sessions turn before into after exactly, expectations are what gets typed, timing
follows the documented model and is deterministic per seed."""

from __future__ import annotations

import statistics
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pygls.workspace import TextDocument

from codespec.errors import CodespecError
from codespec.sessions.format import DID_CHANGE, INLINE_COMPLETION, TextBuffer, final_texts
from codespec.sessions.synth import (
    TimingModel,
    check_session,
    git_changes,
    keystrokes,
    stdlib_function_edit,
    synth_git_change,
    synth_session,
)

LINE = st.text(alphabet=st.sampled_from(list("ab (x):=\t 😀é")), max_size=12)
FILE = st.lists(LINE, max_size=8).flatmap(
    lambda lines: st.sampled_from(["\n", ""]).map(lambda end: "\n".join(lines) + (end if lines else ""))
)


def synth(before: str, after: str, seed: int = 0, timing: TimingModel | None = None):
    return synth_session(
        before, after, uri="file:///t.py", language="python", source="t", seed=seed, timing=timing
    )


def pygls_text(session) -> str:
    """The final text as pygls's own document model applies the same changes (an independent check
    of every range in UTF-16 units)."""
    opened = session.events[0].params["textDocument"]
    doc = TextDocument(opened["uri"], opened["text"], version=1)
    for event in session.events:
        if event.method == DID_CHANGE:
            (change,) = event.params["contentChanges"]
            rng = change["range"]
            doc.apply_change(
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        types.Position(rng["start"]["line"], rng["start"]["character"]),
                        types.Position(rng["end"]["line"], rng["end"]["character"]),
                    ),
                    text=change["text"],
                )
            )
    return doc.source


@settings(max_examples=120, deadline=None)
@given(before=FILE, after=FILE, seed=st.integers(0, 3))
def test_applying_the_edits_to_before_gives_after(before, after, seed):
    session = synth(before, after, seed)  # runs check_session itself
    assert final_texts(session) == {"file:///t.py": after}
    assert pygls_text(session) == after


def test_the_checker_rejects_a_session_that_does_not_reach_after():
    session = synth("def f():\n    pass\n", "def f():\n    return 1\n")
    check_session(session, "def f():\n    pass\n", "def f():\n    return 1\n")
    with pytest.raises(CodespecError, match="does not give after"):
        check_session(session, "def f():\n    pass\n", "def f():\n    return 2\n")
    with pytest.raises(CodespecError, match="before text"):
        check_session(session, "def g():\n    pass\n", "def f():\n    return 1\n")
    keystroke = next(
        e for e in session.events if e.method == DID_CHANGE and e.params["contentChanges"][0]["text"]
    )
    keystroke.params["contentChanges"][0]["text"] = "Z"
    with pytest.raises(CodespecError):
        check_session(session, "def f():\n    pass\n", "def f():\n    return 1\n")


def test_keystrokes_follow_auto_indent():
    assert keystrokes("    if x:\n        y = 1\n\n    z") == [
        "    ", "i", "f", " ", "x", ":", "\n        ", "y", " ", "=", " ", "1", "\n", "\n    ", "z",
    ]  # fmt: skip
    assert "".join(keystrokes("\tab\n\t\tc\n")) == "\tab\n\t\tc\n"


def test_expect_is_what_the_user_types_next():
    after = "def area(r):\n    pi = 3.14159\n    return pi * r * r\n"
    session = synth("", after, timing=TimingModel(typo_rate=0.2))  # plenty of typos
    buf = TextBuffer("")
    with_expect = 0
    for event in session.events:
        if event.method == DID_CHANGE:
            (change,) = event.params["contentChanges"]
            buf.apply(change["range"], change["text"])
        elif event.method == INLINE_COMPLETION:
            pos = event.params["position"]
            cursor = buf.offset_at(pos["line"], pos["character"])
            if event.expect is None:  # only right after a typo, which the next keystroke erases
                assert not after.startswith(buf.text[:cursor])
                continue
            with_expect += 1
            assert buf.text[:cursor] == after[:cursor]
            rest = event.expect["line_rest"] + (
                "\n" + event.expect["next_lines"] if event.expect["next_lines"] else ""
            )
            assert after[cursor:].startswith(rest)
            assert "\n" not in event.expect["line_rest"]
    assert with_expect >= len(keystrokes(after))


def long_session(seed: int, lines: int = 120):
    text = "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, lines))
    return synth("def f():\n", "def f():\n" + text, seed=seed), text


def gaps(session) -> list[float]:
    times = [e.t for e in session.events if e.method == DID_CHANGE]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_timing_statistics_follow_the_model():
    session, text = long_session(seed=1)
    all_gaps = gaps(session)
    key_gaps = [g for g in all_gaps if g <= TimingModel().key_max_s]
    assert 0.17 <= statistics.median(key_gaps) <= 0.21  # ~190 ms median key gap
    assert 0.20 <= statistics.mean(key_gaps) <= 0.26  # ~231 ms mean: about 52 words per minute
    lines = text.count("\n")
    pauses = [g for g in all_gaps if g > TimingModel().key_max_s]
    assert 0.22 * lines <= len(pauses) <= 0.45 * lines  # about a third of line starts
    assert 1.1 <= statistics.median(pauses) <= 1.9  # ~1.35 s think pauses
    typos = sum(
        1 for e in session.events if e.method == DID_CHANGE and e.params["contentChanges"][0]["text"] == ""
    )
    typed_chars = sum(1 for k in keystrokes(text) if not k.isspace())
    assert 0.01 * typed_chars <= typos <= 0.035 * typed_chars  # ~2 %, each one backspace
    first_change = next(e for e in session.events if e.method == DID_CHANGE)
    assert 0.8 <= first_change.t <= 3.0  # navigating to the hunk: ~1.5 s


def test_timing_is_deterministic_per_seed():
    a, _ = long_session(seed=7, lines=30)
    b, _ = long_session(seed=7, lines=30)
    c, _ = long_session(seed=8, lines=30)
    assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
    assert [e.t for e in a.events] != [e.t for e in c.events]
    assert final_texts(a) == final_texts(c)


def test_deleted_lines_go_in_one_edit_before_typing():
    session = synth("a\nold one\nold two\nz\n", "a\nnew\nz\n")
    changes = [e.params["contentChanges"][0] for e in session.events if e.method == DID_CHANGE]
    assert changes[0]["text"] == "" and changes[0]["range"]["start"] == {"line": 1, "character": 0}
    assert changes[0]["range"]["end"] == {"line": 3, "character": 0}
    assert all(len(c["text"]) <= 1 or c["text"].startswith("\n") for c in changes[1:])


def test_stdlib_edit_removes_the_body_and_keeps_the_docstring():
    edit = stdlib_function_edit("bisect.py", "insort_right")
    assert '"""Insert item x in list a' in edit.before
    assert (
        "a.insert(lo, x)" in edit.after and "a.insert(lo, x)" not in edit.before.split("def bisect_right")[0]
    )
    with pytest.raises(CodespecError, match="no function"):
        stdlib_function_edit("bisect.py", "no_such_function")


def git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_git_history_gives_one_checked_session_per_modest_file_change(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "m.py").write_text("def f():\n    return 1\n")
    (tmp_path / "README.md").write_text("not source\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    (tmp_path / "m.py").write_text("def f():\n    return 2\n\n\ndef g():\n    return f()\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 100)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "two")
    changes = list(git_changes(tmp_path, max_changed_lines=20))
    assert [(c.path, c.changed_lines) for c in changes] == [("m.py", 6), ("m.py", 2)]
    newest = synth_git_change(changes[0], repo_name="t")
    assert final_texts(newest) == {
        newest.events[0].uri: "def f():\n    return 2\n\n\ndef g():\n    return f()\n"
    }
    assert newest.events[0].params["textDocument"]["text"] == "def f():\n    return 1\n"
    assert len(list(git_changes(tmp_path, commits=1))) == 1
    assert list(git_changes(tmp_path, one_file_only=True)) == [changes[1]]
