"""State a server keeps for days must stay bounded by the work in flight, not grow with history."""

from __future__ import annotations

import tracemalloc

from lsp.stats import (
    ANSWERED,
    GENERATIONS_REMEMBERED,
    LATENCY_WINDOW,
    PREFILL_WINDOW,
    RECENT_REQUESTS,
    GenerationRecord,
    RequestRecord,
    ServerStats,
)


def serve(stats: ServerStats, count: int, start: int) -> None:
    """What the server records per request, in the order lsp/completion.py calls it: a generation starts
    (add_generation, still running), the request that it serves begins and is answered, and the generation
    finishes (finish_generation) after the answer (every other request: early answers) or before it."""
    for i in range(start, start + count):
        generation = GenerationRecord(id=i, kind="request")
        stats.add_generation(generation)
        record = RequestRecord(id=i, method="textDocument/inlineCompletion", uri="file:///a.py", line=i % 7,
                               source="model", generation=i)  # fmt: skip
        stats.begin_request(record)
        generation.finish_reason, generation.new_tokens, generation.target_forwards = "eos", 8, 4
        generation.prefill_tokens, generation.reused_tokens = 3, 500
        if i % 2:  # answered while its generation still runs: the prefill numbers come at its end
            stats.finish_request(record, ANSWERED, 12.5)
            stats.finish_generation(generation)
        else:
            stats.finish_generation(generation)
            stats.finish_request(record, ANSWERED, 12.5)
        assert record.prefill_tokens == 3 and record.reused_tokens == 500


def test_stats_memory_does_not_grow_with_the_number_of_requests():
    stats = ServerStats()
    warm = max(LATENCY_WINDOW, PREFILL_WINDOW) + 1000  # every window full before measuring
    # Traced from the start: the windows' contents are then counted before and after alike (traced from the
    # warm-up's end, records made before it and replaced after it would count as growth).
    tracemalloc.start()
    try:
        serve(stats, warm, 0)
        before = tracemalloc.get_traced_memory()[0]
        serve(stats, 20_000, warm)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    report = stats.to_dict()
    total = warm + 20_000
    assert report["requests"] == report["answered"] == total and report["pending"] == 0
    generations = report["generations"]
    assert generations["started"] == generations["finished"] == total
    assert generations["newTokens"] == 8 * total and generations["tau"] == 2.0
    # nothing in flight is left behind, and every window holds its bound, not the history
    assert not stats._live and not stats._held
    assert len(stats._finished) == GENERATIONS_REMEMBERED
    assert len(stats.recent) == len(stats.recent_generations) == RECENT_REQUESTS
    assert grown < 256 * 1024, f"{grown / 2**20:.1f} MB held for 20,000 more requests"
