"""State a server keeps for days must stay bounded by the work in flight, not grow with history."""

from __future__ import annotations

import tracemalloc

from lsp.stats import ANSWERED, GenerationRecord, RequestRecord, ServerStats


def serve(stats: ServerStats, count: int, start: int) -> None:
    """What the server records per request: the request, its generation, its outcome."""
    add_generation = getattr(stats, "add_generation", None) or stats.generations.append
    for i in range(start, start + count):
        record = RequestRecord(id=i, method="textDocument/inlineCompletion", uri="file:///a.py")
        stats.begin_request(record)
        add_generation(GenerationRecord(id=i, kind="request", finish_reason="eos", new_tokens=8, target_forwards=4))
        stats.finish_request(record, ANSWERED, 12.5)


def test_stats_memory_does_not_grow_with_the_number_of_requests():
    stats = ServerStats()
    serve(stats, 2000, 0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        serve(stats, 20_000, 2000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    report = stats.to_dict()
    assert report["requests"] == 22_000 and report["generations"]["started"] == 22_000
    assert grown < 256 * 1024, f"{grown / 2**20:.1f} MB held for 20,000 more requests"
