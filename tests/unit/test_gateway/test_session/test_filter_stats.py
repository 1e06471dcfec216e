"""Filter statistics bookkeeping and the facade's filter-size advice, without sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.amqp.errors import NotFound, PreconditionFailed
from sievemq.gateway.admin import browse
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker, BrokerSettings
from sievemq.gateway.session.stream.filter_stats import ConsumerFilterStats
from sievemq.storage import (
    FILTER_FIELDS,
    Durability,
    FilterSpec,
    FilterStats,
    Message,
    ReadStats,
    Stream,
    StreamConfig,
)
from sievemq.storage.advice import false_positive_rate, recent_blooms


def _msg(*values: str) -> Message:
    return Message(values, "", "rk", b"", b"body")


def test_deltas_of_two_consumers_add_up_on_the_stream() -> None:
    stream = FilterStats()
    r1, r2 = ReadStats(chunks_scanned=5, bytes_read=100), ReadStats()
    c1, c2 = ConsumerFilterStats(r1, stream), ConsumerFilterStats(r2, stream)
    r1.chunks_scanned += 10
    r1.chunks_skipped += 7
    r1.bytes_read += 300
    r1.chunks_skipped_subscription += 2
    c1.account(3, 90)
    r2.chunks_scanned += 4
    r2.chunks_false_positive += 1
    r2.records_skipped += 12
    c2.account(0, 0)
    r1.chunks_scanned += 1
    c1.account(2, 10)
    c1.account(0, 0)  # a turn with no change adds nothing
    assert stream.chunks_scanned == 15  # the 5 counted before the consumer started are not ours
    assert stream.chunks_skipped == 7
    assert stream.chunks_false_positive == 1
    assert stream.records_skipped == 12
    assert stream.bytes_read == 300
    assert stream.chunks_skipped_subscription == 2
    assert stream.messages_delivered == 5
    assert stream.bytes_delivered == 100
    assert c1.snapshot().chunks_scanned == 11
    assert c1.snapshot().messages_delivered == 5
    assert c2.snapshot() == FilterStats(
        chunks_scanned=4, chunks_false_positive=1, records_skipped=12
    )
    total = FilterStats()
    total.add(c1.snapshot())
    total.add(c2.snapshot())
    assert total == stream  # the consumers' own counters add up to the stream's


def test_every_filter_counter_has_one_prometheus_metric() -> None:
    from sievemq.admin_api.metrics import FILTER_COUNTERS

    assert [field for _, field, _ in FILTER_COUNTERS] == list(FILTER_FIELDS)
    assert len({name for name, _, _ in FILTER_COUNTERS}) == len(FILTER_FIELDS)


def test_reader_counts_messages_in_skipped_chunks_from_its_position(tmp_path: Path) -> None:
    with Stream.open(tmp_path / "s", StreamConfig()) as stream:
        stream.append([_msg("a")] * 10)  # 0..9
        stream.append([_msg("b")] * 10)  # 10..19
        stream.append([_msg("a")] * 10)  # 20..29
        reader = stream.reader()
        reader.seek_offset(5)
        got = reader.read(100, FilterSpec(("b",)))
        assert [r.offset for r in got] == list(range(10, 20))
        assert reader.stats.chunks_skipped == 2  # no "b" in the first and third chunks
        assert reader.stats.records_skipped_by_bloom == 5 + 10  # the first counted from 5
        assert reader.stats.chunks_false_positive == 0
        reader.close()


@pytest.fixture
def facade(tmp_path: Path) -> BrokerFacade:
    broker = Broker(tmp_path / "data", BrokerSettings(durability=Durability.NEVER))
    return BrokerFacade(broker)


def test_filter_advice_from_observed_values_per_chunk(facade: BrokerFacade) -> None:
    facade.create_stream("/", "busy")  # default 16-byte filters
    stream = facade.broker.vhost("/").get_queue("busy").stream
    for chunk in range(30):  # 40 distinct values per chunk
        stream.append([_msg(f"v{chunk}-{i}") for i in range(40)])
    advice = facade.filter_advice("/", "busy", target_fpr=0.01)
    assert advice.chunks_sampled == 30
    assert advice.current_filter_size_bytes == 16
    # a 16-byte filter cannot count 40 values exactly; the estimate must not undercount much
    assert advice.distinct_values_per_chunk_p95 >= 30
    assert advice.current_false_positive_rate > 0.01
    size = advice.recommended_filter_size_bytes
    assert advice.reachable and size > 16
    assert false_positive_rate(size, 40) <= 0.02
    assert advice.expected_false_positive_rate <= 0.01
    assert advice.rabbitmq_compatible == (size <= 255)


def test_filter_advice_reads_the_newest_chunks_with_their_filter_size(
    facade: BrokerFacade,
) -> None:
    facade.create_stream("/", "grown", {"x-stream-filter-size-bytes": 1024})
    stream = facade.broker.vhost("/").get_queue("grown").stream
    for _ in range(20):
        stream.append([_msg("only")] * 5)  # one value per chunk: tiny advice
    for chunk in range(5):
        stream.append([_msg(f"w{chunk}-{i}") for i in range(300)])
    quiet = facade.filter_advice("/", "grown", target_fpr=0.05, chunks=20)
    assert quiet.chunks_sampled == 20
    newest = facade.filter_advice("/", "grown", target_fpr=0.05, chunks=5)
    assert newest.distinct_values_per_chunk_p95 == pytest.approx(300, rel=0.15)
    assert newest.recommended_filter_size_bytes > quiet.recommended_filter_size_bytes
    assert newest.recommended_filter_size_bytes > 255
    assert newest.rabbitmq_compatible is False


def test_filter_advice_errors(facade: BrokerFacade) -> None:
    facade.create_stream("/", "s")
    with pytest.raises(NotFound):
        facade.filter_advice("/", "missing")
    for bad in (0.0, 1.0, -0.5):
        with pytest.raises(PreconditionFailed):
            facade.filter_advice("/", "s", target_fpr=bad)
    with pytest.raises(PreconditionFailed):
        facade.filter_advice("/", "s", chunks=0)
    empty = facade.filter_advice("/", "s")
    assert empty.chunks_sampled == 0
    assert empty.recommended_filter_size_bytes == 16


def test_filter_advice_is_computed_once_per_cache_interval(
    facade: BrokerFacade, monkeypatch: pytest.MonkeyPatch
) -> None:
    facade.create_stream("/", "polled")
    stream = facade.broker.vhost("/").get_queue("polled").stream
    stream.append([_msg("a")])
    clock = [1000.0]
    monkeypatch.setattr(browse, "_advice_clock", lambda: clock[0])
    first = facade.filter_advice("/", "polled")
    stream.append([_msg(f"b{i}") for i in range(40)])
    clock[0] += browse.ADVICE_CACHE_S - 1  # a dashboard polling: the last answer
    assert facade.filter_advice("/", "polled") is first
    assert facade.filter_advice("/", "polled", target_fpr=0.05).chunks_sampled == 2
    clock[0] += 2  # past the interval: the newest chunk counts
    assert facade.filter_advice("/", "polled").chunks_sampled == 2
    facade.delete_stream("/", "polled")  # a new stream of the same name: never the old answer
    facade.create_stream("/", "polled")
    assert facade.filter_advice("/", "polled").chunks_sampled == 0


def test_recent_blooms_walks_back_across_segments(tmp_path: Path) -> None:
    config = StreamConfig(max_segment_bytes=300, filter_size_bytes=32)
    with Stream.open(tmp_path / "s", config) as stream:
        for i in range(12):
            stream.append([_msg(f"x{i}")] if i % 3 else [_msg()])
        assert stream.stats().segments > 2
        blooms = recent_blooms(stream.directory, max_chunks=7)
        assert len(blooms) == 7
        # oldest first: chunk 5..11; chunks 6 and 9 had no value, so no Bloom bytes
        assert [len(b) for b in blooms] == [32, 0, 32, 32, 0, 32, 32]
        spec = FilterSpec(("x11",))
        assert spec.may_match_bytes(blooms[-1]) and not spec.may_match_bytes(blooms[0])
        assert len(recent_blooms(stream.directory, max_chunks=7, end_offset=3)) == 3
