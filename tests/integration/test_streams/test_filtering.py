"""Broker-side filtering end to end (x-stream-filter-value, x-stream-filter; docs/compatibility.md).

Messages are published in batches (one write, so they can share a chunk) with single values,
arrays of values, no value and the empty string. A filtered consumer must get EXACTLY the
matching messages, in order, with their headers intact; the expected set is computed from the
published values with the rule of docs/compatibility.md, "Filtering".
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient, decode_props, props_bytes

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine

FV = "x-stream-filter-value"

BATCHES: list[list[Any]] = [
    ["emea", "amer", None, "apac", "emea"],
    [["emea", "amer"], "amer", "amer", None],
    ["apac", "apac", "apac"],  # a chunk that holds no emea/amer at all
    [["amer", "apac"], "", "emea", ["apac", "emea", "amer"]],
    [None, None],  # only unfiltered messages
]
LIVE = ["amer", None, "emea", ["emea", "apac"]]


def values_of(fv: Any) -> set[str]:
    if fv is None or fv == "":
        return set()
    return {fv} if isinstance(fv, str) else set(fv)


def matches(fv: Any, wanted: set[str], unfiltered: bool, match_all: bool) -> bool:
    have = values_of(fv)
    if not have:
        return unfiltered
    return wanted <= have if match_all else bool(wanted & have)


def message(i: int, fv: Any) -> tuple[bytes, bytes]:
    headers: dict[str, Any] = {"n": i}
    if fv is not None:
        headers[FV] = fv
    return props_bytes(headers=headers), f"m{i}".encode()


def open_client(server: ServerProcess) -> RawClient:
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    return client


def publish_all(client: RawClient, queue: str, batches: list[list[Any]], start: int) -> int:
    i = start
    for batch in batches:
        items = []
        for fv in batch:
            items.append(message(i, fv))
            i += 1
        client.publish_confirmed(1, "", queue, items)
    return i


@pytest.fixture
def stream(server: ServerProcess, qname: str) -> str:
    client = open_client(server)
    ok = client.rpc(
        commands.Queue.Declare(queue=qname, durable=True, arguments={"x-queue-type": "stream"})
    )
    assert isinstance(ok, commands.Queue.DeclareOk)
    client.confirm_select(1)
    publish_all(client, qname, BATCHES, 0)
    client.close()
    return qname


ALL = [fv for batch in BATCHES for fv in batch]

CASES = [
    ({"x-stream-filter": "emea"}, {"emea"}, False, False),
    ({"x-stream-filter": "emea", "x-stream-match-unfiltered": True}, {"emea"}, True, False),
    ({"x-stream-filter": ["emea", "apac"]}, {"emea", "apac"}, False, False),
    (
        {"x-stream-filter": ["emea", "amer"], "x-filter-match-type": "any"},
        {"emea", "amer"},
        False,
        False,
    ),
    (
        {"x-stream-filter": ["emea", "amer"], "x-filter-match-type": "all"},
        {"emea", "amer"},
        False,
        True,
    ),
    (
        {
            "x-stream-filter": ["amer"],
            "x-stream-match-unfiltered": True,
            "x-filter-match-type": "all",
        },
        {"amer"},
        True,
        True,
    ),
    ({"x-stream-filter": "nobody"}, {"nobody"}, False, False),
]


@pytest.mark.parametrize(
    ("args", "wanted", "unfiltered", "match_all"),
    CASES,
    ids=[
        "one",
        "one+unfiltered",
        "array-any",
        "array-any-explicit",
        "array-all",
        "all+unfiltered",
        "none-match",
    ],
)
def test_filtered_consumer_gets_exactly_the_matches(
    server: ServerProcess,
    stream: str,
    args: dict[str, Any],
    wanted: set[str],
    unfiltered: bool,
    match_all: bool,
) -> None:
    expected = [i for i, fv in enumerate(ALL) if matches(fv, wanted, unfiltered, match_all)]
    client = open_client(server)
    client.start_consumer(1, stream, {"x-stream-offset": "first", **args}, prefetch=3)
    got = client.collect(1, len(expected))
    assert [body.decode() for _m, _p, body in got] == [f"m{i}" for i in expected]
    offsets = []
    for (_method, raw, _body), i in zip(got, expected, strict=True):
        headers = decode_props(raw).headers
        offsets.append(headers.pop("x-stream-offset"))
        want = {"n": i} if ALL[i] is None else {"n": i, FV: ALL[i]}
        assert headers == want
    assert offsets == sorted(offsets)

    # live: messages published while the consumer waits at the end are filtered the same way
    pub = open_client(server)
    pub.confirm_select(1)
    publish_all(pub, stream, [LIVE], len(ALL))
    pub.close()
    live = [len(ALL) + k for k, fv in enumerate(LIVE) if matches(fv, wanted, unfiltered, match_all)]
    got = client.collect(1, len(live))
    assert [body.decode() for _m, _p, body in got] == [f"m{i}" for i in live]
    client.close()


def test_match_unfiltered_without_filter_is_ignored(server: ServerProcess, stream: str) -> None:
    client = open_client(server)
    client.start_consumer(
        1, stream, {"x-stream-offset": "first", "x-stream-match-unfiltered": True}
    )
    got = client.collect(1, len(ALL))
    assert [body.decode() for _m, _p, body in got] == [f"m{i}" for i in range(len(ALL))]
    client.close()


def test_filter_with_numeric_offset(server: ServerProcess, stream: str) -> None:
    client = open_client(server)
    client.start_consumer(1, stream, {"x-stream-offset": "first"})
    everything = client.collect(1, len(ALL))
    offsets = [decode_props(raw).headers["x-stream-offset"] for _m, raw, _b in everything]
    client.close()
    start = 7
    client = open_client(server)
    client.start_consumer(1, stream, {"x-stream-offset": offsets[start], "x-stream-filter": "amer"})
    expected = [i for i in range(start, len(ALL)) if "amer" in values_of(ALL[i])]
    got = client.collect(1, len(expected))
    assert [body.decode() for _m, _p, body in got] == [f"m{i}" for i in expected]
    client.close()


def test_filter_value_limits_are_accepted(server: ServerProcess, qname: str) -> None:
    client = open_client(server)
    client.rpc(
        commands.Queue.Declare(queue=qname, durable=True, arguments={"x-queue-type": "stream"})
    )
    client.confirm_select(1)
    long_value = "é" * 2048  # 4096 bytes of UTF-8
    many = [f"v{k}" for k in range(64)]
    client.publish_confirmed(
        1, "", qname, [message(0, long_value), message(1, many), message(2, "plain")]
    )
    client.close()
    for flt, want in [(long_value, ["m0"]), ("v63", ["m1"]), (["v0", "plain"], ["m1", "m2"])]:
        consumer = open_client(server)
        consumer.start_consumer(1, qname, {"x-stream-offset": "first", "x-stream-filter": flt})
        got = consumer.collect(1, len(want))
        assert [body.decode() for _m, _p, body in got] == want
        consumer.close()


def raw_headers_props(entries: bytes) -> bytes:
    """Property bytes with only a headers table whose field bytes are given verbatim."""
    return struct.pack(">H", 0x2000) + struct.pack(">I", len(entries)) + entries


def field(name: str, typed_value: bytes) -> bytes:
    return bytes([len(name)]) + name.encode() + typed_value


def longstr(raw: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(raw)) + raw


BAD_VALUES = {
    "int": field(FV, b"I" + struct.pack(">i", 5)),
    "too-long": field(FV, longstr(b"x" * 4097)),
    "nul": field(FV, longstr(b"a\x00b")),
    "invalid-utf8": field(FV, longstr(b"\xff\xfe")),
    "table": field(FV, b"F" + struct.pack(">I", 0)),
    "array-with-int": field(
        FV, b"A" + struct.pack(">I", 6 + 5) + longstr(b"a") + b"I" + struct.pack(">i", 1)
    ),
    "array-of-65": field(
        FV,
        b"A"
        + struct.pack(">I", sum(5 + len(f"v{k}") for k in range(65)))
        + b"".join(longstr(f"v{k}".encode()) for k in range(65)),
    ),
}


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_bad_filter_value_closes_channel_and_keeps_earlier_messages(
    server: ServerProcess, qname: str, kind: str
) -> None:
    client = open_client(server)
    client.rpc(
        commands.Queue.Declare(queue=qname, durable=True, arguments={"x-queue-type": "stream"})
    )
    client.confirm_select(1)
    client.publish_confirmed(1, "", qname, [message(0, "good"), message(1, None)])
    client.publish(1, "", qname, raw_headers_props(BAD_VALUES[kind]), b"bad")
    _, close = client.next_method()
    assert isinstance(close, commands.Channel.Close), close
    assert close.reply_code == 406
    assert close.reply_text.startswith("PRECONDITION_FAILED - invalid x-stream-filter-value: "), (
        close.reply_text
    )
    client.send_frame(commands.Channel.CloseOk(), 1)
    # the connection is still usable, and the stream holds exactly the two good messages
    client.open_channel(2)
    client.start_consumer(2, qname, {"x-stream-offset": "first"})
    got = client.collect(2, 2)
    assert [body for _m, _p, body in got] == [b"m0", b"m1"]
    client.close()
