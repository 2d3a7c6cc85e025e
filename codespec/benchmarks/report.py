"""The parts every benchmark report shares: the machine line and in-place rewriting of docs/benchmarks.md.

What every benchmark's report shares: the machine in one line, and a section of docs/benchmarks.md
rewritten in place (between markers, so that each benchmark owns only its own sections)."""

from __future__ import annotations

from pathlib import Path


def update_markdown_section(path: Path, key: str, body: str) -> None:
    """Replace the block between `<!-- key:start -->` and `<!-- key:end -->` (other sections are others')."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def machine_line(threads: int | None = None) -> str:
    """The machine in one line; `threads`: the target runtime's own (llama.cpp's), where not torch's."""
    import torch

    from codespec.runtimes import machine_key

    return (f"{machine_key()}, torch {torch.__version__}, {threads or torch.get_num_threads()} threads, "
            f"{'cuda' if torch.cuda.is_available() else 'cpu'}")
