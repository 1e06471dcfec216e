"""Naming a header in x-stream-filter-sql, through a real consumer: the bracket form works, and
a header name written in SQL's double quotes (a string in this dialect, so the condition
would silently never hold) is refused with a 406 that says how to write it."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected, params, publish_to_stream

pytestmark = pytest.mark.timeout(60)

EVENTS = [
    (f"e{i}".encode(), {"x-stream-filter-value": ("apac", "emea")[i % 2], "n": i}) for i in range(6)
]


def _consume(server: ServerProcess, queue: str, sql: str) -> list[bytes]:
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    arguments = {"x-stream-offset": "first", "x-stream-filter-sql": sql}
    got = consume_expected(ch, queue, 3, arguments)
    conn.close()
    return [body for _, _, body in got]


def test_a_header_name_in_brackets_filters_exactly(server: ServerProcess, qname: str) -> None:
    publish_to_stream(server, qname, EVENTS)
    assert _consume(server, qname, "[x-stream-filter-value] = 'apac'") == [b"e0", b"e2", b"e4"]


def test_a_header_name_in_double_quotes_is_406_naming_the_bracket_form(
    server: ServerProcess, qname: str
) -> None:
    publish_to_stream(server, qname, EVENTS[:1])
    conn = pika.BlockingConnection(params(server))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(
            qname,
            lambda *a: None,
            arguments={"x-stream-filter-sql": "\"x-stream-filter-value\" = 'apac'"},
        )
    assert info.value.reply_code == 406
    text = info.value.reply_text
    assert text.startswith("PRECONDITION_FAILED - invalid x-stream-filter-sql")
    assert "position 1" in text and "write the header as [x-stream-filter-value]" in text
    assert conn.is_open  # a channel error only
    conn.close()
