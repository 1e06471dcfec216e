"""QueueLog: the durable log of a classic queue (segments + ack record + delivered mark)."""

from __future__ import annotations

from pathlib import Path

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
    assert not directory.exists()
