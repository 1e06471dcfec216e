"""The one storage error type.

The storage package may not import the AMQP layer, so the error carries the reply code the
gateway should use (541 INTERNAL_ERROR: a broken disk or file is the server's fault).
"""

from __future__ import annotations


class StorageError(Exception):
    """A write, read or recovery step failed; nothing was committed."""

    reply_code: int = 541
    name: str = "INTERNAL_ERROR"
