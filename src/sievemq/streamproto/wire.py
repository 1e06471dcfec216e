"""Stream-protocol frames: split the byte stream, parse requests, encode replies.

All integers are big-endian. A frame is ``u32 size | u16 key | u16 version | body``; the
top bit of the key marks a response. ``string`` is i16 length + UTF-8 (-1 = null), ``bytes``
is i32 length + data, arrays are i32 count + items. Anything malformed raises
``FrameError``; the session answers it with Close(13, ...).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

# ---------------------------------------------------------------------------- keys
DECLARE_PUBLISHER = 1
PUBLISH = 2
PUBLISH_CONFIRM = 3
PUBLISH_ERROR = 4
QUERY_PUBLISHER_SEQUENCE = 5
DELETE_PUBLISHER = 6
SUBSCRIBE = 7
DELIVER = 8
CREDIT = 9
STORE_OFFSET = 10
QUERY_OFFSET = 11
UNSUBSCRIBE = 12
CREATE = 13
DELETE = 14
METADATA = 15
METADATA_UPDATE = 16
PEER_PROPERTIES = 17
SASL_HANDSHAKE = 18
SASL_AUTHENTICATE = 19
TUNE = 20
OPEN = 21
CLOSE = 22
HEARTBEAT = 23
ROUTE = 24
PARTITIONS = 25
CONSUMER_UPDATE = 26
EXCHANGE_COMMAND_VERSIONS = 27
STREAM_STATS = 28
CREATE_SUPER_STREAM = 29
DELETE_SUPER_STREAM = 30
RESOLVE_OFFSET_SPEC = 31
RESPONSE = 0x8000
# SieveMQ's own commands, between its cluster nodes only: keys from 0x7E00 (RabbitMQ's count
# up from 1). REPLICA_HOLDS: a stream replica tells its leader, on its subscription, what its
# copy holds: u8 subscription id, u64 epoch, u64 next offset (everything below it is
# written, and fdatasynced under --fsync always). No response. Commit by majority reads it
# (``cluster/commit.py``); from a connection that is no cluster node's it closes with 13.
REPLICA_HOLDS = 0x7E01

# ---------------------------------------------------------------------------- codes
OK = 1
STREAM_DOES_NOT_EXIST = 2
SUBSCRIPTION_ID_ALREADY_EXISTS = 3
SUBSCRIPTION_ID_DOES_NOT_EXIST = 4
STREAM_ALREADY_EXISTS = 5
STREAM_NOT_AVAILABLE = 6
SASL_MECHANISM_NOT_SUPPORTED = 7
AUTHENTICATION_FAILURE = 8
SASL_ERROR = 9
SASL_CHALLENGE = 10
AUTHENTICATION_FAILURE_LOOPBACK = 11
VIRTUAL_HOST_ACCESS_FAILURE = 12
UNKNOWN_FRAME = 13
FRAME_TOO_LARGE = 14
INTERNAL_ERROR = 15
ACCESS_REFUSED = 16
PRECONDITION_FAILED = 17
PUBLISHER_DOES_NOT_EXIST = 18
NO_OFFSET = 19

# offset specifications of Subscribe
OFFSET_FIRST = 1
OFFSET_LAST = 2
OFFSET_NEXT = 3
OFFSET_OFFSET = 4
OFFSET_TIMESTAMP = 5
OFFSET_NONE = 0  # ConsumerUpdate reply only: keep the subscription's own specification

# the commands this server handles and their versions, in RabbitMQ's order (clients such
# as rstream read the ExchangeCommandVersions reply by position)
COMMAND_VERSIONS: tuple[tuple[int, int, int], ...] = (
    (DECLARE_PUBLISHER, 1, 1),
    (PUBLISH, 1, 2),
    (QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (DELETE_PUBLISHER, 1, 1),
    (SUBSCRIBE, 1, 1),
    (CREDIT, 1, 1),
    (STORE_OFFSET, 1, 1),
    (QUERY_OFFSET, 1, 1),
    (UNSUBSCRIBE, 1, 1),
    (CREATE, 1, 1),
    (DELETE, 1, 1),
    (METADATA, 1, 1),
    (CLOSE, 1, 1),
    (HEARTBEAT, 1, 1),
    (ROUTE, 1, 1),
    (PARTITIONS, 1, 1),
    (STREAM_STATS, 1, 1),
    (CREATE_SUPER_STREAM, 1, 1),
    (DELETE_SUPER_STREAM, 1, 1),
    (RESOLVE_OFFSET_SPEC, 1, 1),
)
# Deliver is not in that list (RabbitMQ 4.3 does not list it either): the server sends it,
# and v2 goes to a connection whose own ExchangeCommandVersions request lists Deliver up to 2

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">IHH")  # size, key, version
_KEY_VERSION = struct.Struct(">HH")


class FrameError(ValueError):
    """A frame this server cannot parse (answered with Close 13)."""


class Cursor:
    """Reads the fields of one frame body in order; raises FrameError when it runs out."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, st: struct.Struct) -> int:
        try:
            (value,) = st.unpack_from(self.data, self.pos)
        except struct.error as error:
            raise FrameError(f"frame too short at byte {self.pos}") from error
        self.pos += st.size
        return int(value)

    def u8(self) -> int:
        return self._take(_U8)

    def u16(self) -> int:
        return self._take(_U16)

    def i16(self) -> int:
        return self._take(_I16)

    def u32(self) -> int:
        return self._take(_U32)

    def i32(self) -> int:
        return self._take(_I32)

    def u64(self) -> int:
        return self._take(_U64)

    def i64(self) -> int:
        return self._take(_I64)

    def raw(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise FrameError(f"field of {n} bytes runs past the frame end")
        out = self.data[self.pos : end]
        self.pos = end
        return bytes(out)

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            return ""
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as error:
            raise FrameError(f"string is not UTF-8: {error}") from error

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self.raw(n)

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.data):
            raise FrameError(f"bad array length {n}")
        return n

    def strings(self) -> list[str]:
        return [self.string() for _ in range(self.count())]

    def properties(self) -> dict[str, str]:
        """A [key, value] string map; an absent map (frame ends here) is empty."""
        if self.pos >= len(self.data):
            return {}
        out: dict[str, str] = {}
        for _ in range(self.count()):
            key = self.string()
            out[key] = self.string()
        return out

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------- framing


class Frame(NamedTuple):
    key: int
    version: int
    body: bytes  # after key and version


def split_frames(buffer: bytearray, max_size: int) -> tuple[list[Frame], int | None]:
    """Take every complete frame off the front of ``buffer``.

    Returns the frames and, when a frame announces more than ``max_size`` bytes (or fewer
    than the 4 bytes of key and version), that size: the caller closes with 14 (or 13).
    """
    frames, end, bad = frames_from(bytes(buffer), 0, max_size)
    del buffer[:end]
    return frames, bad


def frames_from(data: bytes, pos: int, max_size: int) -> tuple[list[Frame], int, int | None]:
    """Every complete frame of ``data`` from ``pos``: (frames, where the first incomplete
    one starts, the bad size as in ``split_frames`` or None). Each body is one slice of
    ``data``: no other copy (HOT PATH: the socket's bytes are read in place)."""
    frames: list[Frame] = []
    n = len(data)
    bad: int | None = None
    unpack_size = _U32.unpack_from
    unpack_kv = _KEY_VERSION.unpack_from
    add = frames.append
    new = tuple.__new__
    while n - pos >= 4:
        (size,) = unpack_size(data, pos)
        if size > max_size or size < 4:
            bad = size
            break
        end = pos + 4 + size
        if end > n:
            break
        key, version = unpack_kv(data, pos + 4)
        add(new(Frame, (key, version, data[pos + 8 : end])))
        pos = end
    return frames, pos, bad


# ---------------------------------------------------------------------------- encoding


def enc_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    return _U16.pack(len(raw)) + raw


def enc_properties(props: dict[str, str]) -> bytes:
    parts = [_I32.pack(len(props))]
    for key, value in props.items():
        parts.append(enc_string(key))
        parts.append(enc_string(value))
    return b"".join(parts)


def frame(key: int, body: bytes, version: int = 1) -> bytes:
    return _HEAD.pack(len(body) + 4, key, version) + body


def response(key: int, corr: int, code: int, extra: bytes = b"") -> bytes:
    """A reply to a request with a correlation id: key|0x8000, corr, code, then ``extra``."""
    return frame(key | RESPONSE, _U32.pack(corr) + _U16.pack(code) + extra)


def peer_properties_response(corr: int, props: dict[str, str]) -> bytes:
    return response(PEER_PROPERTIES, corr, OK, enc_properties(props))


def sasl_handshake_response(corr: int, mechanisms: Sequence[str]) -> bytes:
    body = _I32.pack(len(mechanisms)) + b"".join(enc_string(m) for m in mechanisms)
    return response(SASL_HANDSHAKE, corr, OK, body)


def tune(frame_max: int, heartbeat: int) -> bytes:
    return frame(TUNE, _U32.pack(frame_max) + _U32.pack(heartbeat))


def open_response(corr: int, code: int, props: dict[str, str]) -> bytes:
    return response(OPEN, corr, code, enc_properties(props) if code == OK and props else b"")


def heartbeat() -> bytes:
    return frame(HEARTBEAT, b"")


def close_request(corr: int, code: int, reason: str) -> bytes:
    return frame(CLOSE, _U32.pack(corr) + _U16.pack(code) + enc_string(reason))


def metadata_response(
    corr: int,
    brokers: Sequence[tuple[str, int]],
    streams: Iterable[tuple[str, int, int, Sequence[int]]],
) -> bytes:
    """The brokers (their reference is their index: advertised host and stream port) and
    per stream ``(name, code, leader reference, replica references)``; a stream without a
    reachable leader has code STREAM_DOES_NOT_EXIST or STREAM_NOT_AVAILABLE and leader
    ``NO_LEADER``, as RabbitMQ answers."""
    parts = [_U32.pack(corr), _I32.pack(len(brokers))]
    for ref, (host, port) in enumerate(brokers):
        parts += [_U16.pack(ref), enc_string(host), _U32.pack(port)]
    items = list(streams)
    parts.append(_I32.pack(len(items)))
    for name, code, leader, replicas in items:
        parts += [enc_string(name), _U16.pack(code), _U16.pack(leader), _I32.pack(len(replicas))]
        parts += [_U16.pack(r) for r in replicas]
    return frame(METADATA | RESPONSE, b"".join(parts))


NO_LEADER = 0xFFFF  # Metadata's leader reference for a stream without one


def metadata_update(code: int, stream: str) -> bytes:
    return frame(METADATA_UPDATE, _U16.pack(code) + enc_string(stream))


def publish_confirm(publisher_id: int, ids: Sequence[int]) -> bytes:
    return frame(
        PUBLISH_CONFIRM,
        _U8.pack(publisher_id) + _I32.pack(len(ids)) + struct.pack(f">{len(ids)}Q", *ids),
    )


def publish_error(publisher_id: int, errors: Sequence[tuple[int, int]]) -> bytes:
    body = [_U8.pack(publisher_id), _I32.pack(len(errors))]
    for pid, code in errors:
        body.append(_U64.pack(pid) + _U16.pack(code))
    return frame(PUBLISH_ERROR, b"".join(body))


def query_publisher_sequence_response(corr: int, code: int, sequence: int) -> bytes:
    return response(QUERY_PUBLISHER_SEQUENCE, corr, code, _U64.pack(sequence))


def query_offset_response(corr: int, code: int, offset: int) -> bytes:
    return response(QUERY_OFFSET, corr, code, _U64.pack(offset))


def credit_error(code: int, subscription_id: int) -> bytes:
    return frame(CREDIT | RESPONSE, _U16.pack(code) + _U8.pack(subscription_id))


def parse_command_versions(cur: Cursor) -> list[tuple[int, int, int]]:
    """The client's (key, min, max) list of an ExchangeCommandVersions request."""
    out = []
    for _ in range(cur.count()):
        out.append((cur.u16(), cur.u16(), cur.u16()))
    return out


def resolve_offset_spec_response(corr: int, code: int, offset: int) -> bytes:
    """RabbitMQ 4.3: the offset type is always 4 (offset), then the offset."""
    return response(RESOLVE_OFFSET_SPEC, corr, code, _U16.pack(OFFSET_OFFSET) + _U64.pack(offset))


def exchange_command_versions_response(corr: int) -> bytes:
    body = [_I32.pack(len(COMMAND_VERSIONS))]
    for key, lo, hi in COMMAND_VERSIONS:
        body.append(struct.pack(">HHH", key, lo, hi))
    return response(EXCHANGE_COMMAND_VERSIONS, corr, OK, b"".join(body))


def stream_stats_response(corr: int, code: int, stats: dict[str, int]) -> bytes:
    body = [_I32.pack(len(stats))]
    for key, value in stats.items():
        body.append(enc_string(key) + _I64.pack(value))
    return response(STREAM_STATS, corr, code, b"".join(body))


def streams_response(key: int, corr: int, code: int, streams: Sequence[str]) -> bytes:
    """Route and Partitions: corr, code, [stream]."""
    body = _I32.pack(len(streams)) + b"".join(enc_string(s) for s in streams)
    return response(key, corr, code, body)


def consumer_update(corr: int, subscription_id: int, active: bool) -> bytes:
    """Server-initiated ConsumerUpdate (single active consumer): the client answers
    0x801a with an offset specification."""
    return frame(CONSUMER_UPDATE, _U32.pack(corr) + _U8.pack(subscription_id) + _U8.pack(active))


class OffsetSpec(NamedTuple):
    kind: int  # OFFSET_* (OFFSET_NONE only in a ConsumerUpdate reply)
    value: int  # the offset (OFFSET_OFFSET) or timestamp in ms (OFFSET_TIMESTAMP), else 0


def parse_offset_spec(cur: Cursor, allow_none: bool = False) -> OffsetSpec:
    """u16 type, then u64 offset or i64 timestamp for the two types that carry one."""
    kind = cur.u16()
    if kind == OFFSET_OFFSET:
        return OffsetSpec(kind, cur.u64())
    if kind == OFFSET_TIMESTAMP:
        return OffsetSpec(kind, cur.i64())
    if kind in (OFFSET_FIRST, OFFSET_LAST, OFFSET_NEXT) or (allow_none and kind == OFFSET_NONE):
        return OffsetSpec(kind, 0)
    raise FrameError(f"unknown offset type {kind}")


class ConsumerUpdateReply(NamedTuple):
    corr: int
    code: int
    offset: OffsetSpec


def parse_consumer_update_reply(body: bytes) -> ConsumerUpdateReply:
    """0x801a: corr, code, offset specification. rstream also sends a u64 after the types
    that carry no value; it is ignored."""
    cur = Cursor(body)
    corr = cur.u32()
    code = cur.u16()
    return ConsumerUpdateReply(corr, code, parse_offset_spec(cur, allow_none=True))


# ---------------------------------------------------------------------------- publish

# sub-entry batch compression codes
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_ZSTD = 4


class PublishedEntry(NamedTuple):
    """One publishing id of a Publish frame: its payloads (several for a sub-entry batch)."""

    publishing_id: int
    filter_value: str | None
    payloads: list[bytes]
    error: int  # 0, or the code to answer with in a PublishError


_MAX_SUB_BATCH = 64 * 1024 * 1024


def _sub_batch(cur: Cursor, entry_type: int) -> tuple[list[bytes], int]:
    compression = (entry_type >> 4) & 0x07
    records = cur.u16()
    uncompressed = cur.u32()
    stored = cur.u32()
    data = cur.raw(stored)
    if records == 0 or uncompressed > _MAX_SUB_BATCH:
        return [], PRECONDITION_FAILED
    if compression == COMPRESSION_NONE:
        raw = data
    elif compression == COMPRESSION_GZIP:
        import gzip

        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError, ValueError):
            return [], PRECONDITION_FAILED
    elif compression == COMPRESSION_ZSTD:
        import zstandard

        try:
            raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=uncompressed)
        except zstandard.ZstdError:
            return [], PRECONDITION_FAILED
    else:
        return [], PRECONDITION_FAILED  # snappy, lz4: not supported
    inner = Cursor(raw)
    out = []
    try:
        for _ in range(records):
            out.append(inner.raw(inner.u32()))
    except FrameError:
        return [], PRECONDITION_FAILED
    return out, 0


def parse_publish(body: bytes, version: int) -> tuple[int, list[PublishedEntry]]:
    """Publish v1/v2: (publisher id, entries). A bad sub-entry batch is an entry with an
    error code (RabbitMQ rejects it with PublishError 17); a torn frame raises FrameError."""
    cur = Cursor(body)
    publisher_id = cur.u8()
    n = cur.count()
    entries: list[PublishedEntry] = []
    append = entries.append
    data = body
    unpack_q = _U64.unpack_from
    unpack_i = _I32.unpack_from
    unpack_h = _I16.unpack_from
    pos = cur.pos
    size = len(data)
    try:
        for _ in range(n):
            (pid,) = unpack_q(data, pos)
            pos += 8
            fv: str | None = None
            if version >= 2:
                (fl,) = unpack_h(data, pos)
                pos += 2
                if fl >= 0:
                    fv = data[pos : pos + fl].decode()
                    pos += fl
            (length,) = unpack_i(data, pos)
            pos += 4
            if length >= 0:
                end = pos + length
                if end > size:
                    raise FrameError("message runs past the frame end")
                append(PublishedEntry(pid, fv, [data[pos:end]], 0))
                pos = end
            else:
                if version >= 2:
                    raise FrameError("sub-entry batches are not allowed in Publish v2")
                cur.pos = pos - 4
                entry_type = cur.u8()
                payloads, error = _sub_batch(cur, entry_type)
                pos = cur.pos
                append(PublishedEntry(pid, None, payloads, error))
    except (struct.error, UnicodeDecodeError) as error:
        raise FrameError(f"malformed Publish frame: {error}") from error
    return publisher_id, entries


def replica_holds(subscription: int, epoch: int, next_offset: int) -> bytes:
    """A replica's acknowledgement of what its copy holds (``REPLICA_HOLDS``)."""
    return frame(REPLICA_HOLDS, struct.pack(">BQQ", subscription, epoch, next_offset))


# --------------------------------------------- SieveMQ's own frame: a replica's tracking
# A cluster leader sends it on a replica's subscription (``sievemq-replica=true``): the
# stream's named-consumer offsets, so that the replica's copy holds them too
# (docs/cluster.md). ``u8 flags | i32 count | count × (string name | i64 offset)``; offset
# -1: the name was deleted; flag TRACKING_SNAPSHOT: the whole set (names it lacks are gone).
TRACKING = 0x7F01
TRACKING_SNAPSHOT = 0x01
# and the stream's registered SQL subscriptions (``subscriptions.json``, whose slots the bits
# in the chunks' extra blobs mean): ``bytes`` (i32 length | the file as the leader wrote it)
SUBSCRIPTIONS = 0x7F02


# and the leader's committed offset (commit by majority): ``u64`` everything below it is
# held by a majority; the replica's readers read up to it
COMMITTED = 0x7F03


def committed(offset: int) -> bytes:
    return frame(COMMITTED, _U64.pack(offset))


def parse_committed(body: bytes) -> int:
    return Cursor(body).u64()


def subscriptions(raw: bytes) -> bytes:
    return frame(SUBSCRIPTIONS, _I32.pack(len(raw)) + raw)


def parse_subscriptions(body: bytes) -> bytes:
    return Cursor(body).bytes_()


def tracking(snapshot: bool, offsets: Iterable[tuple[str, int | None]]) -> bytes:
    items = [enc_string(name) + _I64.pack(-1 if at is None else at) for name, at in offsets]
    flags = TRACKING_SNAPSHOT if snapshot else 0
    return frame(TRACKING, _U8.pack(flags) + _I32.pack(len(items)) + b"".join(items))


def parse_tracking(body: bytes) -> tuple[bool, list[tuple[str, int | None]]]:
    """(whole set?, [(name, offset or None when deleted)]) of a TRACKING frame's body."""
    cur = Cursor(body)
    snapshot = bool(cur.u8() & TRACKING_SNAPSHOT)
    items: list[tuple[str, int | None]] = []
    for _ in range(cur.i32()):
        name = cur.string()
        at = cur.i64()
        items.append((name, None if at < 0 else at))
    return snapshot, items
