"""Running out of disk is an alarm, not a crash: ENOSPC injected under the writer.

The real Stream writes through ``os.writev``; the test makes it fail with ENOSPC for a
while. Publishers of the failed batches are nacked (never confirmed), the appender tells
the node, the disk alarm goes on, and once writes succeed again everything confirmed is in
the stream exactly once, in order, readable.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from sievemq.gateway.runtime.alarms import DISK, ResourceAlarms
from sievemq.storage import Durability, Stream, StreamConfig

from .appender_helpers import Sink, appender_on, msg, settled


class Probe:
    def memory_used(self) -> int:
        return 1

    def disk_free(self) -> int:
        return 10**12


@pytest.mark.parametrize("durability", [Durability.NEVER, Durability.ALWAYS])
async def test_enospc_nacks_raises_the_disk_alarm_and_loses_nothing_confirmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: Durability
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=durability))
    alarms = ResourceAlarms(Probe(), memory_limit=10**12, disk_free_limit=1000)
    heard: list[tuple[str, ...]] = []
    alarms.add_listener(heard.append)
    with appender_on(stream, on_exhausted=alarms.storage_write_failed) as appender:
        sink = Sink()
        for i in range(3):
            appender.submit(msg(b"m%d" % i), sink, i)
        await settled(sink, 3)
        real_writev = os.writev

        def full(fd: int, buffers: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "writev", full)
        for i in range(3, 8):
            appender.submit(msg(b"m%d" % i), sink, i)
        await settled(sink, 8)
        assert [sink.outcomes[i] for i in range(3, 8)] == [False] * 5
        assert heard == [(DISK,)]  # on at the first failed write
        assert alarms.check() == (DISK,)  # held through the next check
        monkeypatch.setattr(os, "writev", real_writev)
        assert alarms.check() == ()  # the disk has room: cleared by itself
        assert heard == [(DISK,), ()]
        for i in range(8, 11):
            appender.submit(msg(b"m%d" % i), sink, i)
        await settled(sink, 11)
        assert all(sink.outcomes[i] for i in (*range(3), *range(8, 11)))
    again = Stream.open(tmp_path / "s", StreamConfig())
    reader = again.reader()
    bodies = [r.body for r in reader.read(100)]
    assert bodies == [b"m0", b"m1", b"m2", b"m8", b"m9", b"m10"]
    reader.close()
    again.close()


def test_out_of_descriptors_is_logged_not_an_alarm() -> None:
    alarms = ResourceAlarms(Probe(), memory_limit=10**12, disk_free_limit=1000)
    alarms.storage_write_failed(OSError(errno.EMFILE, "Too many open files"))
    assert alarms.reasons == ()
