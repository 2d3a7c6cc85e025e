"""Test helpers: documents written with a cursor marker."""

from __future__ import annotations

from codespec.context import CompletionContext, ContextCache, ContextConfig, Document, build_context
from codespec.tiny import tiny_tokenizer

CURSOR = "┃"


def doc_at(source: str, language: str = "python", encoding: str = "utf-16") -> tuple[Document, int, int]:
    """A document from `source` with the cursor marker removed, and the marker's LSP position."""
    offset = source.index(CURSOR)
    doc = Document(f"file:///work/proj/t.{language}", language, source.replace(CURSOR, ""), encoding=encoding)
    line, character = doc.position_at(offset)
    return doc, line, character


def context_at(source: str, language: str = "python", **kwargs) -> CompletionContext:
    doc, line, character = doc_at(source, language, kwargs.pop("encoding", "utf-16"))
    kwargs.setdefault("cache", ContextCache())
    kwargs.setdefault("config", ContextConfig())
    return build_context(doc, line, character, tokenizer=tiny_tokenizer(), **kwargs)


def streamed(stop, text: str) -> str:
    """What generation keeps when `stop` is consulted after every character, as the engine does."""
    for end in range(1, len(text) + 1):
        keep = stop(text[:end])
        if keep is not None:
            return text[:end][:keep]
    return text
