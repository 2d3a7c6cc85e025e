import json
import subprocess
import sys

from codespec.tiny import tiny_tokenizer
from tests.engine.conftest import reference_greedy


def run_cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codespec.cli", *args], capture_output=True, text=True,
                          input=input, timeout=120, env={"OMP_NUM_THREADS": "1", "PATH": ""})


def test_generate_json_matches_plain_greedy_for_every_drafting_mode(tmp_path):
    from codespec.tiny import tiny_model

    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
    path = tmp_path / "prompt.py"
    path.write_text(prompt)
    tokenizer = tiny_tokenizer()
    from codespec.models import stop_token_ids

    expected = reference_greedy(tiny_model(0), tokenizer.encode(prompt), 24, set(stop_token_ids(tokenizer)))
    for drafting in ("none", "lookup", "both"):
        args = ["generate", "--prompt-file", str(path), "--max-tokens", "24", "--model", "tiny", "--json",
                "--drafting", drafting]
        if drafting == "both":
            args += ["--draft-model", "tiny:1"]
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert set(out) >= {"text", "token_ids", "stats"}
        assert out["token_ids"] == expected
        assert out["text"] == tokenizer.decode(expected)
        stats = out["stats"]
        for key in ("prefill_tokens", "target_forwards", "drafted", "accepted", "tokens_per_forward", "prefill_s",
                    "decode_s"):
            assert key in stats
        assert stats["prefill_tokens"] == len(tokenizer.encode(prompt))
        if drafting == "none":
            stopped_by_eos = out["finish_reason"] == "eos"  # that forward produced the stop token
            assert stats["drafted"] == 0
            assert stats["target_forwards"] == len(expected) + stopped_by_eos


def test_generate_bad_input_is_one_clear_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    for args, message in [
        (["--prompt-file", str(tmp_path / "missing.txt")], "prompt file not found"),
        (["--prompt-file", str(empty)], "empty prompt"),
        (["--prompt-file", "-", "--model", "no-such-model-spec!"], "model"),
        (["--prompt-file", "-", "--model", "tiny", "--drafting", "model"], "draft"),
    ]:
        proc = run_cli("generate", *args, "--max-tokens", "4", input="x = 1\n")
        assert proc.returncode != 0
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert lines and message in lines[-1].lower(), proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stdout == ""


def test_the_old_flag_spelling_still_works_and_says_it_is_deprecated(tmp_path):
    path = tmp_path / "prompt.py"
    path.write_text("def add(a, b):\n")
    new = run_cli("generate", "--prompt-file", str(path), "--max-tokens", "8", "--model", "tiny", "--json",
                  "--drafting", "none")
    old = run_cli("generate", "--prompt-file", str(path), "--max-tokens", "8", "--model", "tiny", "--json",
                  "--draft", "none")
    assert new.returncode == old.returncode == 0, old.stderr
    assert json.loads(old.stdout)["token_ids"] == json.loads(new.stdout)["token_ids"]
    assert json.loads(old.stdout)["stats"]["drafted"] == 0  # --draft none reached the engine as --drafting none
    assert "--draft is deprecated" in old.stderr and "use --drafting" in old.stderr
    assert "deprecated" not in new.stderr
