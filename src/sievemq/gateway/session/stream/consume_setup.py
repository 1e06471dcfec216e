"""What basic.consume adds for ``x-stream-filter-sql`` and ``x-stream-consumer-name``.

Compiles the expression once (a bad one is refused with 406 PRECONDITION_FAILED naming the
position and what was expected), builds the reader predicate, registers a named consumer's
expression as a stream subscription (so later chunks carry its bits), picks the resume offset
of a named consumer, and builds its offset tracker. Cold path: runs once per consume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sievemq.amqp import errors
from sievemq.filtering.sql import CompileError, SqlFilter, compile_filter
from sievemq.filtering.subscriptions import RegistryError, registry
from sievemq.filtering.view import sql_predicate
from sievemq.gateway.model.stream.arguments import ConsumerOptions, OffsetSpec
from sievemq.gateway.session.stream.named_consumers import OffsetTracker, resume_offset
from sievemq.storage import Record, Stream, StreamReader


def compile_or_406(text: str, max_length: int = 4096, max_depth: int = 64) -> SqlFilter:
    """The compiled filter, or the 406 the client sees (with position and expectation)."""
    try:
        return compile_filter(text, max_length, max_depth)
    except CompileError as error:
        raise errors.PreconditionFailed(f"invalid x-stream-filter-sql: {error}", 60, 20) from None


@dataclass
class ConsumerExtras:
    """The SQL filter, subscription check and named-consumer state of one consumer."""

    options: ConsumerOptions
    stream: Stream
    loop: asyncio.AbstractEventLoop | None
    sql: SqlFilter | None = None
    predicate: Callable[[Record], bool] | None = None
    chunk_filter: Callable[[bytes], bool] | None = None
    subscription_slot: int | None = None

    def start(self, offset: OffsetSpec) -> OffsetSpec:
        """Where the reader starts: a named consumer without x-stream-offset resumes."""
        name = self.options.consumer_name
        if name is None or self.options.offset_given:
            return offset
        resume = resume_offset(self.stream.offsets, name)
        return offset if resume is None else OffsetSpec("offset", resume)

    def tracker(self, reader: StreamReader) -> OffsetTracker | None:
        name = self.options.consumer_name
        if name is None:
            return None
        return OffsetTracker(name, self.stream.offsets, lambda: reader.position, self.loop)


def consumer_extras(
    options: ConsumerOptions,
    stream: Stream,
    loop: asyncio.AbstractEventLoop | None,
    sql_limits: tuple[int, int] = (4096, 64),
) -> ConsumerExtras:
    """``sql_limits``: (max_sql_length, max_sql_depth)."""
    extras = ConsumerExtras(options, stream, loop)
    if options.sql is None:
        return extras
    sql = compile_or_406(options.sql, *sql_limits)
    extras.sql = sql
    extras.predicate = sql_predicate(sql)
    if options.consumer_name is not None:
        reg = registry(stream)
        try:
            slot = reg.register(options.consumer_name, options.sql)
        except RegistryError as error:  # a slot that is not on disk must never be used
            raise errors.InternalError(
                f"cannot register the SQL subscription of consumer "
                f"'{options.consumer_name}': {error}",
                60,
                20,
            ) from None
        if slot is not None:
            extras.subscription_slot = slot
            extras.chunk_filter = reg.chunk_filter(slot)
    return extras
