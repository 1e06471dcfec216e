"""Commit by majority: the committed offset from the replicas' acknowledgements."""

from __future__ import annotations

from pathlib import Path

from sievemq.cluster.commit import StreamCommit, committed_offset, majority
from sievemq.storage import Message, Stream, StreamConfig


def test_majority_counts_the_leader() -> None:
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert committed_offset([], 1) is None  # one member: never gated
    assert committed_offset([], 3) is None  # no replica answered
    assert committed_offset([7], 3) == 7  # leader + one replica of three
    assert committed_offset([7, 9], 3) == 9
    assert committed_offset([9], 2) == 9
    assert committed_offset([4, 9], 5) == 4  # leader + the two replicas
    assert committed_offset([9], 5) is None


def test_acknowledgements_move_the_committed_offset(tmp_path: Path) -> None:
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.gate()
        stream.append([Message((), "", "rk", b"\x00\x00", b"x")] * 5)
        commit = StreamCommit(stream, ("b", "c", "d", "e"), epoch=2)
        commit.held("b", 2, 5)
        assert stream.committed_offset == 0  # 2 of 5 members
        commit.held("c", 1, 5)  # another epoch: ignored
        commit.held("x", 2, 5)  # no member: ignored
        assert stream.committed_offset == 0
        commit.held("c", 2, 3)
        assert stream.committed_offset == 3
        commit.held("d", 2, 5)
        assert stream.committed_offset == 5
