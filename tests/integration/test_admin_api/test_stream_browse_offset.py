"""``GET /api/streams/{vhost}/{name}/messages?offset=`` takes what ``x-stream-offset`` takes
(issue 21): first, last, next, an offset, a timestamp (ISO 8601), an interval before now."""

from __future__ import annotations

import datetime

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect


def publish_each_in_its_own_chunk(server: ServerProcess, name: str, n: int) -> None:
    """One confirmed publish at a time: every message is a chunk of its own."""
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(n):
        ch.basic_publish("", name, f"m{i}".encode())
    conn.close()


def offsets(server: ServerProcess, name: str, offset: str) -> list[int]:
    with client(server) as http:
        r = http.get(f"/api/streams/%2F/{q(name)}/messages", params={"offset": offset})
    assert r.status_code == 200, r.text
    return [m["offset"] for m in r.json()["messages"]]


def test_words_and_numbers(server: ServerProcess, qname: str) -> None:
    publish_each_in_its_own_chunk(server, qname, 5)
    assert offsets(server, qname, "first") == [0, 1, 2, 3, 4]
    assert offsets(server, qname, "last") == [4]  # the last chunk, as a consumer's 'last'
    assert offsets(server, qname, "next") == []  # only what comes after: nothing yet
    assert offsets(server, qname, "3") == [3, 4]
    assert offsets(server, qname, "-7") == [0, 1, 2, 3, 4]  # negative: first, as AMQP
    assert offsets(server, qname, "99") == []
    with client(server) as http:
        page = http.get(f"/api/streams/%2F/{q(qname)}/messages", params={"offset": "next"})
    assert page.json()["next_offset"] == 5  # where a poller continues


def test_timestamps_and_intervals(server: ServerProcess, qname: str) -> None:
    publish_each_in_its_own_chunk(server, qname, 3)
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert offsets(server, qname, future.isoformat()) == []
    assert offsets(server, qname, "2000-01-01T00:00:00Z") == [0, 1, 2]
    assert offsets(server, qname, "2000-01-01") == [0, 1, 2]
    assert offsets(server, qname, "1h") == [0, 1, 2]  # published within the last hour
    with client(server) as http:
        stored = http.get(f"/api/streams/%2F/{q(qname)}/messages").json()["messages"]
        second = stored[1]["timestamp_ms"] // 1000 * 1000  # AMQP timestamps are seconds
        by_ms = http.get(
            f"/api/streams/%2F/{q(qname)}/messages", params={"timestamp": second}
        ).json()["messages"]
    when = datetime.datetime.fromtimestamp(second / 1000, datetime.UTC).isoformat()
    assert offsets(server, qname, when) == [m["offset"] for m in by_ms]


def test_what_x_stream_offset_refuses_is_a_400_naming_the_choices(
    server: ServerProcess, qname: str
) -> None:
    publish_each_in_its_own_chunk(server, qname, 1)
    with client(server) as http:
        for bad in ("bogus", "12abc", "2026-13-45T99:00"):
            r = http.get(f"/api/streams/%2F/{q(qname)}/messages", params={"offset": bad})
            assert r.status_code == 400, (bad, r.text)
            assert f"invalid offset '{bad}'" in r.json()["reason"]
            assert "first, last, next" in r.json()["reason"]
