"""The prompt-lookup index answers as a scan of its tokens would, through appends, truncations and syncs, and
leaves nothing for the garbage collector to walk (a full pass over a large index held the GIL ~0.2 s)."""

from __future__ import annotations

import gc
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from codespec.decode.drafters import LookupConfig, LookupDrafter, NgramIndex


def scanned(tokens: list[int], key: tuple[int, ...]) -> int | None:
    """The end of the latest occurrence of `key` that a token follows, by scanning."""
    n = len(key)
    ends = [end for end in range(n - 1, len(tokens) - 1) if tuple(tokens[end - n + 1 : end + 1]) == key]
    return ends[-1] if ends else None


operations = st.lists(
    st.one_of(st.tuples(st.just("extend"), st.lists(st.integers(0, 3), max_size=12)),
              st.tuples(st.just("truncate"), st.integers(0, 30)),
              st.tuples(st.just("sync"), st.lists(st.integers(0, 3), max_size=30))),
    max_size=12)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_find_equals_a_scan_after_any_edits(ops):
    index, tokens = NgramIndex(2, 4), []
    for op, arg in ops:
        if op == "extend":
            index.extend(arg)
            tokens += arg
        elif op == "truncate":
            index.truncate(arg)
            tokens = tokens[:arg]
        else:
            index.sync(arg)
            tokens = list(arg)
        assert index.tokens == tokens
        for n in (2, 3, 4):  # every n-gram over the small alphabet, present or not
            for start in range(4**n):
                key = tuple((start // 4**i) % 4 for i in range(n))
                assert index.find(key) == scanned(tokens, key), (key, tokens)
    assert index.find((1,)) is None and index.find((0, 1, 2, 3, 0)) is None  # outside min_n..max_n


def test_a_large_index_leaves_nothing_for_the_collector():
    rng = random.Random(0)
    streams = [[rng.randrange(2000) for _ in range(15_000)] for _ in range(4)]  # four open files
    drafter = LookupDrafter(LookupConfig())
    gc.collect()
    before = len(gc.get_objects())
    drafter.begin(list(range(100)), streams)
    gc.collect()  # one pass stops tracking tuples (and dicts) that hold only ints
    assert len(gc.get_objects()) - before < 1_000  # a list per n-gram was ~300,000 here
