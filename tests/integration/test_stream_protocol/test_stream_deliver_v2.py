"""Deliver v2 (the committed chunk id) for clients that ask for it, and ResolveOffsetSpec (31)
answered as RabbitMQ 4.3 answers it (its rabbit_stream_SUITE ``test_resolve_offset_spec``
cases), over raw frames: rstream decodes Deliver v1 only and has no ResolveOffsetSpec."""

from __future__ import annotations

import struct
import time

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient, string

OK, STREAM_DOES_NOT_EXIST = 1, 2


@pytest.fixture
def raw(server: ServerProcess) -> RawStreamClient:
    client = RawStreamClient(server)
    assert client.open() == OK
    yield client  # type: ignore[misc]
    client.close()


def _code(body: bytes) -> int:
    return int(struct.unpack_from(">H", body, 4)[0])


def _create(raw: RawStreamClient, stream: str) -> None:
    raw.request(13, string(stream) + struct.pack(">i", 0))
    assert _code(raw.read_frame()[2]) == OK


def _publish_confirmed(raw: RawStreamClient, publishing_id: int, body: bytes) -> None:
    """One Publish frame of one message (so one chunk), then its PublishConfirm."""
    raw.send(2, struct.pack(">BiQI", 0, 1, publishing_id, len(body)) + body)
    key, _, reply = raw.read_frame()
    assert key == 3 and struct.unpack(">BiQ", reply) == (0, 1, publishing_id)


def _versions(raw: RawStreamClient, mine: list[tuple[int, int, int]]) -> list[tuple[int, ...]]:
    raw.request(27, struct.pack(">i", len(mine)) + b"".join(struct.pack(">HHH", *v) for v in mine))
    key, _, body = raw.read_frame()
    assert key == 0x801B and _code(body) == OK
    (count,) = struct.unpack_from(">i", body, 6)
    return [struct.unpack_from(">HHH", body, 10 + 6 * i) for i in range(count)]


def _resolve(
    raw: RawStreamClient, stream: str, kind: int, value: int | None = None, props: bytes = b""
) -> tuple[int, int, int]:
    spec = struct.pack(">H", kind)
    if kind == 4:
        spec += struct.pack(">Q", value or 0)
    elif kind == 5:
        spec += struct.pack(">q", value or 0)
    raw.request(31, string(stream) + spec + (props or struct.pack(">i", 0)))
    key, version, body = raw.read_frame()
    assert (key, version) == (0x801F, 1)
    corr, code, offset_type, offset = struct.unpack(">IHHQ", body)
    assert corr == raw.corr
    return code, offset_type, offset


def test_exchange_command_versions_lists_resolve_offset_spec_last_in_rabbitmq_order(
    raw: RawStreamClient,
) -> None:
    versions = _versions(raw, [(2, 1, 2)])
    # rabbit_stream_utils:command_versions/0 of RabbitMQ 4.3.5, in its order
    keys = [1, 2, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 22, 23, 24, 25, 28, 29, 30, 31]
    assert [v[0] for v in versions] == keys
    assert versions[-1] == (31, 1, 1) and 8 not in [v[0] for v in versions]
    assert versions[1] == (2, 1, 2)


def test_resolve_offset_spec_as_rabbitmq_4_3(raw: RawStreamClient, qname: str) -> None:
    _create(raw, qname)
    for kind in (1, 2, 3):  # first, last, next on an empty stream: 0
        assert _resolve(raw, qname, kind) == (OK, 4, 0)
    raw.request(1, struct.pack(">B", 0) + string("") + string(qname))
    assert _code(raw.read_frame()[2]) == OK
    _publish_confirmed(raw, 1, b"hello")
    _publish_confirmed(raw, 2, b"hello")  # two chunks: 0 and 1
    assert _resolve(raw, qname, 1) == (OK, 4, 0)  # first
    assert _resolve(raw, qname, 2) == (OK, 4, 1)  # last: the last chunk
    assert _resolve(raw, qname, 3) == (OK, 4, 2)  # next
    assert _resolve(raw, qname, 4, 0) == (OK, 4, 0)
    future = int(time.time() * 1000) + 3_600_000
    assert _resolve(raw, qname, 5, future) == (OK, 4, 2)  # after every chunk: next
    assert _resolve(raw, qname, 5, 0) == (OK, 4, 0)
    filters = struct.pack(">i", 1) + string("filter.0") + string("v")
    assert _resolve(raw, qname, 1, props=filters) == (OK, 4, 0)
    assert _resolve(raw, "no-such-stream-" + qname, 1)[0] == STREAM_DOES_NOT_EXIST


def _subscribe_and_deliver(raw: RawStreamClient, stream: str) -> tuple[int, bytes]:
    """Subscribe from first with credit 1; the first Deliver's version and body."""
    raw.request(7, struct.pack(">B", 5) + string(stream) + struct.pack(">HHi", 1, 1, 0))
    key, _, body = raw.read_frame()
    assert key == 0x8007 and _code(body) == OK
    key, version, body = raw.read_frame()
    assert key == 8
    return version, body


def test_deliver_v2_only_for_a_client_that_lists_it(server: ServerProcess, qname: str) -> None:
    pub = RawStreamClient(server)
    v1 = RawStreamClient(server)
    v2 = RawStreamClient(server)
    try:
        for c in (pub, v1, v2):
            assert c.open() == OK
        _create(pub, qname)
        pub.request(1, struct.pack(">B", 0) + string("") + string(qname))
        assert _code(pub.read_frame()[2]) == OK
        for i in range(3):
            _publish_confirmed(pub, i + 1, f"m{i}".encode())  # chunks 0, 1, 2

        _versions(v1, [(2, 1, 2)])  # asks nothing about Deliver: v1
        version, body = _subscribe_and_deliver(v1, qname)
        assert version == 1 and body[0] == 5
        assert struct.unpack_from(">Q", body, 1 + 24)[0] == 0  # chunk id in the header

        _versions(v2, [(2, 1, 2), (8, 1, 2)])  # Deliver up to v2
        version, body = _subscribe_and_deliver(v2, qname)
        assert version == 2 and body[0] == 5
        (committed,) = struct.unpack_from(">Q", body, 1)
        header = body[9 : 9 + 48]
        magic, chunk_type, entries = struct.unpack_from(">BBH", header)
        assert (magic, chunk_type) == (0x50, 0) and 1 <= entries <= 3
        assert struct.unpack_from(">Q", header, 24)[0] == 0  # this chunk: offset 0
        assert committed == 2  # the newest chunk stored
        (length,) = struct.unpack_from(">I", body, 9 + 48)
        assert body[9 + 48 + 4 : 9 + 48 + 4 + length] == b"m0"
    finally:
        for c in (pub, v1, v2):
            c.close()
