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
import hashlib
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

FILE_NAME = "definitions.json"
FORMAT_VERSION = 1
_TAG = "__amqp__"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_MAX_NAME = 200


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


def safe_name(name: str) -> str:
    """A file-system-safe, reversible-enough, collision-free directory name.

    Letters, digits, ``_`` and ``-`` stay; every other byte becomes ``%XX`` (so ``.``,
    ``..`` and ``/`` cannot escape). Names that would be too long for a file system end
    in a SHA-256 prefix instead.
    """
    raw = name.encode("utf-8")
    out = "".join(chr(b) if chr(b) in _SAFE else f"%{b:02X}" for b in raw) or "%"
    if len(out) > _MAX_NAME:
        digest = hashlib.sha256(raw).hexdigest()[:32]
        out = out[: _MAX_NAME - 33] + "~" + digest
    return out


def stream_directory(data_dir: Path, vhost: str, name: str) -> Path:
    """``<data_dir>/streams/<safe vhost>/<safe name>``."""
    return Path(data_dir) / "streams" / safe_name(vhost) / safe_name(name)


def queue_directory(data_dir: Path, vhost: str, name: str) -> Path:
    """``<data_dir>/queues/<safe vhost>/<safe name>``: a classic/quorum queue's log."""
    return Path(data_dir) / "queues" / safe_name(vhost) / safe_name(name)


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
