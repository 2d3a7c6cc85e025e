"""`codespec bench replay`: the variants' interleaved order, the report over any variant (LSP or not),
a short run through two fake servers, and bad input that must leave no output behind."""

from __future__ import annotations

import json

import pytest

from codespec.benchmarks.replay import (
    BASELINE,
    Variant,
    bench_replay_async,
    bench_report,
    ghost_percentile_table,
    paired_table,
    run_interleaved,
)
from codespec.cli import main
from codespec.sessions.files import text_writer, write_all
from codespec.sessions.format import Session, make_header
from codespec.sessions.replay import ReplayResult
from tests.sessions.conftest import fake_server, truncated
from tests.sessions.test_pauses import record


def session_named(name: str) -> Session:
    return Session(make_header(name, "python"), [])


def fake_variants(names: list[str], order: list[tuple[str, str]]) -> list[Variant]:
    """Variants that only note which session they were asked to play."""

    def make(name: str) -> Variant:
        async def play(session: Session) -> None:
            order.append((session.name, name))

        return Variant(name, play, ReplayResult(server=[name], speed=1.0))

    return [make(name) for name in names]


async def test_variants_play_session_by_session_in_rotating_order():
    order: list[tuple[str, str]] = []
    sessions = [session_named(f"s{i}") for i in range(1, 5)]
    await run_interleaved(sessions, fake_variants(["plain", "speculative"], order))
    assert order == [("s1", "plain"), ("s1", "speculative"), ("s2", "speculative"), ("s2", "plain"),
                     ("s3", "plain"), ("s3", "speculative"), ("s4", "speculative"), ("s4", "plain")]  # fmt: skip
    order.clear()
    three = ["plain", "speculative", "llama-server /infill"]
    await run_interleaved(sessions[:3], fake_variants(three, order))
    assert [name for _, name in order[:3]] == three  # session 1 in the given order
    assert [session for session, _ in order] == ["s1"] * 3 + ["s2"] * 3 + ["s3"] * 3
    for place in range(3):  # over three sessions every variant takes every place once
        assert sorted(order[3 * s + place][1] for s in range(3)) == sorted(three)


async def test_the_report_takes_any_variant_and_gives_pause_ratios_to_plain():
    """A variant that is not an LSP server (the hook for llama-server /infill): it fills ReplayedRequests."""

    def variant(name: str, answer: float) -> Variant:
        result = ReplayResult(server=[name], speed=1.0)

        async def play(session: Session) -> None:
            made = record(1, "x = ", key=1.0, answer=answer, shown="foo()", gap_ms=800, next_key=1.8)
            made.label = name
            result.records.append(made)
            result.keystrokes[name] = result.keystrokes.get(name, 0) + 1

        return Variant(name, play, result)

    variants = [variant(BASELINE, 1.4), variant("speculative", 1.1), variant("llama-server /infill", 1.2)]
    await run_interleaved([session_named("s1")], variants)
    report = bench_report(variants)
    assert list(report["variants"]) == [BASELINE, "speculative", "llama-server /infill"]
    assert report["variants"]["speculative"]["pauses"]["covered"] == 1
    ratios = report["ratios"]
    assert ratios["speculative/plain time to ghost text p50"] == pytest.approx(0.25)
    assert ratios["llama-server /infill/plain time to ghost text p50"] == pytest.approx(0.5)
    assert ratios["speculative/plain coverage"] == pytest.approx(1.0)
    assert ratios["speculative/plain typed next at pause"] is None  # no expect: nothing judged
    # Every percentile of the pauses, side by side, and the difference from plain's (ms).
    table = ghost_percentile_table(report["variants"])
    assert "| plain | 400 | 400 | 400 | 400 | 400 | 400 |" in table
    assert "| speculative | 100 | 100 | 100 | 100 | 100 | 100 |" in table
    assert "| speculative - plain | -300 | -300 | -300 | -300 | -300 | -300 |" in table
    # The same pause paired: both new answers (> 20 ms), speculation 300 ms sooner.
    paired = report["variants"]["speculative"]["paired_with_plain"]
    assert (paired["pauses"], paired["both_new"], paired["other_faster"], paired["other_slower"]) == (1, 1, 1, 0)
    assert paired["diff_ms"]["p50"] == pytest.approx(-300.0)
    assert "| speculative | 1 | 0 / 0 | 1 | 1 / 0 | -300 / -300 / -300 / -300 |" in paired_table(report["variants"])


async def test_a_short_interleaved_run_through_two_servers(small_sessions):
    sessions = [truncated(s, 6) for s in small_sessions[:2]]
    plain = fake_server("--delay", "0.005", "--suggestion", "plain")
    speculative = fake_server("--delay", "0.005", "--suggestion", "spec")
    report = await bench_replay_async(sessions, speculative, plain, speed=None, drain_timeout_s=30)
    assert list(report["variants"]) == ["plain", "speculative", "speculative cold"]
    for name, summary in report["variants"].items():
        assert summary["requests"] == sum(len(s.inline_requests()) for s in sessions)
        assert summary["keystrokes"] == sum(s.keystrokes() for s in sessions)
        assert summary["errors"] == summary["missing"] == summary["documents_mismatched"] == 0
        shown = {r.shown for r in report["results"][name].records if r.label == name}
        assert shown == {"plain" if name == "plain" else "spec"}
    # the speculative server played its two variants; plays are numbered in the order it played them
    spec = report["results"]["speculative"]
    played = [(r.session, r.label) for r in spec.records if r.keystroke_s is not None]
    assert list(dict.fromkeys(played)) == [(sessions[0].name, "speculative"), (sessions[0].name, "speculative cold"),
                                           (sessions[1].name, "speculative"), (sessions[1].name, "speculative cold")]  # fmt: skip
    assert "speculative/plain coverage" in report["ratios"]


BAD_SESSIONS = {
    "unknown-version": '{"format": "codespec-session", "version": 9, "source": "x", "language": "python"}\n',
    "not-json": '{"format": "codespec-session", "version": 1, "source": "x", "language": "python"}\n{"t": 0,\n',
    "bad-change": '{"format": "codespec-session", "version": 1, "source": "x", "language": "python"}\n'
    '{"t": 0, "send": {"method": "textDocument/didOpen", "params": {"textDocument": "file:///a.py"}}}\n',
}


@pytest.mark.parametrize("kind", sorted(BAD_SESSIONS))
def test_a_bad_session_is_one_line_on_stderr_and_no_output(tmp_path, capsys, kind, corpus_paths):
    bad = tmp_path / f"{kind}.jsonl"
    bad.write_text(BAD_SESSIONS[kind], encoding="utf-8")
    out = tmp_path / "out"
    server = " ".join(fake_server("--delay", "0.005"))
    # a good session first: nothing may be replayed or written before the bad one is found
    code = main(["replay", str(corpus_paths[0]), str(bad), "--server", server, "--speed", "max", "--json",
                 "--plot", str(out / "r.png"), "--records", str(out / "r.jsonl")])  # fmt: skip
    captured = capsys.readouterr()
    assert code != 0 and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and str(bad) in captured.err
    assert not out.exists()
    code = main(["bench", "replay", str(bad), "--out", str(out), "--markdown", str(out / "b.md")])
    captured = capsys.readouterr()
    assert code != 0 and len(captured.err.strip().splitlines()) == 1 and not out.exists()


def test_output_files_appear_all_at_once_or_not_at_all(tmp_path):
    def broken(path):
        path.write_text("half a plot")
        raise RuntimeError("the plot failed")

    (tmp_path / "old.json").write_text("the previous run")
    with pytest.raises(RuntimeError):
        write_all({tmp_path / "old.json": text_writer("new"), tmp_path / "plot.png": broken})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]  # no temporary left either
    assert (tmp_path / "old.json").read_text() == "the previous run"
    write_all({tmp_path / "old.json": text_writer("new"), tmp_path / "sub" / "r.jsonl": text_writer("x")})
    assert (tmp_path / "old.json").read_text() == "new" and (tmp_path / "sub" / "r.jsonl").read_text() == "x"


DOC_ABOVE = """# Benchmarks

## Moving around

Hand-written text above the report, with a table of its own:

| a | b |
|---|---|
| 1 | 2 |

"""
DOC_BELOW = """

Hand-written reading of the report below it, in the same `## ` section.

### A sub-heading someone wrote

<!-- bench-generate-some-model:start -->
another benchmark's table
<!-- bench-generate-some-model:end -->

## Shared engine load (replay --parallel)

<!-- bench-replay-parallel:start -->
the load table
<!-- bench-replay-parallel:end -->
"""


def bench_replay_with_fake_servers(monkeypatch, tmp_path, corpus_paths, markdown) -> None:
    """`codespec bench replay --markdown FILE` as `make bench` runs it, with two fake LSP servers in place of
    the real ones (the report, its files and the markdown are the command's own)."""
    import codespec.benchmarks.replay as replay

    real = replay.bench_replay

    def fake_bench_replay(sessions, speculative_server, plain_server, **kwargs):
        plain = fake_server("--delay", "0.005", "--suggestion", "plain")
        speculative = fake_server("--delay", "0.005", "--suggestion", "spec")
        return real([truncated(s, 6) for s in sessions], speculative, plain, **kwargs)

    monkeypatch.setattr(replay, "bench_replay", fake_bench_replay)
    code = main(["bench", "replay", str(corpus_paths[0]), "--count", "1", "--speed", "max", "--no-cold",
                 "--out", str(tmp_path / "out"), "--markdown", str(markdown)])  # fmt: skip
    assert code == 0


def test_markdown_rewrites_only_its_own_marked_section(monkeypatch, tmp_path, corpus_paths):
    markdown = tmp_path / "benchmarks.md"
    old_report = "<!-- bench-replay:start -->\n## An old report\n\nits old table\n<!-- bench-replay:end -->"
    markdown.write_text(DOC_ABOVE + old_report + DOC_BELOW, encoding="utf-8")
    bench_replay_with_fake_servers(monkeypatch, tmp_path, corpus_paths, markdown)
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith(DOC_ABOVE + "<!-- bench-replay:start -->\n")
    assert text.endswith("<!-- bench-replay:end -->" + DOC_BELOW)  # hand-written text and other markers kept
    section = text[len(DOC_ABOVE):-len(DOC_BELOW)]
    assert "old" not in section and "| plain | " in section and "| speculative | " in section
    assert section.count("<!-- bench-replay:start -->") == 1 and text.count("<!-- bench-replay:end -->") == 1


def test_markdown_without_markers_appends_the_section_and_keeps_the_file(monkeypatch, tmp_path, corpus_paths):
    markdown = tmp_path / "benchmarks.md"
    markdown.write_text(DOC_ABOVE + DOC_BELOW.lstrip("\n"), encoding="utf-8")
    bench_replay_with_fake_servers(monkeypatch, tmp_path, corpus_paths, markdown)
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith((DOC_ABOVE + DOC_BELOW.lstrip("\n")).rstrip() + "\n\n<!-- bench-replay:start -->\n")
    assert text.rstrip().endswith("<!-- bench-replay:end -->")


def test_control_column_is_plain_against_itself(monkeypatch, tmp_path, corpus_paths):
    """--control: a second plain server in the same interleaved run; its suggestions never differ from plain's
    here (one fake model), the speculative fake's always do, and both get ratios to plain."""
    import codespec.benchmarks.replay as replay

    real = replay.bench_replay
    seen: list[str] = []

    def fake_bench_replay(sessions, speculative_server, plain_server, **kwargs):
        seen.extend(name for name, _ in kwargs["others"])
        kwargs["others"] = [(name, fake_server("--delay", "0.005", "--suggestion", "plain"))
                            for name, _ in kwargs["others"]]
        report = real([truncated(s, 6) for s in sessions], fake_server("--delay", "0.005", "--suggestion", "spec"),
                      fake_server("--delay", "0.005", "--suggestion", "plain"), **kwargs)
        report["results"]["speculative"].generations.append({"id": 7, "prefillMs": 12.5})  # as a request log has it
        return report

    monkeypatch.setattr(replay, "bench_replay", fake_bench_replay)
    out = tmp_path / "out"
    code = main(["bench", "replay", str(corpus_paths[0]), "--count", "1", "--speed", "max", "--no-cold",
                 "--control", "--out", str(out)])  # fmt: skip
    assert code == 0 and seen == [replay.CONTROL]
    data = json.loads((out / "bench-replay.json").read_text())
    control, spec = data["variants"][replay.CONTROL], data["variants"]["speculative"]
    assert control["differs_from_plain"]["both"] > 0 and control["differs_from_plain"]["differ"] == 0
    assert spec["differs_from_plain"]["differ"] == spec["differs_from_plain"]["both"] > 0
    assert "differs_from_plain" not in data["variants"]["plain"]
    assert f"{replay.CONTROL}/plain coverage" in data["ratios"]
    lines = [json.loads(line) for line in (out / "bench-replay-generations.jsonl").read_text().splitlines()]
    assert {"variant": "speculative", "id": 7, "prefillMs": 12.5} in lines
