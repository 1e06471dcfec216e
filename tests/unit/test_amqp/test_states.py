"""Connection and channel state tables: what each phase accepts, and the reply code if not."""

from __future__ import annotations

import pytest
from pamqp import commands

from sievemq.amqp import errors, methods, states
from sievemq.amqp.frames import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD
from sievemq.amqp.states import ChannelPhase, ChannelState, ConnectionPhase, ConnectionState, Next

PUBLISH = (60, 40)
QOS = (60, 10)


def open_channel(max_body_size: int | None = None) -> ChannelState:
    ch = ChannelState(1, max_body_size)
    assert ch.receive_method(methods.CHANNEL_OPEN) is Next.DISPATCH
    return ch


def test_publish_header_body_sequence():
    ch = open_channel()
    assert ch.receive_method(PUBLISH) is Next.EXPECT_CONTENT
    assert ch.receive_header(60, 10) is Next.CONTINUE
    assert ch.receive_body(4) is Next.CONTINUE
    assert ch.receive_body(6) is Next.COMPLETE
    assert ch.phase is ChannelPhase.OPEN
    assert ch.receive_method(QOS) is Next.DISPATCH


def test_empty_body_completes_at_the_header():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    assert ch.receive_header(60, 0) is Next.COMPLETE
    with pytest.raises(errors.UnexpectedFrame):
        ch.receive_body(0)


def test_publish_followed_by_a_method_is_505():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    with pytest.raises(errors.UnexpectedFrame) as info:
        ch.receive_method(PUBLISH)
    assert info.value.reply_code == 505 and info.value.closes_connection
    assert "expected content header" in info.value.reply_text


def test_publish_followed_by_a_body_is_505():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    with pytest.raises(errors.UnexpectedFrame, match="expected content header"):
        ch.receive_body(3)


def test_method_in_the_middle_of_a_body_is_505():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    ch.receive_header(60, 10)
    with pytest.raises(errors.UnexpectedFrame, match="expected body"):
        ch.receive_method((60, 80))


def test_header_without_publish_is_505():
    with pytest.raises(errors.UnexpectedFrame, match="without a content method"):
        open_channel().receive_header(60, 1)


def test_body_without_publish_is_505():
    with pytest.raises(errors.UnexpectedFrame):
        open_channel().receive_body(1)


def test_header_of_another_class_is_505():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    with pytest.raises(errors.UnexpectedFrame, match="class 60"):
        ch.receive_header(50, 1)


def test_body_longer_than_declared_is_505():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    ch.receive_header(60, 5)
    with pytest.raises(errors.UnexpectedFrame, match="exceed"):
        ch.receive_body(6)


def test_oversized_message_is_406():
    ch = open_channel(max_body_size=100)
    ch.receive_method(PUBLISH)
    with pytest.raises(errors.PreconditionFailed) as info:
        ch.receive_header(60, 101)
    assert info.value.reply_code == 406 and not info.value.closes_connection


def test_frames_on_a_closed_channel_are_504():
    ch = ChannelState(5)
    with pytest.raises(errors.ChannelErrorHard) as info:
        ch.receive_method(QOS)
    assert info.value.reply_code == 504
    with pytest.raises(errors.ChannelErrorHard):
        ch.receive_header(60, 1)


def test_reopening_an_open_channel_is_504():
    with pytest.raises(errors.ChannelErrorHard, match="already open"):
        open_channel().receive_method(methods.CHANNEL_OPEN)


def test_unknown_method_is_540():
    with pytest.raises(errors.NotImplemented_) as info:
        open_channel().receive_method((60, 999))
    assert info.value.reply_code == 540


@pytest.mark.parametrize(
    "method",
    [
        commands.Queue.DeclareOk,
        commands.Basic.Deliver,
        commands.Basic.Return,
        commands.Basic.GetOk,
        commands.Basic.ConsumeOk,
        commands.Channel.OpenOk,
        commands.Channel.CloseOk,
        commands.Connection.Start,
        commands.Connection.Close,
    ],
)
def test_server_side_and_connection_methods_on_an_open_channel_are_503(method):
    pair = (method.index >> 16, method.index & 0xFFFF)
    with pytest.raises(errors.CommandInvalid) as info:
        open_channel().receive_method(pair)
    assert info.value.reply_code == 503
    assert (info.value.class_id, info.value.method_id) == pair


def test_every_client_method_is_dispatched_on_an_open_channel():
    for method in states.CLIENT_CHANNEL_METHODS - {methods.CHANNEL_CLOSE}:
        ch = open_channel()
        expected = Next.EXPECT_CONTENT if method == PUBLISH else Next.DISPATCH
        assert ch.receive_method(method) is expected


def test_close_from_the_client_closes_and_allows_reopening():
    ch = open_channel()
    assert ch.receive_method(methods.CHANNEL_CLOSE) is Next.DISPATCH
    assert ch.phase is ChannelPhase.CLOSED
    assert ch.receive_method(methods.CHANNEL_OPEN) is Next.DISPATCH


def test_after_our_close_everything_but_close_ok_is_discarded():
    ch = open_channel()
    ch.receive_method(PUBLISH)
    ch.send_close()
    assert ch.receive_header(60, 3) is Next.DISCARD
    assert ch.receive_body(3) is Next.DISCARD
    assert ch.receive_method(PUBLISH) is Next.DISCARD
    assert ch.receive_method(methods.CHANNEL_CLOSE_OK) is Next.DISPATCH
    assert ch.phase is ChannelPhase.CLOSED


# --- connection ---------------------------------------------------------------------------------


def opened() -> ConnectionState:
    conn = ConnectionState()
    for method in (
        methods.CONNECTION_START_OK,
        methods.CONNECTION_TUNE_OK,
        methods.CONNECTION_OPEN,
    ):
        assert conn.receive_method(method) is Next.DISPATCH
    assert conn.phase is ConnectionPhase.OPEN
    return conn


def test_handshake_in_order():
    opened()


def test_open_before_tune_ok_is_504_as_in_rabbitmq():
    conn = ConnectionState()
    conn.receive_method(methods.CONNECTION_START_OK)
    with pytest.raises(errors.ChannelErrorHard) as info:
        conn.receive_method(methods.CONNECTION_OPEN)
    assert info.value.reply_code == 504 and info.value.closes_connection
    assert "unexpected method 10.40 in connection state await_tune_ok" in info.value.reply_text
    assert (info.value.class_id, info.value.method_id) == methods.CONNECTION_OPEN


def test_close_ok_without_our_close_is_504():
    with pytest.raises(errors.ChannelErrorHard, match="connection state open"):
        opened().receive_method(methods.CONNECTION_CLOSE_OK)


def test_unknown_method_on_channel_zero_is_540():
    with pytest.raises(errors.NotImplemented_):
        opened().receive_method((10, 99))


def test_channel_frames_before_open_are_505():
    conn = ConnectionState()
    with pytest.raises(errors.UnexpectedFrame):
        conn.receive_frame(FRAME_METHOD, 1)


def test_content_on_channel_zero_is_505():
    for frame_type in (FRAME_HEADER, FRAME_BODY):
        with pytest.raises(errors.UnexpectedFrame):
            opened().receive_frame(frame_type, 0)


def test_channel_method_on_channel_zero_is_504():
    with pytest.raises(errors.ChannelErrorHard, match=r"50\.10 in connection state open"):
        opened().receive_method((50, 10))


def test_heartbeats_pass_in_every_phase():
    for phase in ConnectionPhase:
        conn = ConnectionState()
        conn.phase = phase
        assert conn.receive_frame(FRAME_HEARTBEAT, 0) is Next.DISPATCH


def test_channel_frames_flow_once_open():
    assert opened().receive_frame(FRAME_BODY, 9) is Next.DISPATCH


def test_after_our_close_only_close_ok_counts():
    conn = opened()
    conn.send_close()
    assert conn.receive_frame(FRAME_METHOD, 3) is Next.DISCARD
    assert conn.receive_frame(FRAME_METHOD, 0) is Next.DISPATCH
    assert conn.receive_method((60, 40)) is Next.DISCARD
    assert conn.receive_method(methods.CONNECTION_CLOSE_OK) is Next.DISPATCH
    assert conn.phase is ConnectionPhase.CLOSED


def test_client_close_ends_the_connection_in_any_open_phase():
    for count in range(4):
        conn = ConnectionState()
        steps = [methods.CONNECTION_START_OK, methods.CONNECTION_TUNE_OK, methods.CONNECTION_OPEN]
        for method in steps[:count]:
            conn.receive_method(method)
        assert conn.receive_method(methods.CONNECTION_CLOSE) is Next.DISPATCH
        assert conn.phase is ConnectionPhase.CLOSED


def test_after_the_connection_ended_everything_is_discarded():
    for conn in (opened(), ConnectionState()):
        conn.lost()
        assert conn.receive_frame(FRAME_METHOD, 3) is Next.DISCARD
        assert conn.receive_frame(FRAME_BODY, 0) is Next.DISCARD
        assert conn.receive_frame(FRAME_METHOD, 0) is Next.DISPATCH
        assert conn.receive_method(methods.CONNECTION_CLOSE) is Next.DISCARD
        assert conn.phase is ConnectionPhase.CLOSED


def test_out_of_phase_names_the_frame_the_phase_expects():
    with pytest.raises(errors.ChannelErrorHard, match=r"expected 'channel\.open' on channel 2"):
        ChannelState(2).out_of_phase(FRAME_BODY)
    with pytest.raises(errors.UnexpectedFrame, match="body frame on channel 1 without a content"):
        open_channel().out_of_phase(FRAME_BODY)
    ch = open_channel()
    ch.receive_method(PUBLISH)
    with pytest.raises(errors.UnexpectedFrame, match="expected content header frame on chan"):
        ch.out_of_phase(FRAME_BODY)
    ch.send_close()
    assert ch.out_of_phase(FRAME_HEADER) is Next.DISCARD
