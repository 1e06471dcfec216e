"""An AMQP 1.0 client gets a clear refusal: our 0-9-1 header back, then the socket closes (what
a RabbitMQ without its AMQP 1.0 plugin answers, checked side by side with 3.10.8), and the
server log names the protocol the client asked for.

RabbitMQ 4's ``rabbitmq-amqp-python-client`` needs python-qpid-proton, which has no Linux
wheel in the registry (built from C sources at install), so this checks the bytes it sends
with a raw socket instead.
"""

from __future__ import annotations

import time

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.raw import PROTOCOL_HEADER, RawClient

pytestmark = pytest.mark.timeout(60)


def _logged(server: ServerProcess, text: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if text in server.stderr():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("header", "named"),
    [
        (b"AMQP\x00\x01\x00\x00", "it asked for AMQP 1.0;"),
        (b"AMQP\x03\x01\x00\x00", "it asked for AMQP 1.0 (SASL layer);"),
    ],
    ids=["amqp-1.0", "amqp-1.0-sasl"],
)
def test_amqp_1_0_gets_the_0_9_1_header_and_a_close(
    server: ServerProcess, header: bytes, named: str
) -> None:
    client = RawClient(server.host, server.amqp_port)
    try:
        # sent in two pieces: the refusal waits for the whole header to name it
        client.send(header[:5])
        client.send(header[5:])
        assert client.read_until_eof() == PROTOCOL_HEADER
    finally:
        client.close()
    assert _logged(server, named), server.stderr()[-2000:]
    assert "SieveMQ speaks AMQP 0-9-1" in server.stderr()
