"""A compaction of definitions.log that falls due while syncs are deferred (the gateway's
event loop) is not done in the commit: it joins the deferred sync and runs in its thread,
while the loop goes on committing. Every line committed meanwhile reaches the new log."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sievemq.gateway.model import definitions
from sievemq.gateway.model.definitions import DefinitionStore


def queue(name: str) -> dict[str, object]:
    return {"vhost": "/", "name": name, "arguments": {"x-queue-type": "stream"}}


def _churn_until_due(store: DefinitionStore) -> int:
    """put/delete one queue until a compaction is owed; returns the commits made."""
    n = 0
    while not store._compact_owed:
        assert n < 10_000, "no compaction fell due"
        store.put("queues", queue("churn"))
        store.commit()
        store.delete("queues", queue("churn"))
        store.commit()
        n += 2
        sync = store.take_sync() if not store._compact_owed else None
        if sync is not None:
            sync()
    return n


def _pause_after_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    """Compactions fall due early, and the compacting thread stops once its snapshot is
    synced: (set when it got there, set it to let the thread go on)."""
    monkeypatch.setattr(definitions, "_COMPACT_MIN", 64)
    snapshot_written = threading.Event()
    go_on = threading.Event()

    def pause(step: str) -> None:
        if step == "temp-synced":
            snapshot_written.set()
            assert go_on.wait(10)

    monkeypatch.setattr(definitions, "_crash_point", pause)
    return snapshot_written, go_on


def test_a_due_compaction_waits_for_the_deferred_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(definitions, "_COMPACT_MIN", 64)
    log = tmp_path / definitions.LOG_NAME
    with DefinitionStore(tmp_path) as store:
        store.put("queues", queue("keep"))
        store.commit()
        store.defer_sync = True
        _churn_until_due(store)
        before = log.stat()
        assert store.compactions == 0 and log.stat().st_ino == before.st_ino  # not in commit
        assert store.owes_sync
        sync = store.take_sync()
        assert sync is not None
        sync()
        assert store.compactions == 1
        assert log.stat().st_ino != before.st_ino and log.stat().st_size < before.st_size
        assert not (tmp_path / (definitions.LOG_NAME + ".tmp")).exists()
        store.put("queues", queue("after"))  # the loop writes to the new log
        store.commit()
        sync = store.take_sync()
        assert sync is not None
        sync()
    with DefinitionStore(tmp_path) as store:
        data = store.load()
    assert data is not None
    assert sorted(q["name"] for q in data["queues"]) == ["after", "keep"]


def test_lines_committed_during_the_compaction_reach_the_new_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread stops after writing its snapshot; the loop commits puts and deletes
    meanwhile; then the thread swaps the logs. Nothing committed is lost."""
    snapshot_written, go_on = _pause_after_snapshot(monkeypatch)
    with DefinitionStore(tmp_path) as store:
        for name in ("a", "b", "c"):
            store.put("queues", queue(name))
        store.commit()
        store.defer_sync = True
        _churn_until_due(store)
        sync = store.take_sync()
        assert sync is not None
        worker = threading.Thread(target=sync)
        worker.start()
        assert snapshot_written.wait(10)
        store.delete("queues", queue("a"))
        store.put("queues", queue("d"))
        store.commit()
        go_on.set()
        worker.join(10)
        assert store.compactions == 1
        store.put("queues", queue("e"))
        store.commit()
        final = store.take_sync()
        assert final is not None
        final()
    with DefinitionStore(tmp_path) as store:
        data = store.load()
    assert data is not None
    assert sorted(q["name"] for q in data["queues"]) == ["b", "c", "d", "e"]


def test_a_close_during_the_compaction_keeps_the_old_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot_written, go_on = _pause_after_snapshot(monkeypatch)
    store = DefinitionStore(tmp_path)
    store.put("queues", queue("a"))
    store.commit()
    store.defer_sync = True
    _churn_until_due(store)
    sync = store.take_sync()
    assert sync is not None
    worker = threading.Thread(target=sync)
    worker.start()
    assert snapshot_written.wait(10)
    store.put("queues", queue("b"))
    store.close()
    go_on.set()
    worker.join(10)
    assert not (tmp_path / (definitions.LOG_NAME + ".tmp")).exists()
    assert store.compactions == 0
    with DefinitionStore(tmp_path) as reopened:
        data = reopened.load()
    assert data is not None
    assert sorted(q["name"] for q in data["queues"]) == ["a", "b"]
    assert os.path.getsize(tmp_path / definitions.LOG_NAME) > 0
