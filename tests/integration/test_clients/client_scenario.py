"""The client scenario shared by every AMQP library test (and the amqplib script).

Each library gets a small driver with the same four operations; `run_scenario` does the
steps once for all of them and `check_scenario` asserts what any user would check: bodies,
order, `x-stream-offset`, exchange and routing key, and every property round-tripping exactly.

The stream gets 20 messages: A = 0..9, then (after the next wall-clock second starts, so a
timestamp offset can split them) B = 10..18, then 19 on its own (so it is a chunk of its own
and `last` must give exactly it). The `next` consumer gets message 20, published after it
attached.
"""

from __future__ import annotations

import asyncio
import calendar
import datetime as dt
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

N_A = 10
N_TOTAL = 20
PREFETCH = 5
QUIET = 0.3  # seconds without a delivery before a consumer is considered finished
BASE_TS = 1_700_000_000


def message_spec(i: int) -> dict[str, Any]:
    """Message i: JSON-able so the node script can publish the very same message."""
    return {
        "body": f"body-{i}-" + "x" * (i * 7),
        "content_type": "application/octet-stream",
        "message_id": f"mid-{i}",
        "correlation_id": f"cid-{i}",
        "timestamp": BASE_TS + i,
        "priority": i % 10,
        "delivery_mode": 2,
        "headers": {
            "s": f"str-{i}",
            "i": i * 1000,
            "neg": -i,
            "b": i % 2 == 0,
            "empty": "",
            "nested": {"k": "v", "deep": {"n": i, "list": ["a", i]}},
            "arr": [1, "two", {"t": 3}, [4, "five"]],
        },
    }


@dataclass
class Delivery:
    """A delivery normalised across libraries (timestamps as int seconds, body as str)."""

    body: str
    exchange: str
    routing_key: str
    redelivered: bool
    offset: Any  # the x-stream-offset header, popped from headers
    properties: dict[str, Any] = field(default_factory=dict)


def epoch_seconds(value: Any) -> Any:
    """Library timestamps (int or datetime, naive = UTC) as int seconds."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return calendar.timegm(value.utctimetuple())
        return int(value.timestamp())
    return value


def make_delivery(
    body: bytes | str,
    exchange: str,
    routing_key: str,
    redelivered: bool,
    props: dict[str, Any],
) -> Delivery:
    """Build a Delivery from a library's raw values; pops x-stream-offset from headers."""
    headers = dict(props.get("headers") or {})
    offset = headers.pop("x-stream-offset", None)
    properties = {
        "content_type": props.get("content_type"),
        "message_id": props.get("message_id"),
        "correlation_id": props.get("correlation_id"),
        "timestamp": epoch_seconds(props.get("timestamp")),
        "priority": props.get("priority"),
        "delivery_mode": props.get("delivery_mode"),
        "headers": headers,
    }
    text = body.decode() if isinstance(body, bytes | bytearray) else body
    return Delivery(text, exchange, routing_key, redelivered, offset, properties)


def expected_properties(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in spec if k != "body"}


class Driver(Protocol):
    """What each library driver offers; methods may be sync or async."""

    def setup(self, exchange: str, queue: str, routing_key: str) -> Any: ...

    def publish(self, exchange: str, routing_key: str, specs: list[dict[str, Any]]) -> Any:
        """Publish all with confirms and return once every one is confirmed."""

    def consume(
        self,
        queue: str,
        offset: Any,
        count: int,
        after_attach: list[dict[str, Any]],
        exchange: str,
        routing_key: str,
    ) -> Any:
        """Consume with prefetch PREFETCH and the given x-stream-offset (None = absent),
        acking each delivery; publish `after_attach` once consume-ok arrived; return the
        deliveries seen until `count` arrived and then QUIET seconds passed (or timeout)."""

    def close(self) -> Any: ...


async def _call(result: Any) -> Any:
    if inspect.isawaitable(result):
        return await result
    return result


@dataclass
class ScenarioResult:
    split_ts: int
    results: dict[str, list[Delivery]]


def timestamp_arg(seconds: int) -> dt.datetime:
    """A consumer argument most Python libraries encode as AMQP timestamp ('T')."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


async def run_scenario_async(
    driver: Driver,
    exchange: str,
    queue: str,
    ts_arg: Callable[[int], Any] = timestamp_arg,
) -> ScenarioResult:
    rk = "rk"
    specs = [message_spec(i) for i in range(N_TOTAL + 1)]
    await _call(driver.setup(exchange, queue, rk))
    await _call(driver.publish(exchange, rk, specs[:N_A]))
    split = int(time.time()) + 1
    await asyncio.sleep(max(0.0, split - time.time()) + 0.05)
    await _call(driver.publish(exchange, rk, specs[N_A : N_TOTAL - 1]))
    await _call(driver.publish(exchange, rk, specs[N_TOTAL - 1 : N_TOTAL]))
    results: dict[str, list[Delivery]] = {}

    async def consume(name: str, offset: Any, count: int, after: list[dict[str, Any]]) -> None:
        results[name] = await _call(driver.consume(queue, offset, count, after, exchange, rk))

    await consume("first", "first", N_TOTAL, [])
    first = results["first"]
    seventh = first[7].offset if len(first) > 7 else 7
    await consume("offset", seventh, N_TOTAL - 7, [])
    await consume("last", "last", 1, [])
    await consume("timestamp", ts_arg(split), N_TOTAL - N_A, [])
    await consume("interval", "1h", N_TOTAL, [])
    await consume("next", "next", 1, specs[N_TOTAL : N_TOTAL + 1])
    await _call(driver.close())
    return ScenarioResult(split, results)


def run_scenario(driver: Driver, exchange: str, queue: str) -> ScenarioResult:
    return asyncio.run(run_scenario_async(driver, exchange, queue))


EXPECTED_INDICES: dict[str, list[int]] = {
    "first": list(range(N_TOTAL)),
    "offset": list(range(7, N_TOTAL)),
    "last": [N_TOTAL - 1],
    "timestamp": list(range(N_A, N_TOTAL)),
    "interval": list(range(N_TOTAL)),
    "next": [N_TOTAL],
}


def check_scenario(result: ScenarioResult, exchange: str) -> None:
    """Assert every consumer saw exactly its messages, intact, with consistent offsets."""
    results = result.results
    assert set(results) == set(EXPECTED_INDICES)
    first = results["first"]
    offsets = [d.offset for d in first]
    assert offsets and offsets[0] == 0, f"first offset of a new stream: {offsets[:1]}"
    assert all(isinstance(o, int) for o in offsets), offsets
    assert offsets == sorted(set(offsets)), f"offsets not strictly increasing: {offsets}"
    offset_of = {d.body: d.offset for d in first}
    for name, indices in EXPECTED_INDICES.items():
        got = results[name]
        want_bodies = [message_spec(i)["body"] for i in indices]
        assert [d.body for d in got] == want_bodies, f"{name}: wrong messages or order"
        for i, delivery in zip(indices, got, strict=True):
            spec = message_spec(i)
            assert delivery.exchange == exchange, (name, i, delivery.exchange)
            assert delivery.routing_key == "rk", (name, i, delivery.routing_key)
            assert delivery.redelivered is False, (name, i)
            assert delivery.properties == expected_properties(spec), (name, i)
            if spec["body"] in offset_of:
                assert delivery.offset == offset_of[spec["body"]], (name, i, delivery.offset)
            else:
                assert isinstance(delivery.offset, int) and delivery.offset > offsets[-1]
