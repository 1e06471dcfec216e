"""The descriptor cache: many streams, few descriptors; readers and writers reopen transparently."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.storage import Durability, Message, Stream, StreamConfig, handles


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def msg(body: bytes) -> Message:
    return Message((), "", "rk", b"\x00\x00", body)


@pytest.fixture
def small_cache() -> Iterator[handles.FileCache]:
    before = handles.shared.capacity
    handles.shared.set_capacity(8)
    yield handles.shared
    handles.shared.set_capacity(before)


def test_two_hundred_streams_stay_within_the_cache(
    tmp_path: Path, small_cache: handles.FileCache
) -> None:
    base = open_fds()
    streams = [Stream.open(tmp_path / f"s{i}", StreamConfig()) for i in range(200)]
    readers = []
    for round_ in range(3):
        for i, stream in enumerate(streams):
            stream.append([msg(f"{i}-{round_}".encode())])
            stream.offsets.set("c", round_)
    for stream in streams:
        readers.append(stream.reader())
    got = [[r.body for r in reader.read(10)] for reader in readers]
    assert got == [[f"{i}-{n}".encode() for n in range(3)] for i in range(200)]
    assert small_cache.open_count() <= 8
    assert open_fds() - base <= 8 + 2  # + the directory listing's own descriptor
    # everything goes on after the descriptors were taken away
    for i, stream in enumerate(streams):
        stream.append([msg(f"{i}-late".encode())])
    assert [reader.read(10)[0].body for reader in readers] == [
        f"{i}-late".encode() for i in range(200)
    ]
    for reader in readers:
        reader.close()
    for stream in streams:
        stream.close()
    assert small_cache.evictions > 0
    reopened = Stream.open(tmp_path / "s7", StreamConfig())
    assert reopened.offsets.get("c") == 2
    assert [r.body for r in reopened.reader().read(10)][-1] == b"7-late"
    reopened.close()


def test_a_reader_whose_segment_retention_removed_while_closed_goes_on(
    tmp_path: Path, small_cache: handles.FileCache
) -> None:
    config = StreamConfig(max_segment_bytes=200, max_bytes=600, durability=Durability.NEVER)
    stream = Stream.open(tmp_path / "s", config)
    stream.append([msg(b"first" * 20)])
    reader = stream.reader()
    assert reader.read(1)[0].body == b"first" * 20
    small_cache.set_capacity(1)  # the reader's descriptor goes
    for n in range(20):
        stream.append([msg(b"x%02d" % n * 30)])
    got = [r.body for r in reader.read(100)]
    assert got, "the reader found the retained segments"
    assert got[-1] == b"x19" * 30
    assert stream.first_offset > 1  # the reader's segment is gone
    reader.close()
    stream.close()


def test_out_of_descriptors_gives_back_idle_ones(tmp_path: Path) -> None:
    import resource

    cache = handles.FileCache(capacity=10_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = [cache.file(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(60)]
    # RLIMIT_NOFILE bounds descriptor numbers, not their count: fill the holes that earlier
    # tests left below the highest open descriptor, so exactly 40 numbers stay free
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    fillers: list[int] = []
    while (fd := os.open(os.devnull, os.O_RDONLY)) < highest:
        fillers.append(fd)
    os.close(fd)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + 40, hard))
        for handle in files:  # more files than the process may open
            handle.acquire()
            handle.release()
        assert cache.open_count() <= 40
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for handle in files:
            handle.close()
        for fd in fillers:
            os.close(fd)
