"""Stream.delete while an append (with its fdatasync) runs in another thread.

The directory is renamed at once, so the name is free (the rename is what makes the delete
durable); the writing thread keeps its files open until its append ends, and a background
thread removes the tombstone. Nothing is synced for a deleted stream.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from sievemq.storage import Durability, Message, Stream, StreamConfig, layout
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
    layout.wait_discarded()  # closed by the worker, then removed in the background
    assert [p.name for p in tmp_path.iterdir()] == ["s"]
    stream.delete()  # idempotent
    again.close()


def test_delete_without_a_writer_is_what_users_see_and_removes_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS))
    stream.append([_msg(b"x"), _msg(b"y")])
    stream.offsets.set("reader", 0)
    syncs: list[int] = []
    removed_on: list[int] = []
    go = threading.Event()
    real_rmtree, real_fdatasync, real_fsync = shutil.rmtree, os.fdatasync, os.fsync

    def held_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        removed_on.append(threading.get_ident())
        assert go.wait(10)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "fdatasync", syncs.append)
    monkeypatch.setattr(os, "fsync", syncs.append)
    monkeypatch.setattr(shutil, "rmtree", held_rmtree)
    stream.delete()  # returns while the removal is held
    assert syncs == []  # nothing is synced for a stream that is going away
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    monkeypatch.setattr(os, "fsync", real_fsync)
    # the stream is gone: its name is free, and a new stream of that name starts empty
    assert not (tmp_path / "s").exists()
    again = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.NEVER))
    assert again.end_offset == 0
    assert again.offsets.get("reader") is None
    again.close()
    # a restart (a new open of the same directory) does not bring the old messages back
    reopened = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.NEVER))
    assert reopened.end_offset == 0
    reopened.close()
    # the tombstone is removed eventually, by the background thread
    go.set()
    layout.wait_discarded()
    assert [p.name for p in tmp_path.iterdir()] == ["s"]
    assert removed_on and threading.get_ident() not in removed_on
    stream.delete()  # idempotent


def test_a_tombstone_a_crash_left_is_removed_at_the_next_start(tmp_path: Path) -> None:
    # a crash before the background removal leaves a tombstone, which is never read as a
    # stream and goes at the next start when its queue is no longer defined (or is older)
    streams = tmp_path / layout.STREAMS_DIR / "%2F"
    stream = Stream.open(streams / "s", StreamConfig(durability=Durability.ALWAYS))
    stream.append([_msg(b"x")])
    stream.close()
    (streams / "s").rename(streams / (TOMBSTONE_PREFIX + "crashed"))
    (streams / "t").mkdir()
    layout.bury(streams / "t")
    assert layout.stream_names(tmp_path, "/") == []
    assert layout.settle_tombstones(tmp_path, set()) == (0, 2)
    assert list(streams.iterdir()) == []


def test_a_tombstone_whose_queue_is_still_defined_is_put_back(tmp_path: Path) -> None:
    # its delete never reached the definitions on disk: the queue is back with its data;
    # one whose name is taken again (a new declare that did reach the disk) goes
    streams = tmp_path / layout.STREAMS_DIR / "%2F"
    stream = Stream.open(streams / "s", StreamConfig(durability=Durability.ALWAYS))
    stream.append([_msg(b"kept")])
    stream.close()
    tombstone = layout.bury(streams / "s")
    assert tombstone is not None and layout.origin_of(tombstone.name) == "s"
    (streams / "t").mkdir()
    layout.bury(streams / "t")
    (streams / "t").mkdir()  # declared again since
    live = {(layout.STREAMS_DIR, "%2F", "s"), (layout.STREAMS_DIR, "%2F", "t")}
    assert layout.settle_tombstones(tmp_path, live) == (1, 1)
    assert sorted(p.name for p in streams.iterdir()) == ["s", "t"]
    with Stream.open(streams / "s", StreamConfig()) as again:
        assert again.end_offset == 1


def test_empty_directories_of_deleted_vhosts_go_at_start(tmp_path: Path) -> None:
    streams = tmp_path / layout.STREAMS_DIR
    for vhost in ("%2F", "gone", "kept-empty", "busy"):
        (streams / vhost).mkdir(parents=True)
    (streams / "busy" / "s").mkdir()
    layout.remove_empty_vhost_dirs(tmp_path, {"/", "kept-empty"})
    assert sorted(p.name for p in streams.iterdir()) == ["%2F", "busy", "kept-empty"]


def test_a_deleted_vhosts_directories_go_whole_at_start(tmp_path: Path) -> None:
    # a vhost's line is written before its queues' files move: a crash in between leaves
    # its queues' directories in place, with no vhost to hold them
    for kind in (layout.STREAMS_DIR, layout.QUEUES_DIR):
        for vhost in ("%2F", "gone"):
            (tmp_path / kind / vhost / "q").mkdir(parents=True)
    assert layout.remove_deleted_vhost_dirs(tmp_path, {"/"}) == 2
    for kind in (layout.STREAMS_DIR, layout.QUEUES_DIR):
        assert [p.name for p in (tmp_path / kind).iterdir()] == ["%2F"]
        assert (tmp_path / kind / "%2F" / "q").is_dir()


def test_close_syncs_only_a_stream_written_since_its_last_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a shutdown with 50,000 idle streams used to reopen and fdatasync every one's files
    syncs: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    written = Stream.open(tmp_path / "w", StreamConfig(durability=Durability.BATCH))
    idle = Stream.open(tmp_path / "i", StreamConfig(durability=Durability.BATCH))
    synced = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.BATCH))
    written.append([_msg(b"x")])
    synced.append([_msg(b"y")])
    synced.sync()
    monkeypatch.setattr(os, "fdatasync", counting)
    idle.close()
    synced.close()
    assert syncs == []
    written.close()
    assert len(syncs) == 2  # its segment and its index
    reopened = Stream.open(tmp_path / "w", StreamConfig(durability=Durability.BATCH))
    assert reopened.end_offset == 1
    reopened.close()
