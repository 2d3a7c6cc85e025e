"""The pinned context block: a file's snapshot and its neighbours, placed first so moving the cursor keeps its KV.

The "anchored" layout (ContextConfig.layout) splits the prompt in two. First the block: cross-file snippets
and the current file as it was when the block was made, within a token budget. It is a function of that
snapshot (and of the cursor line *when it was made*, for files larger than the budget), not of the live
cursor, so a jump elsewhere in the file, or back to a file whose block is still cached, re-prefills none of
it. Then the cursor window in the FIM part: a few lines above the cursor, the cursor line and the rest of
it after the FIM suffix marker. Only the window moves with the cursor; its size is what a jump costs.

The block goes stale as the user edits (the window shows the live text near the cursor); the server makes
a new one in idle time and only uses it once its KV is computed (lsp/blocks.py), so a request never waits
for a block to be prefilled. The budgets come from the machine's measured prefill speed (`PromptBudget`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from codespec.context.document import Document
from codespec.context.prompt import Snippet, TokenCache

# What a jump may re-prefill, as time: the cursor window is as many tokens as the machine prefills in this.
FIRST_SUGGESTION_DEADLINE_S = 0.5
# The block's size, as time: as many tokens as the machine prefills in this (in idle time, in chunks).
BLOCK_REFRESH_S = 10.0
MIN_WINDOW_TOKENS, MAX_WINDOW_TOKENS = 48, 512
MIN_BLOCK_TOKENS, MAX_BLOCK_TOKENS = 256, 3072
# Idle-time prefill runs in chunks a request may have to wait for: the largest measured forward within this.
IDLE_CHUNK_S = 0.35
DEFAULT_IDLE_CHUNK = 16
# Share of the block budget for other files' snippets (the rest is the current file).
NEIGHBOUR_SHARE = 0.25
# For a file over the block budget: share of the file part taken from above the cursor line.
ABOVE_SHARE = 0.7


@dataclass(frozen=True)
class PromptBudget:
    """How many tokens the cursor window (what a jump re-prefills) and the pinned block may hold, and why."""

    window_tokens: int
    block_tokens: int
    prefill_tokens_per_s: float | None = None
    why: str = "defaults (no measured prefill speed)"
    idle_chunk_tokens: int = DEFAULT_IDLE_CHUNK

    def to_dict(self) -> dict:
        return {"windowTokens": self.window_tokens, "blockTokens": self.block_tokens,
                "idleChunkTokens": self.idle_chunk_tokens,
                "prefillTokensPerS": None if self.prefill_tokens_per_s is None else round(self.prefill_tokens_per_s, 1),
                "why": self.why}


DEFAULT_BUDGET = PromptBudget(window_tokens=96, block_tokens=1280)


def prompt_budget(prefill_tokens_per_s: float | None, *, deadline_s: float = FIRST_SUGGESTION_DEADLINE_S,
                  refresh_s: float = BLOCK_REFRESH_S, max_prompt_tokens: int = 4096,
                  cost_points: tuple[tuple[int, float], ...] = ()) -> PromptBudget:
    """The budget from the measured prefill speed: a slow machine gets a smaller window and block, a GPU
    larger ones (within the model's context, leaving room for the window and the generation). `cost_points`
    (k, seconds of a forward over k tokens) size the idle-time chunk."""
    if not prefill_tokens_per_s or prefill_tokens_per_s <= 0:
        return DEFAULT_BUDGET
    window = int(min(max(prefill_tokens_per_s * deadline_s, MIN_WINDOW_TOKENS), MAX_WINDOW_TOKENS))
    ceiling = max(min(MAX_BLOCK_TOKENS, max_prompt_tokens - window - 512), MIN_BLOCK_TOKENS)
    block = int(min(max(prefill_tokens_per_s * refresh_s, MIN_BLOCK_TOKENS), ceiling))
    why = (f"prefill {prefill_tokens_per_s:.0f} tokens/s measured at load: a jump re-prefills the cursor window, "
           f"{window} tokens (~{deadline_s * 1000:.0f} ms, clamped to {MIN_WINDOW_TOKENS}-{MAX_WINDOW_TOKENS}); "
           f"the pinned block holds {block} tokens (~{refresh_s:.0f} s of idle-time prefill, at most {ceiling})")
    chunk = max((k for k, seconds in cost_points if seconds <= IDLE_CHUNK_S), default=DEFAULT_IDLE_CHUNK)
    why += f"; idle-time prefill in chunks of {chunk} tokens (the largest forward measured within {IDLE_CHUNK_S} s)"
    return PromptBudget(window, block, prefill_tokens_per_s, why, chunk)


@dataclass(frozen=True)
class FileBlock:
    """A document's snapshot as the pinned part of its prompts: the lines above and below the region of the
    cursor when it was made (the hole). The hole is left out because the cursor window shows it: a block
    showing the lines before the cursor followed by the old lines after it teaches the model to copy those
    old lines at the cursor (measured on HumanEval infilling: single-line pass@1 fell from 0.87 to 0.47)."""

    uri: str
    edit_count: int  # the document's edit_count when the snapshot was taken
    first_line: int  # shown: lines [first_line, hole_start) and [hole_end, last_line) of the snapshot
    hole_start: int
    hole_end: int
    last_line: int
    above: str
    below: str
    line_count: int  # the snapshot's lines
    neighbours: tuple[Snippet, ...] = ()
    budget_tokens: int = 0

    @property
    def whole_file(self) -> bool:
        return self.first_line == 0 and self.last_line >= self.line_count

    def at_hole(self, line: int, line_count: int) -> bool:
        """Whether a cursor on `line` (of a document of `line_count` lines now) is still in the hole: lines
        typed there since the snapshot move its end down."""
        grown = max(line_count - self.line_count, 0)
        return self.hole_start <= line < self.hole_end + grown + 1

    def to_dict(self) -> dict:
        return {"uri": self.uri, "editCount": self.edit_count, "lines": [self.first_line, self.last_line],
                "hole": [self.hole_start, self.hole_end], "chars": len(self.above) + len(self.below),
                "neighbours": len(self.neighbours), "budgetTokens": self.budget_tokens}


def make_block(doc: Document, cursor_line: int, tokens: TokenCache, budget_tokens: int,
               neighbours: Sequence[Snippet] = (), hole_tokens: int = 0) -> FileBlock:
    """The block for `doc` as it is now, the cursor on `cursor_line`: the lines above the hole (the lines
    just above the cursor, `hole_tokens` of them, and the cursor line, which the cursor window shows) and
    below it, within what `budget_tokens` leaves after the neighbour snippets; most of it above."""
    used_by_neighbours = sum(len(tokens.encode(s.text)) + 8 for s in neighbours)
    budget = max(budget_tokens - used_by_neighbours, 0)
    count = doc.line_count
    cursor_line = min(max(cursor_line, 0), count - 1)

    def cost(row: int) -> int:
        return tokens.count_line(doc.line_text(row))

    hole_start, spent = cursor_line, 0
    while hole_start > 0 and spent + cost(hole_start - 1) <= hole_tokens:
        hole_start -= 1
        spent += cost(hole_start)
    hole_end = cursor_line + 1
    # Grown from the hole outwards, so only the lines shown are ever counted (a huge file costs what its
    # block holds): most of the budget above, the rest below, then above again if the file ended below.
    first, last, used = hole_start, hole_end, 0
    while first > 0 and used + cost(first - 1) <= budget * ABOVE_SHARE:
        first -= 1
        used += cost(first)
    while last < count and used + cost(last) <= budget:
        used += cost(last)
        last += 1
    while first > 0 and used + cost(first - 1) <= budget:
        first -= 1
        used += cost(first)

    def lines(start: int, stop: int) -> str:
        return "\n".join(doc.line_text(row) for row in range(start, stop)).replace("\r", "")

    return FileBlock(doc.uri, doc.edit_count, first, hole_start, hole_end, last, lines(first, hole_start),
                     lines(hole_end, last), count, tuple(neighbours), budget_tokens)


def block_sections(path: str, block: FileBlock) -> list[tuple[str, str]]:
    """(title, text) of the block's file sections: the lines above the hole, then those below it (as the
    near-suffix layout shows the lines below the cursor)."""
    sections = []
    if block.above:
        above = path if block.first_line == 0 else f"{path} (lines {block.first_line + 1}-{block.hole_start})"
        sections.append((above, block.above))
    if block.below:
        sections.append((f"{path} (below the cursor)", block.below))
    return sections


def repo_name_of(path: str, configured: str = "") -> str:
    return configured or os.path.basename(os.path.dirname(path)) or "repo"
