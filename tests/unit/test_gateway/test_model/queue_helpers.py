"""Helpers of the durable queue tests: a queue named ``q`` on a queue log in a directory
(opened again on the same directory: a restart), and what a consumer takes from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pamqp import commands

from sievemq.gateway.model.classic.arguments import validate_declare
from sievemq.gateway.model.classic.message import (
    DEFAULT_WINDOW,
    MemoryBudget,
    MemoryWindow,
    QueueMessage,
)
from sievemq.gateway.model.classic.queue import ClassicQueue, DeadLetter
from sievemq.storage.queue_log import QueueLog

PERSISTENT: bytes = commands.Basic.Properties(delivery_mode=2).marshal()


def logged_queue(
    directory: Path,
    kind: Literal["classic", "quorum"],
    arguments: dict[str, Any] | None,
    window: MemoryWindow = DEFAULT_WINDOW,
    segment_bytes: int = 2000,
    budget: MemoryBudget | None = None,
    dead_letter: DeadLetter | None = None,
) -> ClassicQueue:
    """A durable ``kind`` queue ``q`` on the log in ``directory`` (segments of
    ``segment_bytes``), restored from what the log holds; ``dead_letter`` is set first,
    so what the restore dead-letters reaches it."""
    qlog = QueueLog(directory, segment_bytes=segment_bytes)
    queue = ClassicQueue(
        "q",
        "/",
        validate_declare(kind, "q", "/", True, False, False, arguments),
        durable=True,
        log_store=qlog,
        window=window,
        budget=budget,
    )
    if dead_letter is not None:
        queue.dead_letter = dead_letter
    queue.restore(qlog.scan(), qlog.delivered)
    return queue


def take_all(queue: ClassicQueue) -> list[QueueMessage]:
    """Every message ``queue`` hands out now, not settled (held as a consumer would)."""
    out = []
    while (msg := queue.take()) is not None:
        out.append(msg)
    return out
