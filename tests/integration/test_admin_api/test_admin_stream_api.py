"""SieveMQ's stream API over HTTP (docs/admin-api.md), on a real server, with pika consumers."""

from __future__ import annotations

import base64
import time

import pika

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q


def make_stream(server: ServerProcess, name: str, **args: object) -> None:
    with client(server) as http:
        r = http.put(f"/api/streams/%2F/{q(name)}", json={"arguments": args})
        assert r.status_code == 201, r.text


def publish(
    server: ServerProcess, name: str, n: int, value: str | None = None, **headers: object
) -> None:
    with client(server) as http:
        for i in range(n):
            body: dict[str, object] = {
                "payload": f"{value or 'none'}-{i}",
                "properties": {"headers": dict(headers)},
            }
            if value is not None:
                body["filter_value"] = value
            r = http.post(f"/api/streams/%2F/{q(name)}/messages", json=body)
            assert r.json() == {"routed": True, "stored": True}


def test_stream_view_and_lifecycle(server: ServerProcess, qname: str) -> None:
    make_stream(server, qname, **{"x-stream-filter-size-bytes": 32})
    publish(server, qname, 3, "red")
    with client(server) as http:
        again = http.put(
            f"/api/streams/%2F/{q(qname)}", json={"arguments": {"x-stream-filter-size-bytes": 32}}
        )
        other = http.put(
            f"/api/streams/%2F/{q(qname)}", json={"arguments": {"x-stream-filter-size-bytes": 64}}
        )
        view = http.get(f"/api/streams/%2F/{q(qname)}").json()
        listed = [s["name"] for s in http.get("/api/streams").json()]
        assert http.delete(f"/api/streams/%2F/{q(qname)}").status_code == 204
        gone = http.get(f"/api/streams/%2F/{q(qname)}")
    assert again.status_code == 204
    assert other.status_code == 400 and "inequivalent arg" in other.json()["reason"]
    assert view["messages"] == 3 and view["first_offset"] == 0 and view["last_offset"] == 2
    assert view["published"] == 3 and view["chunks"] >= 1 and view["segments"] == 1
    assert view["filter_size_bytes"] == 32
    assert view["first_timestamp_ms"] <= view["last_timestamp_ms"]
    assert view["arguments"]["x-stream-filter-size-bytes"] == 32
    assert set(view["filter_stats"]) >= {
        "chunks_scanned",
        "chunks_skipped",
        "chunks_false_positive",
        "sql_errors",
    }
    assert qname in listed
    assert gone.status_code == 404


def test_browse_by_offset_filter_sql_and_bounds(server: ServerProcess, qname: str) -> None:
    make_stream(server, qname)
    publish(server, qname, 5, "red", region="emea", k=1)
    publish(server, qname, 5, "blue", region="amer", k=2)
    with client(server) as http:
        base = f"/api/streams/%2F/{q(qname)}/messages"
        first = http.get(base, params={"limit": 3}).json()
        rest = http.get(base, params={"offset": first["next_offset"], "limit": 100}).json()
        blue = http.get(base, params={"filter": "blue", "limit": 100}).json()
        sql = http.get(base, params={"sql": "region = 'emea' AND k = 1", "limit": 100}).json()
        newest = http.get(base, params={"newest": "true", "limit": 2}).json()
        later = http.get(base, params={"timestamp": int(time.time() * 1000) + 60_000}).json()
        small = http.get(base, params={"max_bytes": 1, "limit": 100}).json()
        bad_sql = http.get(base, params={"sql": "region = "})
        bad_limit = http.get(base, params={"limit": 0})
        missing = http.get("/api/streams/%2F/no-such-stream/messages")
    assert [m["offset"] for m in first["messages"]] == [0, 1, 2]
    assert first["next_offset"] == 3 and first["stopped_by"] == "limit"
    assert first["complete"] is False
    assert [m["offset"] for m in rest["messages"]] == list(range(3, 10))
    assert rest["complete"] is True and rest["next_offset"] == 10
    assert [m["payload"] for m in blue["messages"]] == [f"blue-{i}" for i in range(5)]
    assert all(m["filter_values"] == ["blue"] for m in blue["messages"])
    assert [m["payload"] for m in sql["messages"]] == [f"red-{i}" for i in range(5)]
    m0 = first["messages"][0]
    assert m0["payload_encoding"] == "string" and m0["routing_key"] == qname
    assert m0["properties"]["headers"]["region"] == "emea"
    assert [m["offset"] for m in newest["messages"]] == [8, 9]
    assert later["messages"] == []
    assert len(small["messages"]) == 1 and small["stopped_by"] == "bytes"
    assert bad_sql.status_code == 400 and "invalid sql" in bad_sql.json()["reason"]
    assert bad_limit.status_code == 400
    assert missing.status_code == 404


def test_binary_payloads_are_base64(server: ServerProcess, qname: str) -> None:
    make_stream(server, qname)
    with client(server) as http:
        r = http.post(
            f"/api/streams/%2F/{q(qname)}/messages",
            json={"payload": base64.b64encode(b"\xff\x00").decode(), "payload_encoding": "base64"},
        )
        assert r.status_code == 200
        got = http.get(f"/api/streams/%2F/{q(qname)}/messages").json()["messages"]
        lavin = http.post(
            f"/api/queues/%2F/{q(qname)}/stream", json={"count": 5, "offset": "first"}
        ).json()
    assert got[0]["payload_encoding"] == "base64"
    assert base64.b64decode(got[0]["payload"]) == b"\xff\x00"
    assert lavin[0]["payload_bytes"] == 2 and lavin[0]["redelivered"] is False
    assert lavin[0]["payload_encoding"] == "base64" and lavin[0]["message_count"] == 1


def test_named_consumer_offsets_and_lag(server: ServerProcess, qname: str) -> None:
    make_stream(server, qname)
    publish(server, qname, 10)
    with client(server) as http:
        base = f"/api/streams/%2F/{q(qname)}/consumers/app-1/offset"
        assert http.get(base).status_code == 404
        assert http.put(base, json={"offset": 3}).status_code == 204
        got = http.get(base).json()
        listed = http.get(f"/api/streams/%2F/{q(qname)}/offsets").json()
        bad = http.put(base, json={"offset": -1})
    assert got == {"stream": qname, "vhost": "/", "consumer": "app-1", "offset": 3, "lag": 6}
    assert listed == [got]
    assert bad.status_code == 400
    # a named consumer resumes after the stored offset
    conn = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@{server.host}:{server.amqp_port}/%2F")
    )
    ch = conn.channel()
    ch.basic_qos(prefetch_count=20)
    first = None
    for _m, _p, body in ch.consume(
        qname, arguments={"x-stream-consumer-name": "app-1"}, inactivity_timeout=3
    ):
        first = body
        break
    conn.close()
    assert first == b"none-4"
    with client(server) as http:
        assert http.delete(base).status_code in (204, 404)


def test_live_consumers_show_lag_and_filter(server: ServerProcess, qname: str) -> None:
    make_stream(server, qname)
    publish(server, qname, 4, "red")
    conn = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@{server.host}:{server.amqp_port}/%2F")
    )
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(
        qname,
        lambda *a: None,
        consumer_tag="slow",
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
    )
    conn.process_data_events(0.3)
    with client(server) as http:
        consumers = http.get(f"/api/streams/%2F/{q(qname)}/consumers").json()
        advice = http.get(
            f"/api/streams/%2F/{q(qname)}/filter-advice", params={"target_fpr": 0.01}
        ).json()
        bad = http.get(f"/api/streams/%2F/{q(qname)}/filter-advice", params={"target_fpr": 2})
    conn.close()
    assert len(consumers) == 1
    c = consumers[0]
    assert c["consumer_tag"] == "slow" and c["prefetch_count"] == 1
    assert c["filter"] == {"values": ["red"], "match_unfiltered": False, "match_type": "any"}
    assert c["lag"] is not None and 0 < c["lag"] <= 4  # one delivered unacked, rest waiting
    assert advice["current_filter_size_bytes"] == 16 and advice["chunks_sampled"] >= 1
    assert bad.status_code == 400
