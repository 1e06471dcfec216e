"""The chunked stream store: a plain synchronous library (no asyncio, no protocol).

The Spark job imports it on its own, so it depends only on the standard library, mmh3
and zstandard. docs/storage-format.md describes the bytes on disk.
"""

from sievemq.storage.bloom import BloomFilter
from sievemq.storage.errors import StorageError
from sievemq.storage.filter_stats import FILTER_FIELDS, READ_FIELDS, FilterStats, ReadStats
from sievemq.storage.filters import FilterSpec
from sievemq.storage.offsets import OffsetStore
from sievemq.storage.reader import StreamReader
from sievemq.storage.stream import (
    Durability,
    PendingStream,
    Stream,
    StreamConfig,
    StreamStats,
    StreamSurvey,
    survey,
)
from sievemq.storage.types import Message, Record

__all__ = [
    "FILTER_FIELDS",
    "READ_FIELDS",
    "BloomFilter",
    "Durability",
    "FilterSpec",
    "FilterStats",
    "Message",
    "OffsetStore",
    "PendingStream",
    "ReadStats",
    "Record",
    "StorageError",
    "Stream",
    "StreamConfig",
    "StreamReader",
    "StreamStats",
    "StreamSurvey",
    "survey",
]
