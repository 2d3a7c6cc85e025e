"""Pinned context blocks per document and the idle-time work that keeps them fresh and their KV computed.

The anchored layout (codespec/context/block.py) puts a document's snapshot first in every prompt. This
module decides which snapshot a request uses and when a new one is made:
- a request uses the document's pinned block only if its KV is cached (else the prompt is the cursor window
  alone, `COLD`): a request never waits for a block to be prefilled;
- when the model worker is idle, the block is remade from the document as it is now (when the document
  changed since, or the cursor left the lines a large file's block shows) and the prompt at the last cursor
  is prefilled in small chunks, each of which a request pre-empts; once complete, the new block is pinned.
A remote engine (no prefill of its own) pins a block at once and refreshes it after `REMOTE_REFRESH_EDITS`
edits: the engine's own prompt cache keeps its KV.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codespec.decode.api import CompletionEngine

logger = logging.getLogger("codespec.lsp")

MAX_PINNED = 32  # documents with a pinned block (least recently used dropped)
REMOTE_REFRESH_EDITS = 64


@dataclass
class IdleCounters:
    jobs: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    prefilled_tokens: int = 0
    blocks_pinned: int = 0
    cold_prompts: int = 0  # requests answered without a block, its KV not computed yet

    def to_dict(self) -> dict[str, int]:
        return {_camel(name): value for name, value in dataclasses.asdict(self).items()}


@dataclass
class IdleJob:
    """Prefill `prompt_ids`; when complete, pin `block` for `uri` (None: the pinned one was only re-warmed)."""

    uri: str
    prompt_ids: list[int]
    block: Any
    token: Any  # codespec.decode.api.CancelToken


class BlockPlanner:
    def __init__(self) -> None:
        self.pinned: OrderedDict[str, Any] = OrderedDict()  # uri -> FileBlock
        self.counters = IdleCounters()
        self.budget: Any = None  # PromptBudget, set once the engine is loaded
        self.running: IdleJob | None = None

    # ----- budget ----------------------------------------------------------------------------------

    def set_budget(self, engine: CompletionEngine) -> Any:
        from codespec.context.block import DEFAULT_BUDGET, prompt_budget

        rate = engine.prefill_tokens_per_s()
        limit = engine.max_positions or 4096
        points = engine.cost_points()
        self.budget = prompt_budget(rate, max_prompt_tokens=limit, cost_points=points) if rate else DEFAULT_BUDGET
        return self.budget

    def configure(self, config: Any) -> Any:
        """The context config with this machine's window and block budgets."""
        if self.budget is None:
            return config
        return dataclasses.replace(config, window_tokens=self.budget.window_tokens,
                                   block_tokens=self.budget.block_tokens)

    # ----- requests --------------------------------------------------------------------------------

    def block_for(self, uri: str, engine: CompletionEngine, doc: Any, line: int) -> Any:
        """The block a request at `line` uses: the pinned one (its KV checked by `usable`), COLD when there
        is none yet (a local engine computes one in idle time), or a new one pinned at once (remote)."""
        from codespec.context.build import COLD

        block = self.pinned.get(uri)
        if block is not None:
            self.pinned.move_to_end(uri)
        if engine.prefills_ahead:
            return block if block is not None else COLD
        stale = doc.edit_count - block.edit_count > REMOTE_REFRESH_EDITS if block is not None else True
        if stale or not block.at_hole(line, doc.line_count):
            return None  # build_context makes one from the document now; `remember` pins it
        return block

    def remember(self, uri: str, block: Any) -> None:
        if block is not None and self.pinned.get(uri) is not block:
            self.pin(uri, block)

    def usable(self, ctx: Any, engine: CompletionEngine) -> bool:
        """Whether a prompt's pinned part is cached (or nearly: at most half a cursor window to compute)."""
        if ctx.block is None or not engine.prefills_ahead:
            return True
        missing = ctx.pinned_tokens - min(engine.cached_prefix(ctx.prompt_ids), ctx.pinned_tokens)
        return missing <= (self.budget.window_tokens // 2 if self.budget else 0)

    def pin(self, uri: str, block: Any) -> None:
        self.pinned[uri] = block
        self.pinned.move_to_end(uri)
        while len(self.pinned) > MAX_PINNED:
            self.pinned.popitem(last=False)
        self.counters.blocks_pinned += 1

    def forget(self, uri: str) -> None:
        self.pinned.pop(uri, None)

    # ----- idle time -------------------------------------------------------------------------------

    def idle_job(self, doc: Any, position: tuple[int, int], engine: CompletionEngine,
                 build: Callable[[Any, tuple[int, int], Any], Any]) -> IdleJob | None:
        """The work worth doing now for the document the user is in, or None: a new block when the document
        changed since its block was made or the cursor left the block's hole, else the current block's
        prompt at the cursor when its KV is not cached."""
        from codespec.decode.api import CancelToken

        if not engine.prefills_ahead or self.budget is None:
            return None
        uri, line = doc.uri, position[0]
        block = self.pinned.get(uri)
        fresh = block is None or block.edit_count != doc.edit_count or not block.at_hole(line, doc.line_count)
        ctx = build(doc, position, None if fresh else block)  # None: a block made from the document now
        if ctx.mode == "none" and 0 <= line < doc.line_count:
            # No suggestion there (e.g. inside a word): the prompt at the end of the line has the same block.
            end = doc.position_at(doc.line_start(line) + len(doc.line_text(line)))
            ctx = build(doc, end, None if fresh else block)
        block_made = ctx.block if fresh and ctx.mode != "none" else None
        if ctx.mode == "none" or not ctx.prompt_ids:
            return None
        if engine.cached_prefix(ctx.prompt_ids) >= len(ctx.prompt_ids) - 1:
            if block_made is not None:
                self.pin(uri, block_made)  # already computed (e.g. an edit undone)
            return None
        return IdleJob(uri, list(ctx.prompt_ids), block_made, CancelToken())

    def run(self, job: IdleJob, engine: CompletionEngine) -> bool:
        """Worker thread: the job's prefill; True when it completed."""
        self.counters.jobs += 1
        try:
            # A request that arrives during a chunk waits for it: chunks sized from the cost curve.
            done = engine.prefill(job.prompt_ids, cancel=job.token, chunk=self.budget.idle_chunk_tokens)
        except Exception:
            logger.exception("idle-time prefill failed")
            self.counters.failed += 1
            return False
        self.counters.prefilled_tokens += done
        if job.token.cancelled:
            self.counters.cancelled += 1
            return False
        self.counters.completed += 1
        return True

    def finished(self, job: IdleJob, complete: bool) -> None:
        """Event loop: a completed job's block becomes the document's pinned block."""
        if self.running is job:
            self.running = None
        if complete and job.block is not None:
            self.pin(job.uri, job.block)

    def cancel_idle(self) -> None:
        if self.running is not None:
            self.running.token.cancel()

    def describe(self, kv: dict[str, Any] | None) -> dict[str, Any]:
        """`kv`: the engine's cached prompts (slots), from its `describe()`."""
        return {
            "budget": self.budget.to_dict() if self.budget else None,
            "pinned": [block.to_dict() for block in self.pinned.values()],  # least recently used first
            "idle": self.counters.to_dict(),
            "kv": kv,
        }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
