"""The parse check: the one post-processing step that reads a live document and the clock, kept apart from the pure filters.

`postprocess` (postprocess.py) is a function of the raw text and the context's snapshot; this step is not: it
inserts the suggestion into a `Document` as it is when the answer is given, re-parses it within a time budget
and keeps the longest truncation (at line ends) that adds no syntax errors. Whoever answers calls it on the
text it is about to show, at the cursor of the document the request saw: the server on every answer (fresh,
cache, typed-along, prefetch; lsp/completion.py), one-shot callers through `parse_checked(text, ctx)`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codespec.context.build import CompletionContext
    from codespec.context.document import Document

# The whole check may take this many parse budgets; past it the longest candidate that passed so far wins.
DEADLINE_BUDGETS = 10


def _error_count(tree) -> int:
    """ERROR and MISSING nodes, visiting only subtrees that contain one."""
    if tree is None:
        return 0
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        stack.extend(child for child in node.children if child.has_error or child.is_missing)
    return count


def prefer_parsable(text: str, doc: Document | None, offset: int, *, budget_s: float, eol: str = "\n",
                    edit_count: int | None = None) -> str:
    """`text` (post-processed, line breaks `eol`) as inserted at `offset` of `doc`: the longest truncation at
    a line end that adds no syntax errors to the document, or the full text when none does. One-line text is
    returned as it is. Skipped (text returned) when the document has changed since `edit_count` (the offset
    would be stale) or its tree cannot be brought up to date within `budget_s`."""
    if doc is None or eol not in text.strip(eol) or (edit_count is not None and doc.edit_count != edit_count):
        return text
    tree = doc.tree_within(budget_s)
    if tree is None or not doc.tree_is_fresh:
        return text
    baseline = _error_count(tree)
    lines = text.split(eol)
    deadline = time.perf_counter() + DEADLINE_BUDGETS * budget_s
    for keep in range(len(lines), 0, -1):
        candidate = eol.join(lines[:keep]).rstrip()
        if not candidate.strip() or time.perf_counter() > deadline:
            break
        if _error_count(doc.parse_with_insertion(offset, candidate)) <= baseline:
            return candidate if keep < len(lines) else text
    return text


def parse_checked(text: str, ctx: CompletionContext) -> str:
    """`prefer_parsable` at the context's own document and cursor, for callers that post-process once right
    after building the context (benchmarks, `codespec complete`); skipped once the document has moved on."""
    return prefer_parsable(text, ctx.document, ctx.offset, budget_s=ctx.parse_budget_s, eol=ctx.eol,
                           edit_count=ctx.doc_edit_count)
