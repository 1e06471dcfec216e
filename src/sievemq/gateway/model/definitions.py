"""Durable definitions on disk: vhosts, users, durable exchanges, stream queues, bindings.

One JSON file, ``<data_dir>/definitions.json``, shaped like RabbitMQ's definitions export.
Written whole on every change (definitions change rarely) through write-temp + fsync +
rename + fsync of the directory, so a crash leaves either the old or the new file.
Field-table values that JSON cannot hold (non-UTF-8 longstr, byte arrays, timestamps,
decimals) are tagged so they come back with their AMQP type.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from sievemq.storage.layout import queue_directory, safe_name, stream_directory

__all__ = [
    "decode_value",
    "encode_value",
    "load",
    "queue_directory",
    "safe_name",
    "save",
    "stream_directory",
]

FILE_NAME = "definitions.json"
FORMAT_VERSION = 1
_TAG = "__amqp__"


def encode_value(value: Any) -> Any:
    """A decoded field value as JSON-safe data."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, bytes):
        return {_TAG: "longstr", "b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, bytearray):
        return {_TAG: "binary", "b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        return {_TAG: "timestamp", "iso": value.isoformat()}
    if isinstance(value, Decimal):
        return {_TAG: "decimal", "s": str(value)}
    if isinstance(value, dict):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_value(v) for v in value]
    raise TypeError(f"cannot store a {type(value).__name__} in definitions")


def decode_value(value: Any) -> Any:
    """The inverse of encode_value."""
    if isinstance(value, dict):
        tag = value.get(_TAG)
        if tag == "longstr":
            return base64.b64decode(value["b64"])
        if tag == "binary":
            return bytearray(base64.b64decode(value["b64"]))
        if tag == "timestamp":
            return datetime.datetime.fromisoformat(value["iso"])
        if tag == "decimal":
            return Decimal(value["s"])
        return {k: decode_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    return value


def load(data_dir: Path) -> dict[str, Any] | None:
    """The stored definitions, or None when there are none yet."""
    path = Path(data_dir) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported definitions format")
    decoded = decode_value(data)
    assert isinstance(decoded, dict)
    return decoded


def save(data_dir: Path, definitions: dict[str, Any]) -> None:
    """Atomically replace the definitions file."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    payload = dict(definitions)
    payload["version"] = FORMAT_VERSION
    text = json.dumps(encode_value(payload), indent=1, sort_keys=True)
    target = directory / FILE_NAME
    temp = directory / (FILE_NAME + ".tmp")
    with open(temp, "wb") as handle:
        handle.write(text.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, target)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
