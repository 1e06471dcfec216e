"""Stream.delete while an append (with its fdatasync) runs in another thread.

The directory is renamed at once, so the name is free; the writing thread keeps its files
open until its append ends and then removes them. Nothing is synced for a deleted stream.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sievemq.storage import Durability, Message, Stream, StreamConfig
from sievemq.storage.layout import TOMBSTONE_PREFIX


def _msg(body: bytes) -> Message:
    return Message((), "", "rk", b"\x00\x00", body)


def test_delete_during_an_append_in_another_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS))
    stream.append([_msg(b"kept until delete")])
    in_sync, release = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync
    main = threading.get_ident()
    synced_on_main: list[int] = []

    def blocking_fdatasync(fd: int) -> None:
        if threading.get_ident() == main:
            synced_on_main.append(fd)
        else:
            in_sync.set()
            assert release.wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", blocking_fdatasync)
    results: list[object] = []
    worker = threading.Thread(
        target=lambda: results.append(stream.append([_msg(b"in flight")])), daemon=True
    )
    worker.start()
    assert in_sync.wait(10)
    stream.delete()  # returns while the worker is inside its fdatasync
    assert synced_on_main == []
    assert not (tmp_path / "s").exists()
    [tombstone] = tmp_path.iterdir()
    assert tombstone.name.startswith(TOMBSTONE_PREFIX)
    # the name is free: a new stream of that name starts empty beside the tombstone
    again = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.NEVER))
    assert again.end_offset == 0
    release.set()
    worker.join(10)
    assert results == [1]  # the append itself completed (the appender nacks it anyway)
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # the worker removed the tombstone
    stream.delete()  # idempotent
    again.close()


def test_delete_without_a_writer_removes_at_once_without_syncing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS))
    stream.append([_msg(b"x")])
    stream.offsets.set("reader", 0)
    syncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", syncs.append)
    monkeypatch.setattr(os, "fsync", syncs.append)
    stream.delete()
    assert syncs == []
    assert list(tmp_path.iterdir()) == []
