"""Registered SQL subscriptions: per-chunk bits written at append time, skipped at read time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pamqp.commands as spec

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.subscriptions import SubscriptionRegistry, registry
from sievemq.filtering.view import sql_predicate
from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Message, Record, Stream, StreamConfig, StreamReader

EXPR = "region = 'apac'"


def _msg(region: str) -> Message:
    props = spec.Basic.Properties(headers={"region": region}).marshal()
    return Message((), "", "rk", props, region.encode())


def _read(stream: Stream, expr: str, slot: int | None) -> tuple[list[Record], StreamReader]:
    reader = stream.reader()
    reader.seek_first()
    out: list[Record] = []
    chunk_filter = None if slot is None else SubscriptionRegistry.chunk_filter(slot)
    predicate = sql_predicate(compile_filter(expr))
    while True:
        out += reader.read(1000, None, predicate, chunk_filter=chunk_filter)
        if reader.at_end:
            return out, reader


async def _append_chunks(stream: Stream, chunks: list[list[str]]) -> None:
    appender = StreamAppender(stream, asyncio.get_running_loop(), None, 1000)
    for regions in chunks:
        for r in regions:
            appender.submit(_msg(r), None, 0)
        await asyncio.sleep(0)  # one loop tick: one chunk
    appender.close()


async def test_chunks_after_registration_are_skipped_by_bits(tmp_path: Path) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig())
    await _append_chunks(stream, [["emea", "apac"], ["emea"]])  # before registration
    slot = registry(stream).register("c1", EXPR)
    assert slot == 0
    await _append_chunks(stream, [["emea", "amer"], ["apac", "emea"], ["emea"], ["amer"]])
    got, reader = _read(stream, EXPR, slot)
    assert [r.offset for r in got] == [1, 5]
    # 2 old chunks evaluated normally; 3 new chunks ruled out by their bits, body not read
    assert reader.stats.chunks_skipped_subscription == 3
    assert reader.stats.chunks_scanned == 6
    # the same expression without registration: same result, every chunk evaluated
    got2, reader2 = _read(stream, EXPR, None)
    assert [r.offset for r in got2] == [1, 5]
    assert reader2.stats.chunks_skipped_subscription == 0
    stream.close()


async def test_registration_is_durable_and_a_changed_expression_is_a_new_slot(
    tmp_path: Path,
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig())
    reg = registry(stream)
    assert reg.register("c1", EXPR) == 0
    assert reg.register("c1", EXPR) == 0  # idempotent
    await _append_chunks(stream, [["emea"]])
    assert reg.register("c1", "region = 'emea'") == 1  # changed: new slot, old inactive
    await _append_chunks(stream, [["emea"]])
    stream.close()
    reopened = SubscriptionRegistry(tmp_path / "s")
    assert [(s.expression, s.active) for s in reopened.slots] == [
        (EXPR, False),
        ("region = 'emea'", True),
    ]
    stream = Stream.open(tmp_path / "s", StreamConfig())
    # chunk 0 was written when only slot 0 existed: slot 1 evaluates it normally
    got, reader = _read(stream, "region = 'emea'", 1)
    assert [r.offset for r in got] == [0, 1]
    assert reader.stats.chunks_skipped_subscription == 0
    # an inactive slot's bit is always set (never skips) after it was deactivated
    got, reader = _read(stream, EXPR, 0)
    assert got == [] and reader.stats.chunks_skipped_subscription == 1
    stream.close()


def test_bits_layout() -> None:
    reg = SubscriptionRegistry(Path("/nonexistent-dir-for-test"))
    assert reg.extra_for([_msg("x")]) == b""
    may = SubscriptionRegistry.chunk_filter(9)
    assert may(b"\x00\x09\xff\x00")  # only 9 slots evaluated: slot 9 unknown, evaluate
    assert not may(b"\x00\x0a\xff\x00")
    assert may(b"\x00\x0a\xff\x40")
