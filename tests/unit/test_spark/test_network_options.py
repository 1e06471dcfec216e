"""The network mode's options and planning (``uri``), without a JVM or a server."""

from __future__ import annotations

import pytest

from sievemq.spark.network import net_tasks
from sievemq.spark.options import OptionError, parse_options
from sievemq.spark.planning import StreamRef
from sievemq.spark.stream_client import StreamURI


def test_the_uri_names_node_user_and_vhost() -> None:
    u = StreamURI.parse("rabbitmq-stream://al%40x:p%3Aw@node-2:5553/prod%2Feu")
    assert (u.host, u.port, u.user, u.password, u.vhost, u.tls) == (
        "node-2",
        5553,
        "al@x",
        "p:w",
        "prod/eu",
        False,
    )
    tls = StreamURI.parse("rabbitmq-stream+tls://h")
    assert (tls.port, tls.vhost, tls.user, tls.tls) == (5551, "/", "guest", True)
    o = parse_options({"uri": "rabbitmq-stream://h:1/%2F", "stream": "a"})
    assert o.uri == "rabbitmq-stream://h:1/%2F" and o.vhost == "/" and o.streams == ("a",)


@pytest.mark.parametrize(
    ("extra", "option", "text"),
    [
        ({"uri": "amqp://h/"}, "uri", "rabbitmq-stream://"),
        ({"path": "/d"}, "path", "not both"),
        ({"vhost": "x"}, "vhost", "uri's path"),
        ({"streamPattern": "a.*"}, "streamPattern", "name the streams"),
        ({"maxBytesPerPartition": "10"}, "maxBytesPerPartition", "maxOffsetsPerPartition"),
    ],
)
def test_options_that_need_the_files_are_refused(
    extra: dict[str, str], option: str, text: str
) -> None:
    options = {"uri": "rabbitmq-stream://h/", "stream": "a", **extra}
    with pytest.raises(OptionError, match=text) as caught:
        parse_options(options)
    assert caught.value.option == option


def test_ranges_are_cut_by_offsets_and_min_partitions() -> None:
    a, b = StreamRef("/", "a", ""), StreamRef("/", "b", "")
    o = parse_options(
        {"uri": "rabbitmq-stream://h/", "stream": "a,b", "maxOffsetsPerPartition": "40"}
    )
    tasks = net_tasks(o, [(a, 10, 110), (b, 5, 5)], 0, 1)
    assert [(t.stream, t.start, t.until) for t in tasks] == [
        ("a", 10, 43),
        ("a", 43, 76),
        ("a", 76, 110),
    ]
    o = parse_options({"uri": "rabbitmq-stream://h/", "stream": "a,b", "minPartitions": "4"})
    tasks = net_tasks(o, [(a, 0, 300), (b, 0, 100)], 0, 1)
    assert [t.stream for t in tasks] == ["a", "a", "a", "b"]
    assert [(t.start, t.until) for t in tasks if t.stream == "a"] == [
        (0, 100),
        (100, 200),
        (200, 300),
    ]
