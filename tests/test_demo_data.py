"""`codespec demo`'s session ships as package data: an installed codespec has it, not only a checkout."""

from __future__ import annotations

import tomllib
from pathlib import Path

from codespec.demo import DEFAULT_SESSION, load_demo_session

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_session_loads_and_is_the_corpus_one():
    session = load_demo_session(None)
    assert session.keystrokes() > 50 and session.duration > 0
    corpus = ROOT / "tests" / "sessions" / "data" / DEFAULT_SESSION
    assert (ROOT / "codespec" / "data" / DEFAULT_SESSION).read_bytes() == corpus.read_bytes()


def test_pyproject_ships_the_data_folder():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["codespec"]
    assert any(Path("data", DEFAULT_SESSION).match(pattern) for pattern in patterns), patterns
