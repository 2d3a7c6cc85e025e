"""`codespec context` / `codespec complete` with the tiny model (no weights)."""

import json

import pytest

from codespec.cli import main


@pytest.fixture()
def source(tmp_path):
    path = tmp_path / "calc.py"
    path.write_text("import math\n\n\ndef area(r):\n    \n\n\nprint(area(2))\n", encoding="utf-8")
    return path


def test_context_json(source, capsys) -> None:
    assert main(["context", f"{source}:5:5", "--json", "--model", "tiny", "--layout", "psm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"mode", "prompt", "prefix", "suffix", "language"} <= set(data)
    assert data["mode"] == "block" and data["language"] == "python"
    assert data["prefix"].endswith("def area(r):\n    ") and data["suffix"].startswith("\n\n\nprint(area(2))")
    assert data["prompt"].startswith("<|fim_prefix|>import math")


def test_context_near_suffix_layout(source, capsys) -> None:
    assert main(["context", f"{source}:5:5", "--json", "--model", "tiny", "--layout", "near-suffix", "--budget", "4000"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layout"] == "near-suffix" and "print(area(2))" in data["far_suffix"]
    assert data["near_suffix"] == "\n" and data["suffix"].startswith("\n\n\nprint(area(2))")
    assert "calc.py (below the cursor)\n" in data["prompt"]
    assert data["prompt"].endswith("def area(r):\n    <|fim_suffix|>\n<|fim_middle|>")


def test_context_text_output(source, capsys) -> None:
    assert main(["context", f"{source}:5:5", "--model", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "mode: block" in out and "stop rule: block" in out and "----- prompt -----" in out


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("{src}:99:1", "line 99 is past the end"),
        ("{src}:5:40", "column 40 is past the end of line 5"),
        ("{src}:0:1", "1-based"),
        ("{src}", "expected FILE:LINE:COL"),
        ("{missing}:1:1", "no such file"),
        ("{binary}:1:1", "looks binary"),
        ("{latin1}:1:1", "not UTF-8"),
        ("{huge}:1:1", "too large"),
    ],
)
def test_bad_input_is_a_clear_error(source, tmp_path, capsys, location: str, message: str) -> None:
    (tmp_path / "blob.py").write_bytes(b"x = 1\x00\x01\x02\n")
    (tmp_path / "latin1.py").write_bytes("café = 1\n".encode("latin-1"))
    with open(tmp_path / "huge.py", "wb") as handle:
        handle.truncate(10 * 1024 * 1024)
    paths = {
        "src": source,
        "missing": tmp_path / "nope.py",
        "binary": tmp_path / "blob.py",
        "latin1": tmp_path / "latin1.py",
        "huge": tmp_path / "huge.py",
    }
    assert main(["context", location.format(**paths), "--model", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("codespec: error:") and message in err


def test_unknown_extension_is_plain_text(tmp_path, capsys) -> None:
    path = tmp_path / "notes.weird"
    path.write_text("Remember to \n", encoding="utf-8")
    assert main(["context", f"{path}:1:13", "--json", "--model", "tiny"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["language"] == "plaintext" and data["mode"] == "line"


def test_complete_json_with_tiny_model(source, capsys) -> None:
    code = main(
        ["complete", f"{source}:5:5", "--json", "--model", "tiny", "--max-tokens", "6", "--threads", "1"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert {"text", "mode", "stats"} <= set(data)
    assert data["mode"] == "block" and isinstance(data["text"], str)
    assert data["stats"]["prefill_tokens"] > 0
    assert len(data["raw"]) <= 6 * 4  # at most max-tokens tokens of at most a few bytes each


def test_complete_none_mode(source, capsys) -> None:
    (source.parent / "id.py").write_text("value = 1\n", encoding="utf-8")
    assert main(["complete", f"{source.parent / 'id.py'}:1:3", "--json", "--model", "tiny"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "none" and data["text"] == "" and "identifier" in data["reason"]
