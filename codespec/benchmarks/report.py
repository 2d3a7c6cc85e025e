"""The parts every benchmark report shares: the machine line and in-place rewriting of docs/benchmarks.md.

What every benchmark's report shares: the machine in one line, and a section of docs/benchmarks.md
rewritten in place (between markers, so that each benchmark owns only its own sections)."""

from __future__ import annotations

from pathlib import Path


def with_markdown_section(text: str, key: str, body: str) -> str:
    """`text` with the block between `<!-- key:start -->` and `<!-- key:end -->` replaced by `body` (appended
    with its markers where the file has none); every line outside that block is left as it was."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        return text[: text.index(start)] + block + text[text.index(end) + len(end):]
    return text.rstrip() + "\n\n" + block + "\n"


def read_markdown(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"


def update_markdown_section(path: Path, key: str, body: str) -> None:
    """Replace the block between `<!-- key:start -->` and `<!-- key:end -->` (other sections are others')."""
    path.write_text(with_markdown_section(read_markdown(path), key, body), encoding="utf-8")


def portable(command: list[str] | str) -> str:
    """A command line as a report shows it: paths under the working directory relative to it, the home
    directory as ~, so a reader can run it on another machine (the development box's paths are no use)."""
    import shlex

    text = command if isinstance(command, str) else shlex.join(str(part) for part in command)
    cwd, home = str(Path.cwd()), str(Path.home())
    text = text.replace(f"{cwd}/", "")
    return text.replace(f"{home}/", "~/") if home not in ("", "/") else text


def machine_line(threads: int | None = None) -> str:
    """The machine in one line; `threads`: the target runtime's own (llama.cpp's), where not torch's."""
    import torch

    from codespec.decode.runtimes import machine_key

    return (f"{machine_key()}, torch {torch.__version__}, {threads or torch.get_num_threads()} threads, "
            f"{'cuda' if torch.cuda.is_available() else 'cpu'}")
