"""`codespec bench replay --parallel`: sessions at once, each through its own `codespec serve --engine`,
against one real llama-server: every request answered or cancelled, none answered after its cancel."""

from __future__ import annotations

import json

import pytest

from codespec.benchmarks.load import parse_counts
from codespec.cli import main
from codespec.errors import CodespecError
from tests.lsp.helpers import tiny_llama_server

ABOVE = "# Benchmarks\n\nHand-written text above.\n\n<!-- bench-replay-parallel:start -->\n"
BELOW = "<!-- bench-replay-parallel:end -->\n\nHand-written text below.\n\n<!-- bench-replay:start -->\nx\n" \
        "<!-- bench-replay:end -->\n"


def test_parallel_replay_against_one_engine(tmp_path, capsys):
    markdown = tmp_path / "bench.md"
    markdown.write_text(ABOVE + "the previous table\n" + BELOW, encoding="utf-8")
    with tiny_llama_server(tmp_path, slots=2) as url:
        code = main(["bench", "replay", "--parallel", "1,2", "--count", "2", "--speed", "max", "--model", "tiny",
                     "--engine", url, "--out", str(tmp_path), "--markdown", str(tmp_path / "bench.md")])
    assert code == 0
    data = json.loads((tmp_path / "bench-replay-parallel.json").read_text())
    assert [row["sessions"] for row in data["rows"]] == [1, 2]
    for row in data["rows"]:
        assert row["requests"] > 0
        assert row["items"] + row["null"] + row["cancelled"] == row["requests"]  # none missing, no errors
        assert row["answered_after_cancel"] == 0 and row["duplicate_responses"] == 0
    # Both counts replay the same sessions (one server after the other, or two at once): the same pauses.
    assert len(data["meta"]["sessions"]) == 2
    assert data["rows"][0]["pauses"]["count"] == data["rows"][1]["pauses"]["count"] > 0
    assert (tmp_path / "bench-replay-parallel.png").stat().st_size > 0
    # --markdown rewrites its own marked block only, with answered / cancelled counts per N as columns
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith(ABOVE + "## Shared engine load (replay --parallel)\n") and text.endswith(BELOW)
    assert "the previous table" not in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert header[5:7] == ["answered (items / null)", "cancelled"]
    for line, row in zip(table[1:], data["rows"], strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[0] == str(row["sessions"])
        assert cells[5] == f"{row['items'] + row['null']} ({row['items']} / {row['null']})"
        assert cells[6] == str(row["cancelled"])


@pytest.mark.parametrize("text", ["", "0,2", "two"])
def test_bad_counts(text):
    with pytest.raises(CodespecError, match="--parallel"):
        parse_counts(text)
