"""Commit by majority: the committed offset from the replicas' acknowledgements."""

from __future__ import annotations

from pathlib import Path

from sievemq.cluster.commit import StreamCommit, committed_offset, majority
from sievemq.cluster.failover import committed_floor
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


def test_a_promoted_copy_commits_only_what_a_majority_is_known_to_hold(tmp_path: Path) -> None:
    """A new leader's copy may end with an old leader's chunks no majority took: gated with
    the election's floor, its readers see below it only, the rest once a replica holds it."""
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.append([Message((), "", "rk", b"\x00\x00", b"x")] * 5)
        stream.append([Message((), "", "rk", b"\x00\x00", b"y")] * 3)  # a chunk from 5
        assert stream.committed_offset == 8  # ungated: everything written counts
        stream.gate(committed=5)
        assert stream.committed_offset == 5
        reader = stream.reader()
        reader.seek_offset(0)
        assert len(reader.read(100)) == 5
        commit = StreamCommit(stream, ("b", "c"), epoch=2)
        commit.held("b", 2, 8)
        assert stream.committed_offset == 8
        assert len(reader.read(100)) == 3
        reader.close()
        stream.gate(committed=99)  # never past the end
        assert stream.committed_offset == 8


def test_an_elected_leader_starts_committed_where_the_tails_show_a_majority() -> None:
    # three members: the winner (b, 94) and c (92) are a majority holding 92
    assert committed_floor({"b": 94, "c": 92}, "b", 3, 0) == 92
    # what the old leader had said it committed counts too, never past the winner's end
    assert committed_floor({"b": 94, "c": 92}, "b", 3, 93) == 93
    assert committed_floor({"b": 94, "c": 92}, "b", 3, 120) == 94
    # five members: b and two others make a majority, so the second highest other
    assert committed_floor({"b": 100, "c": 90, "d": 80}, "b", 5, 0) == 80
    assert committed_floor({"b": 100, "c": 100, "d": 100, "e": 50}, "b", 5, 0) == 100
