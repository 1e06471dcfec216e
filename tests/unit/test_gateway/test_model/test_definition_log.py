"""The definitions log: incremental, torn-tail safe, compacted, converting the old JSON file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sievemq.gateway.model import definitions
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.model.definitions import DefinitionStore

STREAMS = BrokerSettings(default_queue_type="stream")


def queue(name: str) -> dict[str, object]:
    return {"vhost": "/", "name": name, "arguments": {"x-queue-type": "stream"}}


def test_put_delete_and_reload(tmp_path: Path) -> None:
    with DefinitionStore(tmp_path) as store:
        assert store.load() is None
        store.put("queues", queue("a"))
        store.put("queues", queue("b"))
        store.put("permissions", {"user": "u", "vhost": "/", "configure": ".*"})  # any section
        store.delete("queues", {"vhost": "/", "name": "a"})
        store.commit()
    with DefinitionStore(tmp_path) as store:
        data = store.load()
    assert data == {
        "queues": [queue("b")],
        "permissions": [{"user": "u", "vhost": "/", "configure": ".*"}],
        "version": 1,
    }


def test_save_writes_only_what_differs(tmp_path: Path) -> None:
    log = tmp_path / definitions.LOG_NAME
    big = {"vhosts": [{"name": "/"}], "queues": [queue(f"q{i}") for i in range(500)]}
    definitions.save(tmp_path, big)
    size = log.stat().st_size
    big["queues"].append(queue("new"))
    definitions.save(tmp_path, big)
    assert log.stat().st_size - size < 200  # one line, not 501
    big["queues"] = big["queues"][1:]
    definitions.save(tmp_path, big)
    assert definitions.load(tmp_path)["queues"] == big["queues"]  # type: ignore[index]


def test_a_torn_or_corrupt_tail_is_cut_off(tmp_path: Path) -> None:
    with DefinitionStore(tmp_path) as store:
        store.put("queues", queue("kept"))
        store.commit()
    log = tmp_path / definitions.LOG_NAME
    whole = log.read_bytes()
    log.write_bytes(whole + b'0000abcd ["put","queues","x",{"na')  # SIGKILL mid-write
    assert definitions.load(tmp_path)["queues"] == [queue("kept")]  # type: ignore[index]
    assert log.read_bytes() == whole
    line = bytearray(definitions._line("put", "queues", "k", queue("bad")))
    line[20] ^= 1  # a flipped bit: the CRC does not match
    log.write_bytes(whole + bytes(line))
    assert definitions.load(tmp_path)["queues"] == [queue("kept")]  # type: ignore[index]


def test_the_log_is_compacted(tmp_path: Path) -> None:
    with DefinitionStore(tmp_path) as store:
        for i in range(3000):
            store.put("queues", queue("flip"))
            store.put("queues", {**queue("flip"), "arguments": {"n": i}})
            store.commit()
    lines = (tmp_path / definitions.LOG_NAME).read_bytes().count(b"\n")
    assert lines < 4 * 1024 + 10
    assert definitions.load(tmp_path)["queues"] == [  # type: ignore[index]
        {**queue("flip"), "arguments": {"n": 2999}}
    ]


def test_old_definitions_json_is_converted(tmp_path: Path) -> None:
    old = {
        "version": 1,
        "vhosts": [{"name": "/"}],
        "users": [],
        "exchanges": [],
        "queues": [queue("legacy")],
        "bindings": [],
    }
    (tmp_path / definitions.FILE_NAME).write_text(json.dumps(old))
    broker = Broker(tmp_path, STREAMS)
    assert "legacy" in broker.vhost("/").queues
    broker.close()
    assert not (tmp_path / definitions.FILE_NAME).exists()
    again = Broker(tmp_path, STREAMS)
    assert "legacy" in again.vhost("/").queues
    again.close()


def test_a_declare_appends_one_line_whatever_the_number_of_streams(tmp_path: Path) -> None:
    broker = Broker(tmp_path, STREAMS)
    vhost = broker.vhost("/")
    log = tmp_path / definitions.LOG_NAME
    vhost.declare_exchange("x", "direct")
    for i in range(300):
        vhost.declare_queue(f"s{i}")
    before = log.read_bytes().count(b"\n")
    vhost.declare_queue("one-more")
    vhost.bind("queue", "one-more", "x", "rk")
    assert log.read_bytes().count(b"\n") - before == 2
    vhost.delete_queue("one-more")  # the queue and its binding
    assert log.read_bytes().count(b"\n") - before == 4
    broker.close()
    again = Broker(tmp_path, STREAMS)
    assert len(again.vhost("/").queues) == 300
    assert not list(again.vhost("/").bindings())
    again.close()


def _compared_by(broker: Broker, change: Callable[[], object]) -> tuple[int, int]:
    """(items compared with the stored ones, lines appended) by one change."""
    log = broker.data_dir / definitions.LOG_NAME
    compared, lines = broker.store.compared, log.read_bytes().count(b"\n")
    change()
    return broker.store.compared - compared, log.read_bytes().count(b"\n") - lines


def test_classic_declares_and_user_changes_do_not_compare_the_streams(tmp_path: Path) -> None:
    def costs(streams: int) -> list[tuple[int, int]]:
        broker = Broker(tmp_path / str(streams), STREAMS)
        vhost = broker.vhost("/")
        vhost.declare_exchange("x", "direct")
        for i in range(streams):
            vhost.declare_queue(f"s{i}")
        classic = {"x-queue-type": "classic"}
        quorum = {"x-queue-type": "quorum"}
        out = [
            _compared_by(broker, lambda: vhost.declare_queue("c", arguments=classic)),
            _compared_by(broker, lambda: vhost.declare_queue("q", arguments=quorum)),
            _compared_by(broker, lambda: vhost.bind("queue", "c", "x", "rk")),
            _compared_by(broker, lambda: vhost.delete_queue("c")),  # the queue and its binding
            _compared_by(broker, lambda: broker.users.add("bob", "pw")),
            _compared_by(broker, broker.save_definitions),
            _compared_by(broker, lambda: broker.add_vhost("other")),
            _compared_by(broker, lambda: broker.delete_vhost("other")),
        ]
        broker.close()
        again = Broker(tmp_path / str(streams), STREAMS)
        assert len(again.vhost("/").queues) == streams
        assert set(again.vhost("/").classic.queues) == {"q"}
        assert not list(again.vhost("/").bindings())
        assert "bob" in again.users and "other" not in again.vhosts
        again.close()
        return out

    few, many = costs(3), costs(300)
    assert few == many  # the same items compared and lines written, whatever the streams
    assert [lines for _, lines in many] == [1, 1, 1, 2, 0, 1, 1, 1]
    assert max(compared for compared, _ in many) < 10
