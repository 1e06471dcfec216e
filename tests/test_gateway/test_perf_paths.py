"""The hot-path shortcuts give the same answers as the plain code they stand in for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from sievemq.amqp import errors, hotcodec
from sievemq.gateway.session import publish_cache as fastpath
from sievemq.gateway.session.confirms import ConfirmTracker

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
    expected = hotcodec.decode_basic_publish(payload)[:3]
    assert fastpath.publish_args(payload) == expected
    assert fastpath.publish_args(bytes(payload)) == expected  # cached


def test_publish_args_leave_immediate_and_garbage_to_the_slow_path():
    assert fastpath.publish_args(b"\x00\x3c\x00\x28" + _publish("", "q", False, True)) is None
    assert fastpath.publish_args(b"\x00\x3c\x00\x28\x00\x00\x09ab") is None


def test_property_filter_values():
    props = commands.Basic.Properties(
        content_type="text/plain", headers={"x-stream-filter-value": "eu", "n": 1}
    ).marshal()
    assert fastpath.property_filter_values(props) == ("eu",)
    assert fastpath.property_filter_values(props) == ("eu",)
    assert fastpath.property_filter_values(b"\x00\x00") == ()
    assert fastpath.property_filter_values(props[:-1]) is None  # truncated: slow path raises
    bad = commands.Basic.Properties(headers={"x-stream-filter-value": "a\x00b"}).marshal()
    assert fastpath.property_filter_values(bad) is None
    try:
        fastpath.filter_values(bad)
    except errors.PreconditionFailed:
        pass
    else:
        raise AssertionError("a NUL in a filter value is a 406")
