"""Node-wide publish counts count each message once, however many queues it was routed
to, and keep the stream protocol apart: ``/api/overview``'s ``publish`` and Prometheus's
``rabbitmq_global_messages_{received,routed,confirmed}_total{protocol=...}``, on a server
of their own so that the counts are exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from sievemq.testing import ServerProcess, start_server_process
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import producer


def _metric(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in the scrape")


async def _stream_publish(server: ServerProcess, stream: str, n: int) -> None:
    async with producer(server) as prod:
        for i in range(n):
            await prod.send_wait(stream, f"s{i}".encode())


def test_a_message_routed_to_two_queues_counts_once(tmp_path: Path) -> None:
    with start_server_process(tmp_path / "data") as server:
        conn = connect(server)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("fan", "fanout")
        ch.queue_declare("st", durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_declare("cq", durable=True)
        ch.queue_bind("st", "fan")
        ch.queue_bind("cq", "fan")
        for i in range(3):  # each to both queues
            ch.basic_publish("fan", "", f"m{i}".encode())
        ch.basic_publish("", "nobody", b"x")  # confirmed, dropped as unroutable
        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish("fan", "", b"rolled back")
        tx.tx_rollback()
        conn.close()
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
            routed = http.post(
                "/api/exchanges/%2F/fan/publish",
                json={
                    "routing_key": "",
                    "payload": "h",
                    "payload_encoding": "string",
                    "properties": {},
                },
            ).json()
            assert routed == {"routed": True}
            asyncio.run(_stream_publish(server, "st", 2))
            stats = http.get("/api/overview").json()["message_stats"]
            scrape = http.get("/metrics").text
            per_queue = {
                name: http.get(f"/api/queues/%2F/{name}").json()["message_stats"]["publish"]
                for name in ("st", "cq")
            }
    # 3 + 1 (unroutable) + 1 (HTTP) on AMQP, 2 on the stream protocol; each copy per queue
    assert stats["publish"] == 7
    assert stats["drop_unroutable"] == 1
    assert per_queue == {"st": 4 + 2, "cq": 4}
    expected = {
        ("received", "amqp091"): 5,
        ("routed", "amqp091"): 4,
        ("confirmed", "amqp091"): 4,  # the HTTP publish has no publisher confirm
        ("received", "stream"): 2,
        ("routed", "stream"): 2,
        ("confirmed", "stream"): 2,
    }
    got = {
        (name, proto): _metric(
            scrape, f'rabbitmq_global_messages_{name}_total{{protocol="{proto}"}}'
        )
        for name, proto in expected
    }
    assert got == expected
