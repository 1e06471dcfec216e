"""A gated stream (a replicated stream's leader): readers and commit listeners see only what
``commit`` allows; a tail reader and tail listeners (a replica's feed) see every append."""

from __future__ import annotations

from pathlib import Path

from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.commit_mark import COMMITTED_FILE, read_committed
from sievemq.storage.publishers import PublisherSequences


def _msg(body: bytes) -> Message:
    return Message((), "", "rk", b"\x00\x00", body)


def _bodies(stream: Stream, tail: bool = False) -> list[bytes]:
    reader = stream.reader(tail=tail)
    try:
        reader.seek_first()
        return [r.body for r in reader.read(1000, None)]
    finally:
        reader.close()


def test_an_ungated_stream_commits_each_append(tmp_path: Path) -> None:
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        heard: list[int] = []
        stream.add_listener(heard.append)
        stream.append([_msg(b"a"), _msg(b"b")])
        assert stream.committed_offset == stream.end_offset == 2
        assert heard == [2]
        assert _bodies(stream) == [b"a", b"b"]


def test_a_gated_stream_reads_up_to_the_committed_offset(tmp_path: Path) -> None:
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.append([_msg(b"a")])
        stream.gate()  # what it held already stays readable
        committed: list[int] = []
        appended: list[int] = []
        stream.add_listener(committed.append)
        stream.add_listener(appended.append, tail=True)
        stream.append([_msg(b"b")])
        stream.append([_msg(b"c")])
        assert (stream.committed_offset, stream.end_offset) == (1, 3)
        assert committed == []
        assert appended == [2, 3]
        assert _bodies(stream) == [b"a"]
        assert _bodies(stream, tail=True) == [b"a", b"b", b"c"]
        reader = stream.reader()
        reader.seek_next()
        assert reader.position == 1  # "next" is after what is committed
        reader.close()

        stream.commit(2)
        assert committed == [2]
        assert _bodies(stream) == [b"a", b"b"]
        stream.commit(1)  # never backwards
        stream.commit(10)  # never past the end
        assert stream.committed_offset == 3
        assert committed == [2, 3]

        stream.append([_msg(b"d")])
        stream.ungate()  # no replica any more: what was held commits, then each append
        assert stream.committed_offset == 4
        stream.append([_msg(b"e")])
        assert stream.committed_offset == 5
        assert committed == [2, 3, 4, 5]


def test_dedup_sequences_see_what_is_not_committed_yet(tmp_path: Path) -> None:
    """A retried publish must be known as a duplicate while its first copy waits for the
    majority: the publisher sequences read past the committed offset."""
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.gate()
        stream.append([_msg(b"held")])
        assert stream.committed_offset == 0
        sequences = PublisherSequences(stream, lambda properties: ("publisher", 7))
        assert sequences.get("publisher") == 7


def test_truncating_a_gated_copy_lowers_its_committed_offset(tmp_path: Path) -> None:
    """A returning copy cut back to the shared history: what went is not committed, so the
    next append under a commit is heard by the readers again."""
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.append([_msg(b"a")])
        stream.append([_msg(b"b")])
        stream.gate()
        assert stream.committed_offset == 2
        stream.truncate(1)
        assert stream.committed_offset == stream.end_offset == 1
        heard: list[int] = []
        stream.add_listener(heard.append)
        stream.append([_msg(b"c")])
        stream.commit(2)
        assert heard == [2]
        assert _bodies(stream) == [b"a", b"c"]


def test_a_gated_copy_started_again_commits_only_what_it_had_committed(tmp_path: Path) -> None:
    """A leader (or replica) that restarts on its data: what it held past its committed
    offset may be held by no other member, so it is not readable until committed again."""
    directory = tmp_path / "s"
    with Stream.open(directory, StreamConfig()) as stream:
        stream.append([_msg(b"a")])
        stream.gate()
        stream.append([_msg(b"b")])
        stream.append([_msg(b"c")])
        stream.commit(2)
    with Stream.open(directory, StreamConfig()) as again:
        again.gate()
        assert (again.committed_offset, again.end_offset) == (2, 3)
        assert _bodies(again) == [b"a", b"b"]
        again.commit(3)  # the replicas acknowledged the rest
        assert _bodies(again) == [b"a", b"b", b"c"]
    with Stream.open(directory, StreamConfig()) as third:
        third.gate()
        assert third.committed_offset == 3
        third.ungate()  # no replica any more: everything counts from now on, and after
    with Stream.open(directory, StreamConfig()) as fourth:
        fourth.append([_msg(b"d")])
        fourth.gate()
        assert fourth.committed_offset == 4


def test_an_elected_floor_wins_over_the_kept_offset(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with Stream.open(directory, StreamConfig()) as stream:
        stream.gate()
        stream.append([_msg(b"a")])
        stream.append([_msg(b"b")])
    with Stream.open(directory, StreamConfig()) as again:
        again.gate(committed=1)
        assert again.committed_offset == 1


def test_a_damaged_kept_offset_counts_nothing_committed(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with Stream.open(directory, StreamConfig()) as stream:
        stream.append([_msg(b"a")])
        stream.gate()
    (directory / COMMITTED_FILE).write_bytes(b"\x00\x07")  # torn
    assert read_committed(directory) == 0
    with Stream.open(directory, StreamConfig()) as again:
        again.gate()
        assert again.committed_offset == 0
        again.commit(1)
    assert read_committed(directory) == 1
