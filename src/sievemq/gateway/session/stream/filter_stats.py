"""Per-consumer filter statistics, and their deltas folded into the stream's ``FilterStats``.

HOT PATH (once per delivery turn, never per message). A consumer owns exactly one
``StreamReader``, whose ``ReadStats`` are cumulative, so the consumer's own read counters are
the reader's; only what the reader cannot know (messages and bytes delivered) is counted here.
After each turn ``account`` adds the reader's change since the previous turn to the stream's
totals: eight subtractions per turn, whatever the number of chunks skipped or records delivered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sievemq.filtering.sql import SqlFilter
    from sievemq.gateway.model.stream.queue import FilterStats
    from sievemq.storage import ReadStats

READ_FIELDS = (
    "chunks_scanned",
    "chunks_skipped",
    "chunks_false_positive",
    "records_matched",
    "records_skipped",
    "records_skipped_by_bloom",
    "bytes_read",
    "chunks_skipped_subscription",
)


def _snapshot(stats: ReadStats) -> tuple[int, int, int, int, int, int, int, int]:
    return (
        stats.chunks_scanned,
        stats.chunks_skipped,
        stats.chunks_false_positive,
        stats.records_matched,
        stats.records_skipped,
        stats.records_skipped_by_bloom,
        stats.bytes_read,
        stats.chunks_skipped_extra,
    )


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
            target.chunks_scanned += now[0] - last[0]
            target.chunks_skipped += now[1] - last[1]
            target.chunks_false_positive += now[2] - last[2]
            target.records_matched += now[3] - last[3]
            target.records_skipped += now[4] - last[4]
            target.records_skipped_by_bloom += now[5] - last[5]
            target.bytes_read += now[6] - last[6]
            target.chunks_skipped_subscription += now[7] - last[7]
        sql = self._sql
        if sql is not None and sql.errors != self._sql_errors:
            target.sql_errors += sql.errors - self._sql_errors
            self._sql_errors = sql.errors
        if messages:
            target.messages_delivered += messages
            target.bytes_delivered += nbytes

    def as_dict(self) -> dict[str, int]:
        """This consumer's counters since it started (JSON-ready, same names as the stream's)."""
        now, start = _snapshot(self._reader), self._start
        out = {name: now[i] - start[i] for i, name in enumerate(READ_FIELDS)}
        out["messages_delivered"] = self.messages_delivered
        out["bytes_delivered"] = self.bytes_delivered
        out["sql_errors"] = self._sql.errors if self._sql is not None else 0
        return out
