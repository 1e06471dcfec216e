"""Prometheus endpoints over a real server, parsed with prometheus_client's own parser."""

from __future__ import annotations

import httpx
import pika
from prometheus_client.parser import text_string_to_metric_families

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q


def scrape(server: ServerProcess, path: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    r = httpx.get(server.admin_url + path, timeout=10)  # no credentials, as RabbitMQ's
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_metrics_totals_and_per_object(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        assert http.put(f"/api/streams/%2F/{q(qname)}", json={}).status_code == 201
        for value in ("red", "blue", "red"):
            http.post(
                f"/api/streams/%2F/{q(qname)}/messages",
                json={"payload": value, "filter_value": value},
            )
    conn = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@{server.host}:{server.amqp_port}/%2F")
    )
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got = []
    for _m, _p, body in ch.consume(
        qname,
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
        inactivity_timeout=2,
    ):
        if body is None:
            break
        got.append(body)
        if len(got) == 2:
            break
    totals = scrape(server, "/metrics")
    per = scrape(server, "/metrics/per-object")
    # every per-object series belongs to a typed, documented family (promtool's lint): the
    # counters' HELP/TYPE lines must name the _total series
    per_text = httpx.get(server.admin_url + "/metrics/per-object", timeout=10).text
    untyped = [f.name for f in text_string_to_metric_families(per_text) if f.type == "unknown"]
    assert untyped == []
    conn.close()
    assert got == [b"red", b"red"]
    for name in (
        "rabbitmq_build_info",
        "rabbitmq_identity_info",
        "rabbitmq_connections",
        "rabbitmq_channels",
        "rabbitmq_consumers",
        "rabbitmq_queues",
        "rabbitmq_queue_messages",
        "rabbitmq_stream_segments",
        "rabbitmq_global_messages_received_total",
        "rabbitmq_global_messages_delivered_total",
        "sievemq_stream_chunks_scanned_total",
        "sievemq_append_seconds_count",
        "sievemq_fsync_seconds_count",
    ):
        assert name in totals, name
    assert totals["rabbitmq_connections"][0][1] >= 1
    assert totals["rabbitmq_consumers"][0][1] >= 1
    assert totals["sievemq_append_seconds_count"][0][1] >= 3  # one batch per HTTP publish
    assert totals["rabbitmq_queue_messages"][0][0] == {}  # totals carry no labels
    labels = {"vhost": "/", "queue": qname}
    mine = {name: [v for lab, v in samples if lab == labels] for name, samples in per.items()}
    assert mine["rabbitmq_queue_messages"] == [3.0]
    assert mine["rabbitmq_queue_consumers"] == [1.0]
    assert mine["rabbitmq_queue_messages_published_total"] == [3.0]
    assert mine["rabbitmq_stream_segments"] == [1.0]
    assert mine["sievemq_stream_messages_delivered_total"][0] >= 2
    assert mine["sievemq_stream_chunks_skipped_bloom_total"][0] >= 1  # the blue chunk
    identity = per["rabbitmq_identity_info"][0][0]
    assert set(identity) == {
        "rabbitmq_node",
        "rabbitmq_cluster",
        "rabbitmq_cluster_permanent_id",
        "rabbitmq_endpoint",
    }
