"""Test data written with sievemq.storage directly (no server), shaped for pushdown checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pamqp import commands, header

from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.layout import stream_directory

T0 = 1_700_000_000_000  # ms: chunk c has timestamp T0 + c * 1000


def raw_properties(**kwargs: object) -> bytes:
    """Raw content-header property bytes (what the gateway stores) for pamqp properties."""
    return header.ContentHeader(0, 0, commands.Basic.Properties(**kwargs)).marshal()[12:]


def write_stream(
    data_dir: Path,
    name: str,
    chunks: int = 50,
    per_chunk: int = 20,
    vhost: str = "/",
    segment_bytes: int = 16_000,
    extra: object = None,
) -> Path:
    """``chunks`` chunks of ``per_chunk`` messages; chunk c carries filter value ``v{c % 10}``
    on every message but the last (unfiltered); message i of a chunk has header ``n`` = i."""
    directory = stream_directory(data_dir, vhost, name)
    directory.mkdir(parents=True, exist_ok=True)
    with Stream.open(directory, StreamConfig(max_segment_bytes=segment_bytes)) as stream:
        for c in range(chunks):
            messages = [
                Message(
                    (f"v{c % 10}",) if i < per_chunk - 1 else (),
                    "amq.direct",
                    f"rk{c}",
                    raw_properties(content_type="text/plain", headers={"n": i}),
                    f"{name} {c} {i}".encode(),
                )
                for i in range(per_chunk)
            ]
            blob = extra(messages) if callable(extra) else b""
            stream.append(messages, timestamp_ms=T0 + c * 1000, extra=blob)
    return directory


def parquet_available_now(frame: Any, out: Path, checkpoint: Path) -> list[int]:
    """Run a streaming DataFrame into Parquet at ``out`` with Trigger.AvailableNow; the rows
    of each micro-batch that had any."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
