"""``sievemq-stored-chunks``: Deliver carries stored chunks in the record-table layout, read by
Spark's network client (``sievemq.spark.stream_client``) over plain TCP and TLS, decoded by the
file mode's columnar decoder; filter values skip chunks on the server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pyarrow as pa
import pytest
from rstream.exceptions import OffsetNotFound

from sievemq.spark.arrow_read import ReadSettings
from sievemq.spark.network import NetTask, net_streams, read_net_range
from sievemq.spark.options import parse_options
from sievemq.spark.planning import choose_start
from sievemq.spark.schema import arrow_schema, source_schema
from sievemq.spark.source import RangePartition, SieveDataSource
from sievemq.spark.stream_client import StreamURI, connect
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import consumer
from sievemq.testing.tls import make_cert, tls_args

REGIONS = ("eu", "us", "ap")


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    cert = make_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert.cert))  # the client trusts the test's cert
    proc = ServerProcess(tmp_path / "data", tls_args(cert)).start()
    yield proc
    assert proc.running, proc.stderr()
    proc.stop()


def _publish(server: ServerProcess, count: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(server.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("orders", durable=True, arguments={"x-queue-type": "stream"})
        for i in range(count):
            headers = {"x-stream-filter-value": REGIONS[i // 100 % 3], "i": i}
            ch.basic_publish("", "orders", f"m{i}".encode(), pika.BasicProperties(headers=headers))
    finally:
        conn.close()


def _bodies(uri: str, start: int, until: int, *values: str) -> list[bytes]:
    schema = arrow_schema(source_schema(False))
    settings = ReadSettings(columns=tuple(schema.names), filter_values=values)
    out: list[bytes] = []
    for batch in read_net_range(NetTask(uri, "/", "orders", start, until), settings, schema):
        out += batch.column(schema.get_field_index("body")).to_pylist()
    return out


def _skipped(server: ServerProcess) -> int:
    got = httpx.get(
        f"{server.admin_url}/api/streams/%2F/orders", auth=("guest", "guest"), timeout=30
    )
    return int(got.json()["filter_stats"]["chunks_skipped"])


def test_stored_chunks_over_tcp_and_tls(tls_server: ServerProcess) -> None:
    server = tls_server
    _publish(server, 300)
    plain = f"rabbitmq-stream://guest:guest@127.0.0.1:{server.stream_port}/%2F"
    tls = f"rabbitmq-stream+tls://guest:guest@localhost:{server.stream_tls_port}/%2F"
    with connect(StreamURI.parse(plain), "orders") as client:
        assert client.stream_stats("orders") == (0, 300, 299)
        assert client.query_offset("nobody", "orders") is None
    for uri in (plain, tls):
        assert _bodies(uri, 0, 300) == [f"m{i}".encode() for i in range(300)]
        assert _bodies(uri, 250, 260) == [f"m{i}".encode() for i in range(250, 260)]
    before = _skipped(server)
    # the range ends among chunks the filter skips: the server's progress marker ends the read
    assert _bodies(plain, 0, 300, "us") == [f"m{i}".encode() for i in range(100, 200)]
    assert _skipped(server) - before == 200
    assert _bodies(tls, 0, 150, "eu", "ap") == [f"m{i}".encode() for i in range(100)]


def test_a_named_consumers_offset_is_where_a_network_read_starts(tls_server: ServerProcess) -> None:
    server = tls_server
    _publish(server, 50)

    async def store() -> None:
        async with consumer(server) as c:
            await c.store_offset("orders", "app", 41)  # no reply: query until it is there
            for _ in range(100):
                try:
                    if await c.query_offset("orders", "app") == 41:
                        return
                except OffsetNotFound:  # until the store is applied
                    pass
                await asyncio.sleep(0.1)

    asyncio.run(store())
    uri = f"rabbitmq-stream://guest:guest@127.0.0.1:{server.stream_port}/%2F"
    options = parse_options({"uri": uri, "stream": "orders", "consumerName": "app"})
    (net,) = net_streams(options)
    assert net.stored == 41 and net.state.end == 50
    assert choose_start(options, net.ref, net.state, net.stored, streaming=False) == 42
    missing = parse_options({"uri": uri, "stream": "orders", "consumerName": "other"})
    (other,) = net_streams(missing)
    assert other.stored is None
    assert choose_start(missing, other.ref, other.state, None, streaming=False) == 0


def test_timestamp_bounds_become_an_offset_range_on_the_server(tls_server: ServerProcess) -> None:
    server = tls_server
    _publish(server, 120)  # one chunk per message, timestamps never decreasing
    uri = f"rabbitmq-stream://guest:guest@127.0.0.1:{server.stream_port}/%2F"
    schema = arrow_schema(source_schema(False))
    settings = ReadSettings(columns=tuple(schema.names))
    ms: list[int] = []  # each row's chunk timestamp in ms
    for batch in read_net_range(NetTask(uri, "/", "orders", 0, 120), settings, schema):
        micros = batch.column(schema.get_field_index("timestamp")).cast(pa.int64())
        ms += [t // 1000 for t in micros.to_pylist()]
    start_ms, end_ms = ms[40], ms[90]
    source = SieveDataSource(
        {
            "uri": uri,
            "stream": "orders",
            "startingTimestamp": str(start_ms),
            "endingTimestamp": str(end_ms),
        }
    )
    reader = source.reader(source.schema())
    tasks = [p.task for p in reader.partitions() if isinstance(p, RangePartition)]
    # from the first chunk stamped at or after the start to the first one at or after the end
    lo, hi = ms.index(start_ms), ms.index(end_ms)
    assert lo <= 40 and [(t.start, t.until) for t in tasks] == ([(lo, hi)] if lo < hi else [])
