"""SIGKILL while streams are being declared: every declare-ok'd stream survives the restart.

A raw client pipelines queue.declare for many streams (several in flight) and the server is
killed after a random number of declare-oks; after the restart a passive declare of every
stream whose declare-ok arrived must succeed, and the data directory must hold no torn
definitions. Three rounds on the same data directory.
"""

from __future__ import annotations

import random

import pytest
from pamqp import commands, frame

from sievemq.gateway.model import definitions
from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

pytestmark = pytest.mark.timeout(180)


def declare(name: str, channel: int = 1) -> bytes:
    return frame.marshal(
        commands.Queue.Declare(queue=name, durable=True, arguments={"x-queue-type": "stream"}),
        channel,
    )


def test_sigkill_mid_declare_loses_no_confirmed_stream(fresh_server: ServerProcess) -> None:
    rng = random.Random(7)
    confirmed: set[str] = set()
    server = fresh_server
    for rnd in range(3):
        client = RawClient(server.host, server.amqp_port)
        client.handshake()
        client.open_channel()
        kill_after = rng.randrange(10, 60)
        names = [f"r{rnd}-s{i}" for i in range(400)]
        sent = 0
        acked = 0
        # keep 8 declares in flight, so the kill lands in the middle of some
        while acked < kill_after:
            while sent < len(names) and sent - acked < 8:
                client.send(declare(names[sent]))
                sent += 1
            _, reply = client.next_method()
            assert isinstance(reply, commands.Queue.DeclareOk), reply
            confirmed.add(reply.queue)
            acked += 1
        server.kill()
        client.close()
        server.start()
        check = RawClient(server.host, server.amqp_port)
        check.handshake()
        check.open_channel()
        for name in sorted(confirmed):
            check.send_frame(commands.Queue.Declare(queue=name, passive=True), 1)
            _, reply = check.next_method()
            assert isinstance(reply, commands.Queue.DeclareOk), (name, reply)
        check.close()
    server.stop()
    stored = definitions.load(server.data_dir)
    assert stored is not None
    assert confirmed <= {q["name"] for q in stored["queues"]}
