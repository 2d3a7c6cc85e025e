"""Completion context: documents kept in step with edits, mode decision, prompt, stop rules and
post-processing (contracts in docs/design.md)."""

from codespec.context.document import Document

__all__ = ["Document"]
