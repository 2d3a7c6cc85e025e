"""Replay corpus sessions through the real `codespec serve --stdio` with tiny random-weight models."""

from __future__ import annotations

import sys

from codespec.sessions.metrics import summarize
from codespec.sessions.replay import Play, replay_sessions
from tests.sessions.conftest import truncated
from tests.sessions.test_replay import assert_sound

TINY_SERVER = [sys.executable, "-m", "codespec.cli", "serve", "--stdio", "--model", "tiny",
               "--draft-model", "none", "--drafting", "lookup", "--threads", "1"]  # fmt: skip


async def test_replay_through_the_real_server(small_sessions):
    """One server process: a session at 8x typing speed (most requests superseded), then one at max
    speed (every request answered, none cancelled)."""
    fast, calm = truncated(small_sessions[1], 80), truncated(small_sessions[0], 30)
    plays = [Play(fast, label="fast"), Play(calm, label="max", speed=None)]
    result = await replay_sessions(
        plays, TINY_SERVER, env={"OMP_NUM_THREADS": "1"}, speed=8.0, drain_timeout_s=60.0
    )
    for label, session in (("fast", fast), ("max", calm)):
        assert_sound(result, summarize(result, label), [session], label)
    fast_summary, max_summary = summarize(result, "fast"), summarize(result, "max")
    assert fast_summary["cancelled"] > 0 and fast_summary["items"] > 0
    assert max_summary["cancelled"] == 0 and max_summary["answered"] == max_summary["requests"]
    stats = result.server_stats
    assert isinstance(stats, dict) and stats["requests"] == len(result.records) + 1  # + the warm-up
