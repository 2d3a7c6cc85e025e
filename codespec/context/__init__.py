"""Completion context: turns an edited document and cursor into a prompt, stop rules and cleaned-up text.

Documents kept in step with edits, mode decision, prompt, stop rules and
post-processing (contracts in docs/design.md)."""

from codespec.context.build import CompletionContext, ContextCache, ContextConfig, build_context
from codespec.context.document import Document
from codespec.context.parsecheck import parse_checked, prefer_parsable
from codespec.context.postprocess import FILTERS, FilterContext, postprocess

__all__ = [
    "FILTERS",
    "CompletionContext",
    "ContextCache",
    "ContextConfig",
    "Document",
    "FilterContext",
    "build_context",
    "parse_checked",
    "postprocess",
    "prefer_parsable",
]
