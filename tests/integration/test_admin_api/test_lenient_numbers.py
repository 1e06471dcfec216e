"""POST /api/queues/{vhost}/{queue}/get reads count and truncate as RabbitMQ's parse_int does:
numeric strings and floats are taken, anything else is 400 ["not_integer", VALUE] with the
value as sent. Each answer here is what RabbitMQ 3.10.8 gave for the same body."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sievemq.testing.admin_client import q

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def queue(http: httpx.Client, qname: str) -> str:
    http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True}).raise_for_status()
    body = {"routing_key": qname, "payload": "x", "payload_encoding": "string", "properties": {}}
    assert http.post("/api/exchanges/%2F/amq.default/publish", json=body).json() == {"routed": True}
    return qname


def _get(http: httpx.Client, queue: str, **fields: Any) -> httpx.Response:
    body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", **fields}
    return http.post(f"/api/queues/%2F/{q(queue)}/get", json=body)


@pytest.mark.parametrize("count", ["1", "+1", 1.7, 1])
def test_numeric_strings_and_floats_are_counts(http: httpx.Client, queue: str, count: Any) -> None:
    got = _get(http, queue, count=count)
    assert got.status_code == 200, got.text
    assert [m["payload"] for m in got.json()] == ["x"]


@pytest.mark.parametrize("truncate", ["3", 2.5])
def test_truncate_is_read_the_same_way(http: httpx.Client, queue: str, truncate: Any) -> None:
    assert _get(http, queue, truncate=truncate).status_code == 200


@pytest.mark.parametrize("count", ["x", "1 ", True, None, "1.5"])
def test_anything_else_is_not_integer_with_the_value_as_sent(
    http: httpx.Client, queue: str, count: Any
) -> None:
    got = _get(http, queue, count=count)
    assert got.status_code == 400
    assert got.json() == {"error": "bad_request", "reason": ["not_integer", count]}
