"""OffsetStore: durable named-consumer offsets in an append-only, compacted log."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.storage import OffsetStore
from sievemq.storage import offsets as offsets_module


def test_set_get_delete_survive_reopen(tmp_path: Path) -> None:
    store = OffsetStore(tmp_path / "o.log")
    assert store.get("c1") is None
    store.set("c1", 10)
    store.set("c2", 5)
    store.set("c1", 11)
    store.delete("c2")
    store.close()
    again = OffsetStore(tmp_path / "o.log")
    assert again.items() == {"c1": 11}
    again.close()


def test_torn_last_record_is_ignored_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "o.log"
    store = OffsetStore(path)
    store.set("good", 7)
    store.close()
    whole = path.stat().st_size
    with path.open("ab") as f:
        f.write(b"\x01\x02\x03\x04\x00\x00")  # half a record, as a SIGKILL mid-write leaves
    again = OffsetStore(path)
    assert again.items() == {"good": 7}
    assert path.stat().st_size == whole
    again.set("next", 1)
    again.close()
    assert OffsetStore(path).items() == {"good": 7, "next": 1}


def test_corrupt_record_stops_loading(tmp_path: Path) -> None:
    path = tmp_path / "o.log"
    store = OffsetStore(path)
    store.set("a", 1)
    store.set("b", 2)
    store.close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert OffsetStore(path).items() == {"a": 1}


def test_log_is_compacted_by_write_and_rename(tmp_path: Path) -> None:
    path = tmp_path / "o.log"
    store = OffsetStore(path)
    for i in range(offsets_module._COMPACT_MIN * 2):
        store.set("c", i)
    record = 4 + 8 + 2 + 1  # crc, offset, name length, "c"
    assert path.stat().st_size <= (offsets_module._COMPACT_MIN + 1) * record  # not 2048
    assert not (tmp_path / "o.log.tmp").exists()
    store.close()
    assert OffsetStore(path).get("c") == offsets_module._COMPACT_MIN * 2 - 1


def test_leftover_compaction_file_is_removed(tmp_path: Path) -> None:
    (tmp_path / "o.log.tmp").write_bytes(b"junk")
    store = OffsetStore(tmp_path / "o.log")
    assert not (tmp_path / "o.log.tmp").exists()
    store.close()


def test_every_write_survives_a_reopen_even_when_it_compacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offsets_module, "_COMPACT_MIN", 4)  # compact every few writes
    store = OffsetStore(tmp_path / "offsets.log")
    store.set("gone", 7)
    for i in range(40):
        store.set("c", i)
        if i == 20:
            store.delete("gone")
        reopened = OffsetStore(tmp_path / "offsets.log")
        assert reopened.get("c") == i
        assert (reopened.get("gone") is None) == (i >= 20)
        reopened.close()
    store.close()


def test_listeners_hear_changes_and_replace_all_makes_the_set(tmp_path: Path) -> None:
    store = OffsetStore(tmp_path / "o.log")
    heard: list[tuple[str, int | None]] = []
    store.listeners.append(lambda name, at: heard.append((name, at)))
    store.set("a", 1)
    store.set("a", 1)  # unchanged: not written, not told
    store.set("b", 2)
    store.delete("b")
    store.replace_all({"c": 3, "a": 4})
    assert heard == [("a", 1), ("b", 2), ("b", None), ("c", 3), ("a", 4)]
    store.replace_all({"c": 3})
    assert store.items() == {"c": 3}
    assert heard[-1] == ("a", None)
    store.close()
    assert OffsetStore(tmp_path / "o.log").items() == {"c": 3}
