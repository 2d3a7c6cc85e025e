"""Completion context: turns an edited document and cursor into a prompt, stop rules and cleaned-up text.

Documents kept in step with edits, mode decision, prompt, stop rules and
post-processing (contracts in docs/design.md)."""

from codespec.context.build import CompletionContext, ContextCache, ContextConfig, build_context
from codespec.context.document import Document
from codespec.context.postprocess import FILTERS, postprocess

__all__ = [
    "FILTERS",
    "CompletionContext",
    "ContextCache",
    "ContextConfig",
    "Document",
    "build_context",
    "postprocess",
]
