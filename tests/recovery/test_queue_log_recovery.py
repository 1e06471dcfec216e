"""The queue log of a durable classic queue, reopened after a crash in each window.

The files are left as a process killed at that moment leaves them (SIGKILL: every completed
write is in the page cache, nothing after it happened), then the log is recovered.
"""

from __future__ import annotations

from pathlib import Path

from sievemq.storage.queue_log import ACK_FILE, QueueLog

SEGMENT = 300  # bytes: a handful of records per segment


def fill(log: QueueLog, n: int) -> list[int]:
    ids = [log.next_id() for _ in range(n)]
    log.append([(i, 1000 + i, "ex", "rk", b"\x00\x00", b"body-%d" % i) for i in ids])
    return ids


def reopen(directory: Path) -> tuple[QueueLog, list[int]]:
    log = QueueLog(directory, segment_bytes=SEGMENT)
    return log, [m.id for m in log.recover()]


def test_torn_record_between_append_and_confirm_is_cut_and_appends_go_on(
    tmp_path: Path,
) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 12)
    log.close()
    last = max(tmp_path.glob("*.qseg"))
    whole = last.read_bytes()
    for cut in range(1, 20):  # the last record was being written (never confirmed)
        last.write_bytes(whole[:-cut])
        again, got = reopen(tmp_path)
        assert got == ids[:-1]
        assert again.next_id() == ids[-1]  # the torn id is free again: it was never confirmed
        again.close()
    again, _ = reopen(tmp_path)
    more = fill(again, 2)
    again.close()
    assert reopen(tmp_path)[1] == [*ids[:-1], *more]


def test_torn_ack_entry_brings_that_message_back_redelivered(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 6)
    log.mark_delivered(ids[3])
    log.ack(ids[:3])
    log.close()
    acks = tmp_path / ACK_FILE
    whole = acks.read_bytes()
    for cut in range(1, 8):  # killed while writing the third ack entry
        acks.write_bytes(whole[:-cut])
        again, got = reopen(tmp_path)
        assert got == ids[2:]
        assert again.delivered == ids[3]  # ids[2] (and ids[3]) come back redelivered
        again.close()
        assert acks.stat().st_size % 8 == 0  # rewritten without the torn bytes


def test_crash_after_the_ack_before_the_segment_is_deleted(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 30)
    first = min(tmp_path.glob("*.qseg"))
    saved = first.read_bytes()
    in_first = [i for i in ids if i < int(sorted(tmp_path.glob("*.qseg"))[1].stem)]
    log.ack(in_first)
    log.close()
    assert not first.exists()
    first.write_bytes(saved)  # the unlink had not happened yet
    again, got = reopen(tmp_path)
    assert got == [i for i in ids if i not in in_first]
    assert not first.exists()  # fully acked: deleted at recovery
    again.close()


def test_crash_half_way_through_deleting_segments(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 40)
    segments = sorted(tmp_path.glob("*.qseg"))
    saved = {p: p.read_bytes() for p in segments[:3]}
    acked = [i for i in ids if i < int(segments[3].stem)]
    log.ack(acked)
    log.close()
    segments[1].write_bytes(saved[segments[1]])  # one of three deletions had not happened
    again, got = reopen(tmp_path)
    assert got == [i for i in ids if i not in acked]
    assert sorted(tmp_path.glob("*.qseg")) == segments[3:]
    again.close()
    assert reopen(tmp_path)[1] == got


def test_ack_rewrite_interrupted_leaves_the_old_ack_record(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 10)
    log.ack(ids[:2])
    log.close()
    (tmp_path / (ACK_FILE + ".tmp")).write_bytes(b"\x00" * 5)  # killed before the rename
    again, got = reopen(tmp_path)
    assert got == ids[2:]
    again.close()


def test_crash_half_way_through_a_purge_brings_nothing_back(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    fill(log, 40)
    saved = {p: p.read_bytes() for p in tmp_path.glob("*.qseg")}
    assert len(saved) > 3
    log.purge()
    log.close()
    for path, data in list(saved.items())[::2]:  # some unlinks had not happened yet
        path.write_bytes(data)
    again, got = reopen(tmp_path)
    assert got == []
    more = fill(again, 3)
    again.close()
    assert reopen(tmp_path)[1] == more


def test_ids_never_restart_below_the_delivered_mark(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=SEGMENT)
    log.recover()
    ids = fill(log, 10)
    log.mark_delivered(ids[-1])
    log.ack(ids)
    log.close()
    again, got = reopen(tmp_path)  # every segment is gone now
    assert got == []
    again.close()
    third, _ = reopen(tmp_path)
    fresh = fill(third, 2)
    assert fresh[0] > third.delivered  # a new message is not taken for a delivered one
    third.close()
