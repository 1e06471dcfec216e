"""``table_runs``: a stored chunk cut to a frame budget, each run itself a record table (the
stream protocol's stored-chunk Deliver for Spark's network mode)."""

from __future__ import annotations

import pytest

from sievemq.storage import StorageError
from sievemq.storage.chunk import HEADER_SIZE, decode_records, encode_chunk, table_runs

from .storage_helpers import msg


def _data(count: int) -> bytes:
    messages = [msg(b"x" * (10 + i), f"v{i % 3}", rk=f"k{i}") for i in range(count)]
    return b"".join(encode_chunk(messages, 100, 5, 16))[HEADER_SIZE + 16 :]


def test_runs_decode_to_the_records_of_the_chunk() -> None:
    data = _data(20)
    whole = decode_records(data, 20, 100, 5, 100, None, False)[0]
    assert table_runs(data, 20, 0, len(data)) == [(0, 20, data)]  # fits: the stored bytes
    runs = table_runs(data, 20, 3, 120)
    assert len(runs) > 2 and runs[0][0] == 3 and sum(n for _, n, _ in runs) == 17
    got = []
    for i, n, part in runs:
        assert len(part) <= 120 or n == 1
        got += decode_records(part, n, 100 + i, 5, 100 + i, None, False)[0]
    assert [(r.offset, r.body, r.routing_key, r.filter_values) for r in got] == [
        (r.offset, r.body, r.routing_key, r.filter_values) for r in whole[3:]
    ]


def test_a_bad_table_is_an_error() -> None:
    data = _data(4)
    with pytest.raises(StorageError, match="record table describes"):
        table_runs(data[:-1], 4, 1, 10)
