"""The process's file-descriptor budget: how many the node may hold, and for what.

A stock Linux process may open 1,024 descriptors (the soft ``RLIMIT_NOFILE``; systemd
services too unless raised), while its hard limit is usually far higher. At start
``sievemq serve`` raises the soft limit to the hard one (``raise_soft_limit``), then
splits what it got (``plan``):

- ``internal``: 64 for the node's own files (listeners, the event loop's, the definitions
  log, a worker thread's file it opens for a moment, the admin plane's HTTP clients);
- ``sockets``: half of the rest, at most ``--max-connections``: the AMQP 0-9-1 and stream
  protocol connections together (a connection past it is closed at accept);
- ``open_files``: what is left, for the storage handle cache (``storage.handles``:
  segment, index and offset files kept open, least recently used closed first); an
  explicit ``--max-open-files`` above it is lowered to it, with a log line.

Running out anyway (another process, a burst of internal opens) is ``EMFILE``/``ENFILE``
(``is_exhausted``): the operation that met it gets a 506 naming the limit and the storage
cache gives back every idle descriptor, so the next operation finds room.
"""

from __future__ import annotations

import errno
import os
import resource
from dataclasses import dataclass
from typing import Final

from sievemq.amqp import errors
from sievemq.storage import handles

INTERNAL: Final = 64
EXHAUSTED: Final = (errno.EMFILE, errno.ENFILE)


def soft_limit() -> int:
    """The descriptors this process may open now (its soft ``RLIMIT_NOFILE``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one; returns (before, now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):  # pragma: no cover - a sandbox that forbids it
            return soft, soft
        return soft, hard
    return soft, soft_limit()


@dataclass(frozen=True)
class DescriptorBudget:
    """How ``total`` descriptors are split (see the module docstring)."""

    total: int
    internal: int
    sockets: int
    open_files: int

    def describe(self) -> str:
        return (
            f"{self.sockets} for connections, {self.open_files} for storage files, "
            f"{self.internal} for internal use"
        )


def plan(total: int, max_connections: int, max_open_files: int | None = None) -> DescriptorBudget:
    """Split ``total`` descriptors: ``internal`` is 64 (a quarter of ``total`` below 256);
    connections get half of the rest, at most ``max_connections``; the storage cache the
    remainder (at least 4), or ``max_open_files`` when that is smaller."""
    internal = min(INTERNAL, total // 4)
    rest = max(total - internal, 8)
    sockets = max(1, min(max_connections, rest // 2))
    room = max(4, rest - sockets)
    open_files = room if max_open_files is None else min(room, max_open_files)
    return DescriptorBudget(total, internal, sockets, open_files)


def open_descriptors() -> int:
    """How many descriptors this process has open now (``/proc/self/fd``)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(folder)) - 1)  # less the one listdir used
        except OSError:
            continue
    return 0  # pragma: no cover - neither exists


def is_exhausted(error: BaseException) -> bool:
    """True for an OSError that says the process (or system) is out of descriptors."""
    return isinstance(error, OSError) and error.errno in EXHAUSTED


def exhausted_text(error: BaseException) -> str:
    """What ran out, naming the limit: the reply text of a 506."""
    scope = "system" if getattr(error, "errno", None) == errno.ENFILE else "process"
    return (
        f"out of file descriptors (the {scope}'s limit; this process may open "
        f"{soft_limit()}): {error}"
    )


def exhausted_error(error: BaseException) -> errors.ChannelResourceError:
    """The 506 that closes the channel whose operation ran out of descriptors; idle
    storage descriptors are given back at once, so the next operation finds room."""
    handles.shared.relieve()
    return errors.ChannelResourceError(exhausted_text(error))


__all__ = [
    "EXHAUSTED",
    "INTERNAL",
    "DescriptorBudget",
    "exhausted_error",
    "exhausted_text",
    "is_exhausted",
    "open_descriptors",
    "plan",
    "raise_soft_limit",
    "soft_limit",
]
