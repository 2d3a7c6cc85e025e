"""What llama.cpp and ik_llama.cpp write to stderr (the server's log): their errors, not their warnings or load
chatter; CODESPEC_LLAMA_LOG shows everything."""

from __future__ import annotations

import pytest

from codespec.decode.runtimes.llamacpp import stderr_log
from codespec.errors import CodespecError

DEBUG, INFO, WARN, ERROR, CONT = 1, 2, 3, 4, 5  # ggml.h's enum ggml_log_level


def test_errors_and_their_continuations_reach_stderr_warnings_do_not(capfd, monkeypatch):
    monkeypatch.delenv("CODESPEC_LLAMA_LOG", raising=False)
    log = stderr_log(b"x: ")
    for level, text in [(INFO, b"loading\n"), (WARN, b"free memory 0 MiB\n"), (CONT, b"warn detail\n"),
                        (ERROR, b"failed to read"), (CONT, b" tensor 3\n"), (DEBUG, b"dbg\n"), (ERROR, None)]:
        log(level, text, None)
    assert capfd.readouterr().err == "x: failed to readx:  tensor 3\n"


def test_codespec_llama_log_shows_everything(capfd, monkeypatch):
    monkeypatch.setenv("CODESPEC_LLAMA_LOG", "1")
    log = stderr_log(b"x: ")
    log(INFO, b"loading\n", None)
    log(WARN, b"careful\n", None)
    assert capfd.readouterr().err == "x: loading\nx: careful\n"


@pytest.mark.parametrize("module, cls", [("codespec.decode.runtimes.llamacpp", "LlamaCppRuntime"),
                                         ("codespec.decode.runtimes.ik_llamacpp", "IkLlamaCppRuntime")])
def test_a_truncated_gguf_logs_the_librarys_error(module, cls, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("CODESPEC_LLAMA_LOG", raising=False)
    runtimes = pytest.importorskip(module)
    from tests.tiny_gguf import write_tiny_gguf

    whole = write_tiny_gguf(tmp_path / "tiny.gguf", merges=True).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 2])
    capfd.readouterr()
    with pytest.raises(CodespecError):
        getattr(runtimes, cls)(cut, threads=1, context=128, slots=1)
    err = capfd.readouterr().err
    prefix = "ik_llama.cpp: " if "ik" in module else "llama.cpp: "
    # The library says why (an error-level line), and nothing below error level was let through.
    assert prefix in err and any(word in err.lower() for word in ("error", "fail")), err
    assert "warn" not in err.lower() and "loaded meta data" not in err, err
