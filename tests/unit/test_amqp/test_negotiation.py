"""Server negotiation: Start contents, SASL credentials, Tune-Ok rules."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from pamqp import commands, encode

from sievemq.amqp import codec, errors, negotiation

# What RabbitMQ 3.13 advertises in connection.start (3.10.8 sends the same nine, checked
# side by side), each with the test that shows SieveMQ honours it. Nothing is left out: a
# capability SieveMQ did not honour would be advertised false, its reason said here.
RABBITMQ_CAPABILITIES = {
    "publisher_confirms": "test_scenario_python_client",  # confirms in four clients
    "exchange_exchange_bindings": "test_topic_fanout_headers_and_exchange_bindings",
    "basic.nack": "test_multiple_nack_and_unknown_tag",
    "consumer_cancel_notify": "test_queue_delete_cancels_consumers",
    "connection.blocked": "test_a_connection_that_starts_publishing_during_the_alarm_is_blocked",
    "consumer_priorities": "test_consumer_priorities",  # x-priority
    "authentication_failure_close": "test_bad_login",
    "per_consumer_qos": "test_global_prefetch_shared_by_consumers",  # both kinds of qos
    "direct_reply_to": "test_pika_rpc_round_trip",
}
TESTS = Path(__file__).resolve().parents[2]


def test_start_advertises_what_rabbitmq_advertises_and_honours_it():
    start = codec.decode_method(codec.encode_method(0, negotiation.start())[7:-1])
    caps = start.server_properties["capabilities"]
    assert list(negotiation.CAPABILITIES) == list(RABBITMQ_CAPABILITIES)  # in its order
    assert set(caps) == set(RABBITMQ_CAPABILITIES)  # (the wire table is sorted by name)
    assert all(value is True for value in caps.values()), caps
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}
    assert (start.version_major, start.version_minor) == (0, 9)


def test_each_capability_names_a_test_that_exists():
    sources = "\n".join(p.read_text() for p in (TESTS / "integration").rglob("test_*.py"))
    for capability, test in RABBITMQ_CAPABILITIES.items():
        assert re.search(rf"^(async )?def {test}\(", sources, re.M), (capability, test)


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
