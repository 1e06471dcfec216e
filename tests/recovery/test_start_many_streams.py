"""A node with many streams starts without touching them (50,000 streams per node).

Start replays ``definitions.log`` once (work linear in its lines, counted, not timed) and
opens no stream file: a stream's directory is recovered and opened on its first use. The
proof is by counters on a few hundred streams (the timed 50,000 is ``bench/streams_scale.py
--start-n``): no ``Stream.open`` at start, one validation per distinct argument table, no
definitions line written back, no descriptor per stream in the real server; and every stream,
with what was written to it before a SIGKILL, is there on first use.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from sievemq.gateway.model import broker as broker_module
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.stream import arguments
from sievemq.storage import Message, Stream
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(180)

STREAMS = 300
STREAM = {"x-queue-type": "stream"}


def _build(data: Path, n: int) -> None:
    broker = Broker(data)
    vhost = broker.vhost("/")
    for i in range(n):
        args = dict(STREAM, **({"x-max-age": "1D"} if i % 100 == 0 else {}))
        vhost.declare_queue(f"s{i}", durable=True, arguments=args)
    for i in (0, 7, n - 1):
        body = b"body of s%d" % i
        vhost.get_queue(f"s{i}").stream.append([Message((), "", f"s{i}", b"\x00\x00", body)])
    broker.close()


def test_start_opens_no_stream_and_replays_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    _build(data, STREAMS)
    log = data / "definitions.log"
    size_before = log.stat().st_size

    opened: list[Path] = []
    real_open = Stream.open.__func__  # type: ignore[attr-defined]

    def counting_open(cls: type[Stream], directory: Path, config: object) -> Stream:
        opened.append(Path(directory))
        return real_open(cls, directory, config)  # type: ignore[no-any-return]

    validated: list[str] = []
    real_validate = arguments.stream_arguments_from_table

    def counting_validate(table: dict[str, object], queue: str, vhost: str) -> object:
        validated.append(queue)
        return real_validate(table, queue, vhost)

    monkeypatch.setattr(Stream, "open", classmethod(counting_open))
    monkeypatch.setattr(broker_module, "stream_arguments_from_table", counting_validate)
    broker = Broker(data)
    try:
        vhost = broker.vhost("/")
        assert len(vhost.queues) == STREAMS
        assert opened == []  # no stream touched by the start
        assert len(validated) == 2  # two distinct argument tables among 300 streams
        assert broker.store._lines == STREAMS + 2  # one replayed line per object (+ vhost, user)
        assert log.stat().st_size == size_before  # nothing written back
        assert vhost.get_queue("s100").arguments.max_age_ms == 86_400_000

        # a message count is read without opening (test_idle_stream_listing.py) ...
        assert vhost.get_queue("s7").message_count == 1
        assert opened == []
        # ... first use opens that stream only, with what it held
        assert vhost.get_queue("s7").stream.end_offset == 1
        assert [p.name for p in opened] == ["s7"]
        assert vhost.get_queue(f"s{STREAMS - 1}").stream.end_offset == 1
        assert vhost.get_queue("s8").stream.end_offset == 0
        assert len(opened) == 3
    finally:
        broker.close()  # closes only the three opened streams
    assert len(opened) == 3


def test_server_with_many_streams_holds_no_descriptor_per_stream_after_sigkill(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    _build(data, STREAMS)
    with ServerProcess(data) as server:
        baseline = len(os.listdir(f"/proc/{server.pid}/fd"))
        assert baseline < 64, baseline  # not one per stream
        conn = connect(server)
        ch = conn.channel()
        ch.confirm_delivery()
        names = random.Random(3).sample([f"s{i}" for i in range(STREAMS)], 5)
        for name in names:
            ch.queue_declare(name, passive=True)
            ch.basic_publish("", name, name.encode())
        conn.close()
        server.kill()
        server.start()
        conn = connect(server)
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        for name in [*names, "s0"]:
            got: list[bytes] = []
            tag = ch.basic_consume(
                name,
                lambda c, m, p, b, got=got: (got.append(b), c.basic_ack(m.delivery_tag)),
                arguments={"x-stream-offset": "first"},
            )
            expected = [b"body of s0"] if name == "s0" else [name.encode()]
            while len(got) < len(expected):
                conn.process_data_events(time_limit=0.1)
            ch.basic_cancel(tag)
            assert got[: len(expected)] == expected, name
        conn.close()
        assert server.stop() == 0
