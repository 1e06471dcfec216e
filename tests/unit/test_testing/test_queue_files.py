"""``sievemq.testing.queue_files``: a quorum queue's live records read from its log's files,
as the replication tests and the chaos checkers compare a leader's and a replica's copies."""

from __future__ import annotations

from pathlib import Path

from sievemq.storage.layout import queue_directory
from sievemq.storage.queue_log import QueueLog, decode_record
from sievemq.testing.queue_files import live_bodies, live_records


def test_the_live_records_leave_out_the_acked_and_read_nothing_without_a_log(
    tmp_path: Path,
) -> None:
    assert live_records(tmp_path, "/", "q") is None
    assert live_bodies(tmp_path, "/", "q") == {}
    qlog = QueueLog(queue_directory(tmp_path, "/", "q"))
    qlog.recover()
    x, y, z = (qlog.next_id() for _ in range(3))
    qlog.append([(i, 0, "", "q", b"", body) for i, body in ((x, b"x"), (y, b"y"), (z, b"z"))])
    qlog.ack([y])
    qlog.close()
    records = live_records(tmp_path, "/", "q")
    assert records is not None and sorted(records) == [x, z]
    message = decode_record(records[z])
    assert message is not None and (message.id, message.body) == (z, b"z")
    assert live_bodies(tmp_path, "/", "q") == {x: b"x", z: b"z"}
    assert live_records(tmp_path, "/", "other") is None
