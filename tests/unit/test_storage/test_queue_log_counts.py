"""A quorum queue's delivery counts in its log (``counts``): kept across a reopen, torn
entries ignored, the record rewritten without the ids that are gone."""

from __future__ import annotations

import struct
from pathlib import Path

from sievemq.storage.queue_log import COUNTS_FILE, QueueLog, last_id_of, read_counts

SEGMENT = 300  # bytes: a handful of records per segment


def opened(directory: Path) -> tuple[QueueLog, list[int]]:
    log = QueueLog(directory, segment_bytes=SEGMENT)
    return log, [m.id for m in log.recover()]


def fill(log: QueueLog, n: int) -> list[int]:
    ids = [log.next_id() for _ in range(n)]
    log.append([(i, 1000 + i, "ex", "rk", b"\x00\x00", b"body-%d" % i) for i in ids])
    return ids


def test_counts_come_back_and_held_messages_count_one_more(tmp_path: Path) -> None:
    log, _ = opened(tmp_path)
    ids = fill(log, 6)
    log.mark_delivered(ids[4])  # 1..5 handed out
    log.record_counts([(ids[0], 1, False), (ids[1], 2, False)])  # returned, waiting
    log.note_counts([(ids[1], 2, True)])  # ids[1] handed out again
    log.flush_delivered()
    log.ack([ids[2]])
    log.close()
    again, left = opened(tmp_path)
    assert left == [ids[0], ids[1], ids[3], ids[4], ids[5]]
    counts = {i: again.returned_count(i) for i in left}
    # ids[0] waited (1 return); ids[1] was held (2 returns + the crash's); ids[3], ids[4]
    # were held with no return before; ids[5] was never handed out
    assert counts == {ids[0]: 1, ids[1]: 3, ids[3]: 1, ids[4]: 1, ids[5]: 0}
    again.close()


def test_no_counts_file_for_a_queue_that_never_returned_a_message(tmp_path: Path) -> None:
    log, _ = opened(tmp_path)
    ids = fill(log, 3)
    log.mark_delivered(ids[2])
    log.ack(ids)
    log.close()
    assert not (tmp_path / COUNTS_FILE).exists()
    again, _ = opened(tmp_path)
    again.close()
    assert not (tmp_path / COUNTS_FILE).exists()


def test_torn_or_damaged_entry_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    log, _ = opened(tmp_path)
    ids = fill(log, 2)
    log.mark_delivered(ids[1])
    log.record_counts([(ids[0], 1, False)])
    log.record_counts([(ids[0], 2, False)])
    log.close()
    path = tmp_path / COUNTS_FILE
    whole = path.read_bytes()
    assert len(whole) == 32
    for cut in range(1, 16):  # killed while writing the second entry
        path.write_bytes(whole[:-cut])
        again, _ = opened(tmp_path)
        assert again.returned_count(ids[0]) == 1
        again.close()
        assert len(path.read_bytes()) == 16  # rewritten whole at the reopen
    damaged = bytearray(whole)
    damaged[20] ^= 0xFF  # the second entry's count changed after it was written
    path.write_bytes(bytes(damaged))
    again, _ = opened(tmp_path)
    assert again.returned_count(ids[0]) == 1
    again.close()


def test_counts_of_gone_messages_are_dropped_when_rewritten(tmp_path: Path) -> None:
    log, _ = opened(tmp_path)
    ids = fill(log, 40)  # several segments
    log.mark_delivered(ids[-1])
    log.record_counts([(i, 1, False) for i in ids])
    log.ack(ids[:30])
    log.close()
    again, left = opened(tmp_path)
    assert left == ids[30:]
    assert sorted(read_counts(tmp_path)) == ids[30:]
    assert all(again.returned_count(i) == 1 for i in left)
    again.purge()
    again.close()
    assert read_counts(tmp_path) == {}
    assert opened(tmp_path)[1] == []


def test_record_rewritten_while_running_once_it_grew(tmp_path: Path) -> None:
    log, _ = opened(tmp_path)
    ids = fill(log, 4)
    log.mark_delivered(ids[-1])
    for n in range(1, 3000):  # the same messages returned again and again
        log.record_counts([(i, n, False) for i in ids])
    size = (tmp_path / COUNTS_FILE).stat().st_size
    assert size < 4096 * 16 * 2  # rewritten down to one entry per id along the way
    log.close()
    again, _ = opened(tmp_path)
    assert [again.returned_count(i) for i in ids] == [2999] * 4
    assert (tmp_path / COUNTS_FILE).stat().st_size == 4 * 16
    again.close()


def test_entry_layout(tmp_path: Path) -> None:
    """u64 id | u32 count << 1 | out | u32 crc32 of the first 12 bytes (what a replica
    writes is these bytes too)."""
    log, _ = opened(tmp_path)
    ids = fill(log, 1)
    log.record_counts([(ids[0], 5, True)])
    log.close()
    data = (tmp_path / COUNTS_FILE).read_bytes()
    msg_id, word, _crc = struct.unpack(">QII", data)
    assert (msg_id, word) == (ids[0], 5 << 1 | 1)


def test_last_id_of_a_copy_read_without_opening_it(tmp_path: Path) -> None:
    """An election compares copies by the highest id they hold or held, read while their
    followers may hold the logs open."""
    assert last_id_of(tmp_path) == 0
    log, _ = opened(tmp_path)
    ids = fill(log, 30)  # several segments
    assert last_id_of(tmp_path) == ids[-1]
    log.mark_delivered(ids[-1])
    log.ack(ids)  # settled: the last segment stays (it is being written)
    assert last_id_of(tmp_path) == ids[-1]
    log.purge()  # every segment gone: the floor says how far it went
    assert last_id_of(tmp_path) == ids[-1]
    log.close()
    last = max(tmp_path.glob("*.qseg"), default=None)
    assert last is None
    log, _ = opened(tmp_path)
    more = fill(log, 3)
    log.close()
    whole = max(tmp_path.glob("*.qseg"))
    whole.write_bytes(whole.read_bytes()[:-3])  # the last record torn
    assert last_id_of(tmp_path) == more[-2]
