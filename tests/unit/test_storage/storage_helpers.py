"""Helpers for storage tests (no tests, no fixtures): a message, read a whole stream, list files."""

from __future__ import annotations

from pathlib import Path

from sievemq.storage import Message, Record, StreamReader


def msg(body: bytes = b"body", *values: str, rk: str = "rk", props: bytes = b"\x80\x00") -> Message:
    return Message(tuple(values), "amq.direct", rk, props, body)


def read_all(reader: StreamReader, **kwargs: object) -> list[Record]:
    out: list[Record] = []
    while True:
        out.extend(reader.read(1000, **kwargs))  # type: ignore[arg-type]
        if reader.at_end:
            return out


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
