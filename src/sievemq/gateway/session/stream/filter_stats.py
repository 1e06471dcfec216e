"""Per-consumer filter statistics, and their deltas folded into the stream's ``FilterStats``.

HOT PATH (once per delivery turn, never per message). A consumer owns exactly one
``StreamReader``, whose ``ReadStats`` are cumulative, so the consumer's own read counters are
the reader's; only what the reader cannot know (messages and bytes delivered) is counted here.
After each turn ``account`` adds the reader's change since the previous turn to the stream's
totals: a few C-level passes over eight counters per turn, whatever the number of chunks
skipped or records delivered. The counters are storage's
(``sievemq.storage.filter_stats``): their names are read from the types, never listed here.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from sievemq.storage import READ_FIELDS, FilterStats

if TYPE_CHECKING:
    from sievemq.filtering.sql import SqlFilter
    from sievemq.storage import ReadStats

_snapshot = attrgetter(*READ_FIELDS)  # the reader's counters as a tuple, in READ_FIELDS order


class ConsumerFilterStats:
    """What one consumer's reader did, plus what the consumer delivered."""

    __slots__ = (
        "_last",
        "_reader",
        "_sql",
        "_sql_errors",
        "_start",
        "_stream",
        "bytes_delivered",
        "messages_delivered",
    )

    def __init__(
        self, reader_stats: ReadStats, stream_stats: FilterStats, sql: SqlFilter | None = None
    ) -> None:
        self._reader = reader_stats
        self._stream = stream_stats
        self._sql = sql  # its evaluation errors are counted by the filter itself
        self._sql_errors = 0
        # a reader may have counted seek work before the consumer starts: not ours to report
        self._start = self._last = _snapshot(reader_stats)
        self.messages_delivered = 0
        self.bytes_delivered = 0

    def account(self, messages: int, nbytes: int) -> None:
        """After a delivery turn: count the deliveries and pass the reader's delta upstream."""
        self.messages_delivered += messages
        self.bytes_delivered += nbytes
        now = _snapshot(self._reader)
        last = self._last
        target = self._stream
        if now != last:
            self._last = now
            for name, count, was in zip(READ_FIELDS, now, last):  # noqa: B905 (same length)
                if count != was:
                    setattr(target, name, getattr(target, name) + count - was)
        sql = self._sql
        if sql is not None and sql.errors != self._sql_errors:
            target.sql_errors += sql.errors - self._sql_errors
            self._sql_errors = sql.errors
        if messages:
            target.messages_delivered += messages
            target.bytes_delivered += nbytes

    def snapshot(self) -> FilterStats:
        """This consumer's counters since it started."""
        now, start = _snapshot(self._reader), self._start
        return FilterStats(
            **{name: now[i] - start[i] for i, name in enumerate(READ_FIELDS)},
            messages_delivered=self.messages_delivered,
            bytes_delivered=self.bytes_delivered,
            sql_errors=self._sql.errors if self._sql is not None else 0,
        )
