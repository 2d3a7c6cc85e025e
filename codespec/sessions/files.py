"""Write a command's output files only once all of them are ready, each one atomically.

A report, a records file and a plot that exist side by side are read as one complete run. So every file
is first written to a temporary name in its own directory (the same file system, so the rename is
atomic); only when every writer has succeeded are they renamed into place. A failure anywhere leaves the
previous files (or none) and no temporary behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

Writer = Callable[[Path], None]  # writes the whole file at the path it is given


def write_all(writers: Mapping[Path, Writer]) -> None:
    """Run each writer on a temporary file next to its target, then move them all into place."""
    ready: list[tuple[Path, Path]] = []
    try:
        for target, write in writers.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            # a name of our own rather than mkstemp's: the file gets the usual permissions (umask)
            temporary = target.with_name(f".{target.name}.{os.getpid()}-{len(ready)}.tmp")
            ready.append((temporary, target))
            write(temporary)
        for temporary, target in ready:
            os.replace(temporary, target)
    finally:
        for temporary, _ in ready:
            temporary.unlink(missing_ok=True)


def text_writer(text: str) -> Writer:
    return lambda path: path.write_text(text, encoding="utf-8")


def write_text(path: Path, text: str) -> None:
    """One text file, atomically."""
    write_all({path: text_writer(text)})
