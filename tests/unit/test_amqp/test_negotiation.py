"""Server negotiation: Start contents, SASL credentials, Tune-Ok rules."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, encode

from sievemq.amqp import codec, errors, negotiation


def test_start_advertises_the_spec_capabilities():
    start = codec.decode_method(codec.encode_method(0, negotiation.start())[7:-1])
    caps = start.server_properties["capabilities"]
    for name in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert caps[name] is True
    assert caps["direct_reply_to"] is False
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}
    assert (start.version_major, start.version_minor) == (0, 9)


def start_ok(mechanism: str, response: bytes) -> commands.Connection.StartOk:
    """A Start-Ok as a client sends it, decoded as the server sees it."""
    payload = (
        b"\x00\x0a\x00\x0b"
        + encode.field_table({"product": "test"})
        + encode.short_string(mechanism)
        + struct.pack(">I", len(response))
        + response
        + encode.short_string("en_US")
    )
    return codec.decode_method(payload)


def test_plain_credentials():
    creds = negotiation.credentials(start_ok("PLAIN", b"\x00guest\x00s3cr\xc3\xa9t"))
    assert (creds.mechanism, creds.username, creds.password) == ("PLAIN", "guest", "s3crét")


def test_plain_with_authzid():
    creds = negotiation.credentials(start_ok("PLAIN", b"admin\x00bob\x00pw"))
    assert (creds.username, creds.password) == ("bob", "pw")


def test_amqplain_credentials():
    table = encode.field_table({"LOGIN": "alice", "PASSWORD": "pw"})[4:]
    creds = negotiation.credentials(start_ok("AMQPLAIN", table))
    assert (creds.mechanism, creds.username, creds.password) == ("AMQPLAIN", "alice", "pw")


@pytest.mark.parametrize(
    ("mechanism", "response"),
    [
        ("EXTERNAL", b""),
        ("PLAIN", b"guest"),
        ("PLAIN", b"\x00a\x00b\x00c"),
        ("PLAIN", b"\x00\xff\x00pw"),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01a"),
        ("AMQPLAIN", b"\xff\xff"),
    ],
)
def test_bad_credentials_are_403_connection_errors(mechanism: str, response: bytes):
    with pytest.raises(errors.ConnectionAccessRefused) as info:
        negotiation.credentials(start_ok(mechanism, response))
    assert info.value.reply_code == 403 and info.value.closes_connection


def tune_ok(channel_max: int, frame_max: int, heartbeat: int) -> commands.Connection.TuneOk:
    return commands.Connection.TuneOk(channel_max, frame_max, heartbeat)


def test_tune_offers_the_spec_limits():
    offer = negotiation.tune()
    assert (offer.channel_max, offer.frame_max, offer.heartbeat) == (2047, 131072, 60)


def test_client_may_lower_every_limit():
    got = negotiation.negotiate(negotiation.tune(), tune_ok(10, 8192, 5))
    assert got == negotiation.Tuning(channel_max=10, frame_max=8192, heartbeat=5)


def test_zero_means_the_server_limit():
    got = negotiation.negotiate(negotiation.tune(), tune_ok(0, 0, 0))
    assert got == negotiation.Tuning(channel_max=2047, frame_max=131072, heartbeat=0)


@pytest.mark.parametrize(
    ("channel_max", "frame_max", "text"),
    [(2048, 4096, "channel_max=2048"), (1, 131073, "frame_max=131073"), (1, 4095, "< 4096")],
)
def test_values_outside_the_limits_are_530(channel_max: int, frame_max: int, text: str):
    with pytest.raises(errors.NotAllowed, match=text) as info:
        negotiation.negotiate(negotiation.tune(), tune_ok(channel_max, frame_max, 60))
    assert info.value.reply_code == 530
