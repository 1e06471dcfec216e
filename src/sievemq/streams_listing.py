"""`sievemq streams`: the streams of a data directory, read from disk without a server.

Wiring only: the names come from the durable definitions (gateway), the counts from the
index files (storage), read-only, so it is safe while the server runs.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from sievemq.gateway.model.definitions import load, stream_directory
from sievemq.storage.tools import summarize

_COLUMNS = ("vhost", "name", "messages", "bytes", "segments", "first", "last", "last write")


def list_streams(data_dir: str | None, out: TextIO, err: TextIO) -> int:
    """Print one row per stream; exit status 0, or 1 when the directory holds no SieveMQ data."""
    directory = Path(data_dir or os.environ.get("SIEVEMQ_DATA_DIR") or "./data")
    try:
        definitions = load(directory)
    except ValueError as error:
        print(f"sievemq streams: {error}", file=err)
        return 1
    if definitions is None:
        print(f"sievemq streams: no SieveMQ data in {directory}", file=err)
        return 1
    rows = [_COLUMNS]
    for queue in sorted(definitions.get("queues", []), key=lambda q: (q["vhost"], q["name"])):
        summary = summarize(stream_directory(directory, queue["vhost"], queue["name"]))
        written = (
            datetime.fromtimestamp(summary.last_timestamp_ms / 1000, UTC).isoformat(
                timespec="seconds"
            )
            if summary.last_timestamp_ms is not None
            else "-"
        )
        rows.append(
            (
                queue["vhost"],
                queue["name"],
                str(summary.messages),
                str(summary.bytes),
                str(summary.segments),
                "-" if summary.first_offset is None else str(summary.first_offset),
                "-" if summary.last_offset is None else str(summary.last_offset),
                written,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )
    return 0
