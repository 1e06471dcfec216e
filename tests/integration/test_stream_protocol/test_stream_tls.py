"""The stream protocol over TLS (`--stream-tls-port`, with the AMQPS certificate), rstream."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rstream import ConsumerOffsetSpecification, OffsetType, Producer
from rstream.client import Client

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import consumer
from sievemq.testing.tls import CertFiles, make_cert, tls_args
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, CertFiles]]:
    certs = make_cert(tmp_path_factory.mktemp("certs"))
    with ServerProcess(tmp_path_factory.mktemp("stls") / "data", tls_args(certs)) as proc:
        yield proc, certs


async def test_publish_and_consume_over_tls(tls_server: tuple[ServerProcess, CertFiles]) -> None:
    server, certs = tls_server
    assert server.stream_tls_port not in (0, server.stream_port)
    context = certs.client_context()
    async with Producer(
        server.host,
        server.stream_tls_port,
        username="guest",
        password="guest",
        ssl_context=context,
    ) as p:
        await p.create_stream("tls-s")
        await p.send_wait("tls-s", b"secret")
    # Metadata over TLS names the TLS listener (rstream connects to the leader it names)
    client = Client(
        server.host, server.stream_tls_port, ssl_context=context, frame_max=1 << 20, heartbeat=60
    )
    await client.start()
    try:
        await client.authenticate(vhost="/", username="guest", password="guest")
        leader, _ = await client.query_leader_and_replicas("tls-s")
    finally:
        await client.close()
    assert leader.port == server.stream_tls_port
    got: list[bytes] = []
    async with consumer(server) as c:  # the plain listener sees the same stream
        await c.subscribe(
            "tls-s",
            lambda m, ctx: got.append(m),  # type: ignore[arg-type,return-value]
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        )
        await eventually(lambda: got == [b"secret"])
