"""Listings and scrapes of a node with many idle streams open none of them.

A stream restored at start is opened (recovered) only on first use; ``/api/queues``,
``/api/streams``, ``/metrics/per-object`` and the overview read an unopened stream's
statistics with a read-only survey of its files (``storage.survey``). Proved by counting
``Stream.open`` in an in-process gateway, and by the numbers a real server gives after a
SIGKILL (a torn tail included): the same as the stream says once it is opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from sievemq.gateway.model.broker import Broker
from sievemq.storage import Message, Stream, StreamConfig, StreamStats, survey
from sievemq.storage.segment import list_segments, segment_name
from sievemq.testing import ServerProcess, running_gateway
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(180)

STREAMS = 300
STREAM = {"x-queue-type": "stream"}
SMALL_SEGMENTS = dict(STREAM, **{"x-stream-max-segment-size-bytes": 400})
# name -> (chunks appended, messages per chunk)
WRITTEN = {"s7": (3, 4), "s42": (10, 2), "s299": (1, 1)}


def _msg(name: str, i: int) -> Message:
    return Message((), "", name, b"\x00\x00", b"body %d of %s" % (i, name.encode()))


def _build(data: Path) -> dict[str, StreamStats]:
    """300 streams, three with data (s42 over several segments); their stats when open."""
    broker = Broker(data)
    vhost = broker.vhost("/")
    for i in range(STREAMS):
        vhost.declare_queue(f"s{i}", durable=True, arguments=SMALL_SEGMENTS if i == 42 else STREAM)
    for name, (chunks, per) in WRITTEN.items():
        stream = vhost.get_queue(name).stream
        for c in range(chunks):
            stream.append([_msg(name, c * per + k) for k in range(per)], timestamp_ms=1000 + c)
    expected = {n: vhost.get_queue(n).stream.stats() for n in ("s0", *WRITTEN)}
    broker.close()
    return expected


def _counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    opened: list[Path] = []
    real_open = Stream.open.__func__  # type: ignore[attr-defined]

    def counting_open(cls: type[Stream], directory: Path, config: object) -> Stream:
        opened.append(Path(directory))
        return real_open(cls, directory, config)  # type: ignore[no-any-return]

    monkeypatch.setattr(Stream, "open", classmethod(counting_open))
    return opened


def _per_object_messages(text: str) -> dict[str, int]:
    found = re.findall(r'^rabbitmq_queue_messages\{vhost="/",queue="([^"]+)"\} (\S+)$', text, re.M)
    return {q: int(float(v)) for q, v in found}


async def test_listings_and_scrapes_open_no_idle_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    expected = _build(data)
    assert expected["s42"].segments > 2
    opened = _counting_opens(monkeypatch)
    async with (
        running_gateway(data) as gw,
        httpx.AsyncClient(base_url=gw.admin_url, auth=("guest", "guest"), timeout=60) as http,
    ):
        for _ in range(2):  # the second poll is served from the cached survey
            queues = {q["name"]: q for q in (await http.get("/api/queues")).json()}
            streams = {s["name"]: s for s in (await http.get("/api/streams")).json()}
            metrics = _per_object_messages((await http.get("/metrics/per-object")).text)
            overview = (await http.get("/api/overview")).json()
            vhosts = (await http.get("/api/vhosts")).json()
        assert opened == []  # not one stream opened by all of that
        assert len(queues) == len(streams) == STREAMS
        assert len(metrics) == STREAMS
        total = sum(c * p for c, p in WRITTEN.values())
        assert overview["queue_totals"]["messages"] == total
        assert vhosts[0]["messages"] == total
        for name in ("s0", "s1", *WRITTEN):
            want = expected.get(name, expected["s0"])
            assert queues[name]["messages"] == want.messages
            assert metrics[name] == want.messages
            view = streams[name]
            for key in ("messages", "bytes", "segments", "chunks", "first_offset"):
                assert view[key] == getattr(want, key), (name, key)
            assert view["last_offset"] == want.last_offset
            assert view["first_timestamp_ms"] == want.first_timestamp_ms
            assert view["last_timestamp_ms"] == want.last_timestamp_ms
        assert streams["s7"]["messages"] == 12 and streams["s7"]["chunks"] == 3
        assert streams["s42"]["last_offset"] == 19
        assert streams["s7"]["first_timestamp_ms"] == 1000

        # first real use opens that stream only; its numbers do not move
        assert gw.queue("s7").stream.stats() == expected["s7"]
        assert [p.name for p in opened] == ["s7"]
        after = {s["name"]: s for s in (await http.get("/api/streams")).json()}
        assert after["s7"]["messages"] == 12
        assert len(opened) == 1


def test_survey_gives_what_recovery_gives_after_a_torn_tail(tmp_path: Path) -> None:
    """A crash mid-append leaves a partial chunk: the survey counts what recovery keeps,
    and recovery (on first use) then finds the same."""
    directory = tmp_path / "s"
    with Stream.open(directory, StreamConfig()) as stream:
        for c in range(4):
            stream.append([_msg("s", c)], timestamp_ms=50 + c)
    last = directory / segment_name(list_segments(directory)[-1])
    with last.open("ab") as f:
        f.write(b"SQ" + os.urandom(30))  # a torn chunk header
    surveyed = survey(directory)
    assert surveyed is not None and surveyed.stats.messages == 4
    size_after_crash = last.stat().st_size
    with Stream.open(directory, StreamConfig()) as stream:
        assert stream.stats() == surveyed.stats
    assert last.stat().st_size < size_after_crash  # recovery cut it; the survey did not
    assert survey(tmp_path / "never-created") is not None
    assert not (tmp_path / "never-created").exists()  # a survey creates nothing


def test_real_server_lists_correct_counts_after_sigkill_without_opening(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _build(data)
    with ServerProcess(data) as server:
        conn = connect(server)
        ch = conn.channel()
        ch.confirm_delivery()
        for n in range(5):
            ch.basic_publish("", "s0", b"after start %d" % n)
        conn.close()
        server.kill()  # no clean close: nothing but the segment files says what s0 holds
        server.start()
        fds_before = len(os.listdir(f"/proc/{server.pid}/fd"))
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=60) as h:
            queues = {q["name"]: q["messages"] for q in h.get("/api/queues").json()}
            metrics = _per_object_messages(h.get("/metrics/per-object").text)
        assert queues["s0"] == metrics["s0"] == 5
        assert queues["s7"] == metrics["s7"] == 12
        assert queues["s42"] == 20 and queues["s1"] == 0
        assert len(os.listdir(f"/proc/{server.pid}/fd")) <= fds_before + 4  # none kept open
