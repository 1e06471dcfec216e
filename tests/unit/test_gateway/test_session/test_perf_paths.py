"""The hot-path shortcuts give the same answers as the plain code they stand in for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from sievemq.amqp import errors, hotcodec
from sievemq.amqp.tables import TableLimits
from sievemq.gateway.session import publish_cache
from sievemq.gateway.session.channel import Channel
from sievemq.gateway.session.confirms import ConfirmTracker
from tests.unit.test_amqp.strategies import field_table, properties

# one step: publish a message routed to `streams` streams (0 = unroutable), then maybe
# report a batch of pending (seq, stream) appends with one outcome
_steps = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 6), st.booleans(), st.booleans()),
    max_size=60,
)


@given(_steps)
def test_settle_many_sends_the_frames_settle_sends(steps: list[tuple[int, int, bool, bool]]):
    one_by_one = ConfirmTracker(1)
    batched = ConfirmTracker(1)
    pending: list[int] = []  # one entry per append still to report
    sent_a: list[bytes] = []
    sent_b: list[bytes] = []
    for streams, report, ok, drain in steps:
        seq = one_by_one.take(streams)
        assert batched.take(streams) == seq
        pending += [seq] * streams
        batch = sorted(set(pending[:report]))  # an appender reports each seq once per batch
        for s in batch:
            pending.remove(s)
            one_by_one.settle(s, ok)
        if batch:
            batched.settle_many(batch, ok)
        if drain:
            sent_a += one_by_one.drain()
            sent_b += batched.drain()
            assert one_by_one.unconfirmed == batched.unconfirmed
    one_by_one.fail_all()
    batched.fail_all()
    assert sent_a + one_by_one.drain() == sent_b + batched.drain()


def test_settle_many_of_a_run_is_one_ack():
    tracker = ConfirmTracker(3)
    for _ in range(500):
        tracker.take()
    tracker.settle_many(list(range(1, 251)), True)
    tracker.settle_many(list(range(251, 501)), True)
    assert tracker.drain() == [hotcodec.encode_basic_ack(3, 500, True)]
    assert tracker.unconfirmed == 0


def _publish(exchange: str, rk: str, mandatory: bool, immediate: bool) -> bytes:
    return commands.Basic.Publish(
        exchange=exchange, routing_key=rk, mandatory=mandatory, immediate=immediate
    ).marshal()


@given(st.from_regex(r"[a-zA-Z0-9._:-]{0,20}", fullmatch=True), st.text(max_size=20), st.booleans())
def test_publish_args_are_the_decoded_ones(exchange: str, rk: str, mandatory: bool):
    payload = b"\x00\x3c\x00\x28" + _publish(exchange, rk, mandatory, False)
    expected = tuple(hotcodec.decode_basic_publish(payload)[:3])
    first = publish_cache.publish_args(payload)
    assert first == expected
    # an equal payload in another buffer (the next frame) is answered from the memo:
    # the very object the first decode produced, not a decode of its own
    again = publish_cache.publish_args(bytes(bytearray(payload)))
    assert again == expected
    assert again is first


def test_publish_args_memo_holds_one_entry_per_distinct_payload():
    payloads = [b"\x00\x3c\x00\x28" + _publish("", f"memo-{i}", False, False) for i in range(3)]
    firsts = [publish_cache.publish_args(p) for p in payloads]
    size = len(publish_cache._publishes)
    for p, first in zip(payloads, firsts, strict=True):
        assert publish_cache.publish_args(bytes(bytearray(p))) is first
    assert len(publish_cache._publishes) == size  # hits add nothing
    publish_cache.publish_args(b"\x00\x3c\x00\x28" + _publish("", "memo-new", False, False))
    assert len(publish_cache._publishes) in (size + 1, 1)  # one more entry (or a full memo cleared)


def test_publish_args_memo_is_bounded():
    for n in range(publish_cache._CACHE_MAX + 10):
        publish_cache.publish_args(b"\x00\x3c\x00\x28" + _publish("", f"q{n}", False, False))
    assert 0 < len(publish_cache._publishes) <= publish_cache._CACHE_MAX


def test_property_memo_is_bounded():
    for i in range(publish_cache._CACHE_MAX + 10):
        props = commands.Basic.Properties(headers={"x-stream-filter-value": f"v{i}"}).marshal()
        publish_cache.property_filter_values(props)
    assert 0 < len(publish_cache._properties) <= publish_cache._CACHE_MAX


def test_publish_args_leave_immediate_and_garbage_to_the_slow_path():
    assert publish_cache.publish_args(b"\x00\x3c\x00\x28" + _publish("", "q", False, True)) is None
    assert publish_cache.publish_args(b"\x00\x3c\x00\x28\x00\x00\x09ab") is None


# headers with an x-stream-filter-value of every shape: a value, an array, garbage (406)
_filter_value = st.one_of(
    st.text(max_size=8),
    st.lists(st.text(max_size=5), max_size=4),
    st.integers(-5, 5),
    st.just("a\x00b"),
)
_with_filter = st.builds(
    lambda table, value: {**table, "x-stream-filter-value": value}, field_table, _filter_value
)


@given(properties() | properties(headers=_with_filter))
def test_property_filter_values_equal_the_slow_path(props: commands.Basic.Properties):
    raw = props.marshal()
    try:
        expected: tuple[str, ...] | None = publish_cache.filter_values(raw)
    except errors.AMQPError:
        expected = None  # the slow path raises: the fast path must step aside
    assert publish_cache.property_filter_values(raw) == expected


def test_property_filter_values():
    props = commands.Basic.Properties(
        content_type="text/plain", headers={"x-stream-filter-value": "eu", "n": 1}
    ).marshal()
    first = publish_cache.property_filter_values(props)
    assert first == ("eu",)
    assert publish_cache.property_filter_values(bytes(bytearray(props))) is first  # the memo
    assert publish_cache.property_filter_values(b"\x00\x00") == ()
    assert publish_cache.property_filter_values(props[:-1]) is None  # truncated: slow path raises
    bad = commands.Basic.Properties(headers={"x-stream-filter-value": "a\x00b"}).marshal()
    assert publish_cache.property_filter_values(bad) is None
    try:
        publish_cache.filter_values(bad)
    except errors.PreconditionFailed:
        pass
    else:
        raise AssertionError("a NUL in a filter value is a 406")


def test_unique_property_lists_share_the_parsed_filter_value():
    """Every property list differs (message-id, seq), the filter value repeats: it is parsed
    once and the same tuple is handed out, while each list is still checked in full."""

    def props(seq: int) -> bytes:
        return commands.Basic.Properties(
            message_id=str(seq), headers={"seq": seq, "x-stream-filter-value": "emea"}
        ).marshal()

    first = publish_cache.property_filter_values(props(1))
    assert first == ("emea",)
    assert publish_cache.property_filter_values(props(2)) is first
    assert publish_cache.property_filter_values(props(3)[:-1]) is None  # still checked in full
    for seq in range(publish_cache._CACHE_MAX + 10):
        assert publish_cache.property_filter_values(props(seq)) == ("emea",)
    assert 0 < len(publish_cache._properties) <= publish_cache._CACHE_MAX


def test_the_channels_inline_memo_lookups_stay_on_the_live_memos():
    """The channel looks the memos up through ``known_publish`` / ``known_properties``:
    they answer what the memos hold, also after a full memo was cleared and refilled."""
    for n in range(publish_cache._CACHE_MAX + 10):  # past the bound: the memos are cleared once
        props = commands.Basic.Properties(headers={"x-stream-filter-value": f"k{n}"}).marshal()
        values = publish_cache.property_filter_values(props)
        assert publish_cache.known_properties(props) is values
        payload = b"\x00\x3c\x00\x28" + _publish("", f"known{n}", False, False)
        assert publish_cache.known_publish(payload) is None
        args = publish_cache.publish_args(payload)
        assert args is not None and publish_cache.known_publish(payload) is args
    assert publish_cache.known_properties(b"\x00\x01\x02") is None  # never seen: not known
    fresh = commands.Basic.Properties(headers={"x-stream-filter-value": "fresh"}).marshal()
    assert publish_cache.new_property_filter_values(fresh) == ("fresh",)
    assert publish_cache.known_properties(fresh) == ("fresh",)


def test_a_property_list_checked_under_loose_limits_is_not_known_under_strict_ones():
    """Two servers in one process with different table limits: a property list that passed
    the looser limits must still be refused (slow path, None) under the stricter ones."""
    nested: dict[str, object] = {"leaf": "x"}
    for _ in range(6):
        nested = {"n": nested}
    props = commands.Basic.Properties(
        headers={"x-stream-filter-value": "deep", "t": nested}
    ).marshal()
    loose = TableLimits(max_depth=16)
    strict = TableLimits(max_depth=3)
    assert publish_cache.property_filter_values(props, loose) == ("deep",)
    assert publish_cache.properties_memo(loose).get(props) == ("deep",)
    assert publish_cache.properties_memo(strict).get(props) is None
    assert publish_cache.property_filter_values(props, strict) is None


# a header before the filter header whose key or value holds the filter key's bytes
_decoy = st.sampled_from(
    ["\x15x-stream-filter-value", "\x15x-stream-filter-valueS\x00\x00\x00\x01z"]
)
_decoyed = st.builds(
    lambda decoy, value, table: {"a": decoy, "x-stream-filter-value": value, **table},
    _decoy,
    _filter_value,
    field_table,
)


@given(properties() | properties(headers=_with_filter) | properties(headers=_decoyed))
def test_a_forwarding_nodes_mark_gives_the_leader_the_values_it_found(
    props: commands.Basic.Properties,
):
    """What a leader reads at the mark a forwarding node sent is what that node found, or the
    mark says "unknown" and the leader checks the list itself."""
    raw = props.marshal()
    found = publish_cache.property_filter_values(raw)
    if found is None:
        return  # the forwarding node's slow path rejects or rewrites it: never marked
    mark = publish_cache.filter_mark(raw, found)
    if mark == publish_cache.MARK_NONE:
        assert found == ()
    elif mark != publish_cache.MARK_UNKNOWN:
        assert publish_cache.filter_values_at(raw, mark - 2) == found


def test_the_mark_points_at_the_filter_header():
    raw = commands.Basic.Properties(
        message_id="m1", headers={"x-stream-filter-value": "eu", "n": 1}
    ).marshal()
    mark = publish_cache.filter_mark(raw, ("eu",))
    assert mark not in (publish_cache.MARK_NONE, publish_cache.MARK_UNKNOWN)
    assert publish_cache.filter_values_at(raw, mark - 2) == ("eu",)
    assert publish_cache.filter_mark(raw, ("us",)) == publish_cache.MARK_UNKNOWN  # not what's there
    assert publish_cache.filter_mark(raw, ()) == publish_cache.MARK_NONE
    assert publish_cache.filter_values_at(raw, len(raw) + 3) is None  # past the end: check it


def test_the_channel_keeps_its_attributes_in_slots():
    """No instance dict: CPython 3.11 keeps at most 30 attribute names in a class's shared
    keys, and past them every ``self.x`` of the publish path is a slower dict lookup (31
    names cost the single node's publish path 2-3 %). A new attribute goes in the slots."""
    assert Channel.__dictoffset__ == 0
    assert len(Channel.__slots__) == len(set(Channel.__slots__))
