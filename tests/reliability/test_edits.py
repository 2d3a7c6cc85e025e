"""Edit sequences: the server's copy of a document equals a reference string model (a short run;
`make fuzz` checks >= 1,000 sequences through the real server)."""

from __future__ import annotations

from codespec.reliability.edits import reference_apply, reference_offset, run_edit_sequences


def at(line: int, character: int) -> dict[str, int]:
    return {"line": line, "character": character}


def test_reference_counts_utf16_units_and_lsp_line_breaks():
    text = "a😀b\r\nc\rd\ne"
    assert reference_offset(text, 0, 1) == 1 and reference_offset(text, 0, 3) == 2  # 😀 is 2 units
    assert reference_offset(text, 0, 2) == 1  # inside the pair: rounded down
    assert reference_offset(text, 0, 99) == 3  # clamped before "\r\n"
    assert reference_offset(text, 1, 0) == 5 and reference_offset(text, 2, 0) == 7  # lone "\r" ends a line
    assert reference_offset(text, 9, 0) == len(text)
    change = {"range": {"start": at(1, 1), "end": at(0, 3)}, "text": "X"}  # given end-first
    assert reference_apply(text, change) == "a😀X\rd\ne"


def test_document_matches_the_reference_in_process():
    report = run_edit_sequences(None, 150, seed=3)
    assert report.ok and report.local_sequences >= 150, report.failure


def test_server_text_matches_the_reference(shared):
    report = run_edit_sequences(shared, 40, seed=4)
    assert report.ok, report.failure
    assert report.server_sequences >= 40 and report.changes > 100
