"""QueueLog: the durable log of a classic queue (segments + ack record + delivered mark)."""

from __future__ import annotations

from pathlib import Path

from sievemq.storage import layout
from sievemq.storage.queue_log import QueueLog


def fill(log: QueueLog, n: int, size: int = 10) -> list[int]:
    ids = [log.next_id() for _ in range(n)]
    log.append([(i, 1000 + i, "ex", "rk", b"\x00\x00", bytes([i % 256]) * size) for i in ids])
    return ids


def test_recover_returns_unacked_in_order(tmp_path: Path) -> None:
    log = QueueLog(tmp_path)
    assert log.recover() == []
    ids = fill(log, 10)
    log.ack([ids[0], ids[3]])
    log.mark_delivered(ids[5])
    log.close()
    again = QueueLog(tmp_path)
    got = again.recover()
    assert [m.id for m in got] == [i for i in ids if i not in (ids[0], ids[3])]
    assert got[0].exchange == "ex" and got[0].routing_key == "rk" and got[0].body == b"\x02" * 10
    assert again.delivered == ids[5]
    assert again.next_id() == ids[-1] + 1  # ids keep increasing across restarts


def test_fully_acked_segments_are_deleted(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=200)
    log.recover()
    ids = fill(log, 40)
    segments = log.segment_count
    assert segments > 3
    log.ack(ids[:20])
    assert log.segment_count < segments
    log.ack(ids[20:])
    assert log.segment_count <= 1  # the segment being written stays
    log.close()
    again = QueueLog(tmp_path, segment_bytes=200)
    assert again.recover() == []


def test_torn_tail_is_cut_and_the_rest_survives(tmp_path: Path) -> None:
    log = QueueLog(tmp_path)
    log.recover()
    ids = fill(log, 5)
    log.close()
    segment = next(tmp_path.glob("*.qseg"))
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])  # a crash half way through the last record
    again = QueueLog(tmp_path)
    assert [m.id for m in again.recover()] == ids[:4]
    assert segment.stat().st_size < len(data)


def test_purge_forgets_everything(tmp_path: Path) -> None:
    log = QueueLog(tmp_path)
    log.recover()
    fill(log, 5)
    log.purge()
    fill(log, 2)
    log.close()
    assert len(QueueLog(tmp_path).recover()) == 2


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    log = QueueLog(directory)
    log.recover()
    fill(log, 3)
    log.delete()
    assert not directory.exists()  # renamed away at once: the name is free
    layout.wait_discarded()  # removed by the background thread
    assert list(tmp_path.iterdir()) == []


def test_noted_delivered_mark_is_written_by_flush_only(tmp_path: Path) -> None:
    log = QueueLog(tmp_path)
    log.recover()
    ids = fill(log, 6)
    log.note_delivered(ids[2])
    log.note_delivered(ids[4])
    log.note_delivered(ids[1])  # never goes back
    probe = QueueLog(tmp_path)
    list(probe.scan())
    assert probe.delivered == 0  # a crash before the flush: nothing was sent either
    log.flush_delivered()
    log.close()
    again = QueueLog(tmp_path)
    list(again.scan())
    assert again.delivered == ids[4]


def test_reads_and_acks_across_many_small_segments(tmp_path: Path) -> None:
    log = QueueLog(tmp_path, segment_bytes=150)
    located = list(log.scan())
    assert located == []
    ids = fill(log, 60, size=20)
    log.close()
    reopened = QueueLog(tmp_path, segment_bytes=150)
    found = list(reopened.scan())
    assert reopened.segment_count > 5
    wanted = [(f.message.id, f.position, f.size) for f in found]
    # adjacent positions across a segment boundary (a new file starts at 0) read right
    assert [m.id if m else None for m in reopened.read(wanted)] == ids
    parts = reopened.read_parts(wanted[10:20])
    assert [p[0] if p else None for p in parts] == ids[10:20]
    assert all(
        p is not None and p[5] == bytes([i % 256]) * 20
        for p, i in zip(parts, ids[10:20], strict=True)
    )
    # acks out of order and spanning segments: each segment goes once all of it is acked
    order = ids[30:] + ids[:30][::-1]
    reopened.ack(order[:45])
    reopened.ack(order[45:])
    assert reopened.segment_count == 0
    reopened.close()
    assert list(QueueLog(tmp_path, segment_bytes=150).scan()) == []
