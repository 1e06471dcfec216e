"""The Grafana dashboards in deploy/grafana/ query only metrics SieveMQ exposes: every metric
name in every panel's PromQL is on the gateway's /metrics or /metrics/per-object (the two
scrape jobs of deploy/prometheus.yml) after AMQP 0-9-1, HTTP and Stream-protocol traffic."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pika
from rstream import AMQPMessage, Producer

from sievemq.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[3]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
# PromQL words that look like metric names: functions are followed by "(", these are not
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
KEYWORDS |= {"unless", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, label matchers, ranges,
    grouping labels and Grafana's ``$__`` variables left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges, $__rate_interval
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end() :].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS or expr[m.start() - 1 : m.start()] == "$":
            continue
        names.add(m.group())
    return names


def test_metric_names_are_parsed_from_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum(rate(a_bucket{le!="1", x=~"y|z"}[$__rate_interval]))'
        ' by (le)) / on (vhost) b + sum by (queue) (c_total{queue!=""}) > bool 0'
    )
    assert metric_names(expr) == {"a_bucket", "b", "c_total"}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = list(dashboard["panels"])
    for p in dashboard["panels"]:
        panels += p.get("panels", [])  # rows
    return panels


def _traffic(server: ServerProcess) -> None:
    """What makes every family show: classic and stream queues, confirms, acks, a filtered
    consumer, a named consumer's offset, Stream-protocol publishes."""
    http = httpx.Client(base_url=server.admin_url, auth=("guest", "guest"))
    http.put("/api/streams/%2F/orders", json={"arguments": {"x-stream-filter-size-bytes": 32}})
    for i in range(12):
        body = {"payload": f"o{i}", "filter_value": ("emea", "apac")[i % 2]}
        http.post("/api/streams/%2F/orders/messages", json=body)
    http.put("/api/streams/%2F/orders/consumers/billing/offset", json={"offset": 3})
    conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work")
    for _ in range(5):
        ch.basic_publish("", "work", b"job")
    method, _props, _body = ch.basic_get("work")
    assert method is not None
    ch.basic_ack(method.delivery_tag)
    ch.basic_qos(prefetch_count=50)
    got: list[bytes] = []
    args = {"x-stream-offset": "first", "x-stream-filter": "apac"}
    ch.basic_consume("orders", lambda c, m, p, b: got.append(b), arguments=args)
    while len(got) < 6:
        conn.process_data_events(time_limit=0.1)

    async def stream_publish() -> None:
        async with Producer(
            server.host, port=server.stream_port, username="guest", password="guest"
        ) as producer:
            await producer.send("orders", AMQPMessage(body=b"from the stream protocol"))

    asyncio.run(stream_publish())
    conn.close()
    http.close()


def test_every_panel_queries_metrics_sievemq_exposes(server: ServerProcess) -> None:
    assert len(DASHBOARDS) == 3, DASHBOARDS
    _traffic(server)
    exposed: set[str] = set()
    for path in ("/metrics", "/metrics/per-object"):
        text = httpx.get(server.admin_url + path).text
        exposed |= {
            line.split("{")[0].split(" ")[0]
            for line in text.splitlines()
            if line and not line.startswith("#")
        }
    missing: dict[str, set[str]] = {}
    queried = 0
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in _panels(dashboard):
            for target in panel.get("targets", []):
                names = metric_names(target["expr"])
                assert names, (path.name, panel["title"], target["expr"])
                queried += 1
                if names - exposed:
                    missing[f"{path.name}: {panel['title']}"] = names - exposed
    assert missing == {}
    assert queried >= 30
