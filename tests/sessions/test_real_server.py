"""Replay corpus sessions through the real `codespec serve --stdio` with tiny random-weight models."""

from __future__ import annotations

import sys

from codespec.sessions.replay import replay_sessions, summarize
from tests.sessions.test_replay import assert_sound

TINY_SERVER = [sys.executable, "-m", "codespec.cli", "serve", "--stdio", "--model", "tiny",
               "--draft-model", "none", "--draft", "lookup", "--threads", "1"]  # fmt: skip


async def replay(sessions, **kwargs):
    result = await replay_sessions(sessions, TINY_SERVER, env={"OMP_NUM_THREADS": "1"}, **kwargs)
    result.sessions_played = sessions
    return result, summarize(result)


async def test_fast_typing_through_the_real_server(small_sessions):
    result, summary = await replay(small_sessions[:2], speed=8.0, drain_timeout_s=60.0)
    assert_sound(result, summary)
    assert summary["cancelled"] > 0 and summary["items"] > 0
    assert (
        isinstance(summary["server_stats"], dict)
        and summary["server_stats"]["requests"] == summary["requests"] + 1  # + the warm-up
    )


async def test_max_speed_through_the_real_server(small_sessions):
    result, summary = await replay(small_sessions[:1], speed=None, drain_timeout_s=60.0)
    assert_sound(result, summary)
    assert summary["cancelled"] == 0 and summary["answered"] == summary["requests"]
