"""A stream copy's publisher sequences follow what its follower appends (no publish runs
there to update them): a few new records are read on the event loop, many in a worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.gateway.model.stream import queue as queue_module
from sievemq.gateway.model.stream.arguments import stream_arguments_from_table
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.publishers import publisher_tag
from sievemq.storage.types import KIND_STREAM


class _Leader:
    def store_offset(self, reference: str, offset: int) -> bool:
        return False


def _append(stream: Stream, ref: str, ids: range) -> None:
    stream.append([Message((), "", "", publisher_tag(ref, i), b"p", KIND_STREAM) for i in ids])


def _copy(tmp_path: Path) -> StreamQueue:
    stream = Stream.open(tmp_path / "copy", StreamConfig())
    queue = StreamQueue("s", "/", stream_arguments_from_table({}, "s", "/"), stream)
    queue.leader_of_copy = _Leader()
    return queue


def test_a_copy_s_sequences_catch_up_here_or_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _copy(tmp_path)
    _append(queue.stream, "p", range(1, 4))
    assert queue.current_sequences() is None  # never loaded: built in a worker
    loaded = queue.adopt_sequences(queue.sequences_builder()())
    assert queue.current_sequences() is loaded and loaded.get("p") == 3
    _append(queue.stream, "p", range(4, 6))  # a few: read on the loop
    assert queue.current_sequences() is loaded and loaded.get("p") == 5
    monkeypatch.setattr(queue_module, "CATCH_UP_HERE", 2)
    _append(queue.stream, "p", range(6, 10))  # more than CATCH_UP_HERE: a worker's
    assert queue.current_sequences() is None
    assert queue.adopt_sequences(queue.sequences_builder()()) is loaded
    assert loaded.get("p") == 9 and queue.current_sequences() is loaded
    queue.stream.close()


def test_a_node_s_own_stream_s_sequences_are_current_once_loaded(tmp_path: Path) -> None:
    stream = Stream.open(tmp_path / "own", StreamConfig())
    queue = StreamQueue("s", "/", stream_arguments_from_table({}, "s", "/"), stream)
    _append(stream, "p", range(1, 3))
    assert queue.current_sequences() is None
    loaded = queue.publisher_sequences()
    assert queue.current_sequences() is loaded and loaded.get("p") == 2
    stream.close()
