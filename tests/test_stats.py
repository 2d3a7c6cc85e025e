import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codespec.stats import percentile

samples = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=2, max_size=50)


@given(samples, st.integers(min_value=1, max_value=99))
def test_percentile_equals_statistics_inclusive_quantiles_at_whole_q(values, q):
    assert percentile(values, q) == pytest.approx(statistics.quantiles(values, n=100, method="inclusive")[q - 1],
                                                  rel=1e-9, abs=1e-6)


@given(samples, st.floats(min_value=0, max_value=100), st.floats(min_value=0, max_value=100))
def test_percentile_is_monotone_in_q_and_within_the_data(values, q1, q2):
    low, high = sorted((q1, q2))
    assert min(values) <= percentile(values, low) <= percentile(values, high) + 1e-6 <= max(values) + 1e-6
    assert percentile(values, 0) == min(values) and percentile(values, 100) == max(values)


def test_percentile_of_no_data_is_none_and_q_out_of_range_is_an_error():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="0..100"):
        percentile([1.0], 101)
