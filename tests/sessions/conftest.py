from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codespec.sessions.format import DID_CHANGE, DID_CLOSE, Event, Session, read_session

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


def truncated(session: Session, keystrokes: int) -> Session:
    """The session's first `keystrokes` keystrokes (with their requests), then the document closes."""
    events, seen = [], 0
    for event in session.events:
        if event.method == DID_CHANGE:
            seen += 1
            if seen > keystrokes:
                break
        if event.method != DID_CLOSE:
            events.append(event)
    close = Event(events[-1].t + 0.5, DID_CLOSE, {"textDocument": {"uri": session.events[0].uri}})
    return Session(dict(session.header), [*events, close], session.path)
