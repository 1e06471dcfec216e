"""Microbenchmark of the AMQP hot path: hand codec vs pamqp, per message. Prints JSON.

Decode: one publish as it arrives (method + content header + body frames in one read):
FrameReader + method_id + decode_basic_publish + decode_content_header (which checks the
properties), versus pamqp.frame.unmarshal of the three frames.
Encode: one delivery (Basic.Deliver + header with x-stream-offset + body), versus pamqp
marshalling the same three frames.
Properties as an application sends them (``*_unique``): 4,096 distinct property lists shaped
like loadgen ``-unique-props`` (content-type, headers ``seq`` + one of 50
``x-stream-filter-value``s, message-id, timestamp) taken in turn, so no memo keyed by the
bytes ever hits; ``*_identical`` sends the first one every time. ``publish_properties_*`` is
the publish path's property work per message (``publish_cache.property_filter_values``:
check + filter values), ``deliver_encoder_*`` one ``DeliveryEncoder.encode``.

Run: .venv/bin/python bench/amqp_codec.py [--number N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import struct
import time
import timeit
from collections.abc import Callable

from pamqp import body as pbody
from pamqp import commands, frame, header

from sievemq.amqp import frames, hotcodec, properties
from sievemq.gateway.session import publish_cache

BODY = b"x" * 100
PROPS = commands.Basic.Properties(
    content_type="application/json",
    delivery_mode=2,
    headers={"x-stream-filter-value": "eu-west", "tenant": "acme"},
)
RAW_PROPS = PROPS.marshal()
PUBLISH = b"".join(
    (
        frame.marshal(commands.Basic.Publish(0, "amq.direct", "orders.created"), 1),
        frame.marshal(header.ContentHeader(0, len(BODY), PROPS), 1),
        frame.marshal(pbody.ContentBody(BODY), 1),
    )
)


def hand_decode() -> None:
    reader = frames.FrameReader(131072, 1 << 20)
    (_, _, method), (_, _, head), (_, _, _body) = reader.feed(PUBLISH)
    hotcodec.method_id(method)
    hotcodec.decode_basic_publish(method)
    hotcodec.decode_content_header(head)


_READER = frames.FrameReader(131072, 1 << 20)


def hand_decode_warm_reader() -> None:
    (_, _, method), (_, _, head), (_, _, _body) = _READER.feed(PUBLISH)
    hotcodec.method_id(method)
    hotcodec.decode_basic_publish(method)
    hotcodec.decode_content_header(head)


def hand_decode_with_filter_value() -> None:
    (_, _, method), (_, _, head), (_, _, _body) = _READER.feed(PUBLISH)
    hotcodec.method_id(method)
    hotcodec.decode_basic_publish(method)
    props = hotcodec.decode_content_header(head)[2]
    properties.read_header(props, "x-stream-filter-value")


def pamqp_decode() -> None:
    data = PUBLISH
    pos = 0
    while pos < len(data):
        used, _, _ = frame.unmarshal(data[pos:])
        pos += used


def hand_encode() -> None:
    hotcodec.encode_delivery(
        1, "ctag-1", 42, "amq.direct", "orders.created", RAW_PROPS, BODY, 131072, 123456
    )


def hand_encode_joined() -> None:
    b"".join(hand_encode_pieces())


def hand_encode_pieces() -> list[bytes]:
    return hotcodec.encode_delivery(
        1, "ctag-1", 42, "amq.direct", "orders.created", RAW_PROPS, BODY, 131072, 123456
    )


def pamqp_encode() -> None:
    props = commands.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        headers={**PROPS.headers, "x-stream-offset": 123456},
    )
    b"".join(
        (
            frame.marshal(
                commands.Basic.Deliver("ctag-1", 42, False, "amq.direct", "orders.created"), 1
            ),
            frame.marshal(header.ContentHeader(0, len(BODY), props), 1),
            frame.marshal(pbody.ContentBody(BODY), 1),
        )
    )


def unique_props(seq: int) -> bytes:
    """A property list as loadgen -unique-props sends it (amqp091-go's encoding)."""
    content_type = b"application/octet-stream"
    value = f"v{seq % 50}".encode()
    table = b"".join(
        (
            b"\x15x-stream-filter-value" + b"S" + struct.pack(">I", len(value)) + value,
            b"\x03seq" + b"l" + struct.pack(">q", seq),
        )
    )
    message_id = f"{seq:x}-0".encode()
    return b"".join(
        (
            struct.pack(">H", 0x8000 | 0x2000 | 0x0080 | 0x0040),
            bytes((len(content_type),)) + content_type,
            struct.pack(">I", len(table)) + table,
            bytes((len(message_id),)) + message_id,
            struct.pack(">Q", 1_700_000_000 + seq),
        )
    )


UNIQUE = [unique_props(seq) for seq in range(4096)]


def cycling(items: list[bytes], fn: Callable[[bytes], object]) -> Callable[[], object]:
    next_item = itertools.cycle(items).__next__
    return lambda: fn(next_item())


_ENCODER = hotcodec.DeliveryEncoder(1, "ctag-1", 131072)


def deliver(props: bytes) -> None:
    _ENCODER.encode([], 42, "", "orders", props, BODY, 123456)


def per_call_us(fn: Callable[[], object], number: int) -> float:
    """Best of 5 runs, in microseconds of this process's CPU time per call (a busy
    neighbour on a shared machine inflates wall time far more than CPU time)."""
    return min(timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=50_000)
    number = parser.parse_args().number
    cases = {
        "decode_publish_hand": hand_decode,
        "decode_publish_hand_warm_reader": hand_decode_warm_reader,
        "decode_publish_hand_plus_filter_value": hand_decode_with_filter_value,
        "decode_publish_pamqp": pamqp_decode,
        "encode_delivery_hand": hand_encode,
        "encode_delivery_hand_joined": hand_encode_joined,
        "encode_delivery_pamqp": pamqp_encode,
        "publish_properties_unique": cycling(UNIQUE, publish_cache.property_filter_values),
        "publish_properties_identical": cycling(UNIQUE[:1], publish_cache.property_filter_values),
        "deliver_encoder_unique": cycling(UNIQUE, deliver),
        "deliver_encoder_identical": cycling(UNIQUE[:1], deliver),
    }
    results = {
        name: round(per_call_us(fn, number // 10 if "pamqp" in name else number), 3)
        for name, fn in cases.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "amqp_codec",
                "unit": "us_per_message",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "message": {"body_bytes": len(BODY), "properties_bytes": len(RAW_PROPS)},
                "results": results,
                "speedup_decode": round(
                    results["decode_publish_pamqp"] / results["decode_publish_hand_warm_reader"], 1
                ),
                "speedup_encode": round(
                    results["encode_delivery_pamqp"] / results["encode_delivery_hand"], 1
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
