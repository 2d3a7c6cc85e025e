from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codespec.sessions.format import read_session

DATA = Path(__file__).resolve().parent / "data"
FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_server.py")


def fake_server(*flags: str) -> list[str]:
    return [sys.executable, FAKE_SERVER, *flags]


@pytest.fixture(scope="session")
def corpus_paths() -> list[Path]:
    return sorted(DATA.glob("*.jsonl"))


@pytest.fixture(scope="session")
def small_sessions(corpus_paths):
    """The three shortest corpus sessions (by keystrokes): enough to replay in a few seconds."""
    sessions = [read_session(p) for p in corpus_paths]
    return sorted(sessions, key=lambda s: s.keystrokes())[:3]
