"""Resource alarms, as RabbitMQ's: a memory high watermark and a disk free limit.

A timer polls the process's resident memory and the free space of the data directory's file
system (every ``--alarm-interval-ms``, 1 s by default); nothing here runs per message. When
the set of alarms that are on changes, the listeners are told (the node blocks or unblocks its
publishing connections). Limits may change at runtime (``set_limits``), as
``rabbitmqctl set_vm_memory_high_watermark`` / ``set_disk_free_limit`` do.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

log = logging.getLogger(__name__)

MEMORY: Final = "memory"
DISK: Final = "disk"


def total_memory() -> int:
    """Physical RAM, or the cgroup's memory limit when that is lower (containers)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


class Probe(Protocol):
    """Where the alarms read the resources (tests inject their own)."""

    def memory_used(self) -> int: ...
    def disk_free(self) -> int: ...


class SystemProbe:
    """This process's resident set size and the data directory's free disk space."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._page = os.sysconf("SC_PAGE_SIZE")

    def memory_used(self) -> int:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * self._page

    def disk_free(self) -> int:
        return shutil.disk_usage(self.data_dir).free


def blocked_reason(reasons: tuple[str, ...]) -> str:
    """The connection.blocked reason text, as RabbitMQ words it: ``low on memory & disk``."""
    return "low on " + " & ".join(reasons)


Listener = Callable[[tuple[str, ...]], None]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """What the poll needs of the event loop: its ``call_later`` (tests pass a clock they
    move by hand, ``sievemq.testing.clock.ManualClock``)."""

    def call_later(self, delay: float, callback: Callable[[], object], /) -> Timer: ...


class ResourceAlarms:
    """The alarm state machine: ``check`` polls once; listeners hear each change."""

    def __init__(self, probe: Probe, memory_limit: int, disk_free_limit: int) -> None:
        self.probe = probe
        self.memory_limit = memory_limit
        self.disk_free_limit = disk_free_limit
        self.reasons: tuple[str, ...] = ()  # the alarms that are on, memory before disk
        self.memory_used: int | None = None
        self.disk_free: int | None = None
        self._listeners: list[Listener] = []
        self._timer: Timer | None = None
        self._write_failed = False  # a write hit ENOSPC since the last check

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def check(self) -> tuple[str, ...]:
        """Read the probe, update the alarms, tell the listeners when the set changed.

        A probe that fails leaves that resource's alarm as it was (logged): a transient
        read error must neither block every publisher nor lift a real alarm.
        """
        memory_on = MEMORY in self.reasons
        disk_on = DISK in self.reasons
        try:
            self.memory_used = self.probe.memory_used()
            memory_on = self.memory_used > self.memory_limit
        except (OSError, ValueError, IndexError) as error:
            log.warning("memory alarm: cannot read memory use: %s", error)
        try:
            self.disk_free = self.probe.disk_free()
            disk_on = self.disk_free < self.disk_free_limit
        except OSError as error:
            log.warning("disk alarm: cannot read free disk space: %s", error)
        if self._write_failed:  # held until a check after the failed write finds room
            self._write_failed = False
            disk_on = True
        self._set(memory_on, disk_on)
        return self.reasons

    def storage_write_failed(self, error: OSError) -> None:
        """A stream write failed with ``error``: for a full disk (ENOSPC, EDQUOT) the disk
        alarm goes on now, stays on through the next periodic check, and then until a check
        finds free space above the limit (publishers are blocked, not nacked message after
        message); once it clears, publishing resumes by itself. Descriptor exhaustion is
        only logged here: the storage descriptor cache already gave back every idle one."""
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            log.error("storage: out of descriptors: %s", error)
            return
        self._write_failed = True
        self._set(MEMORY in self.reasons, True)

    def _set(self, memory_on: bool, disk_on: bool) -> None:
        reasons = tuple(name for name, on in ((MEMORY, memory_on), (DISK, disk_on)) if on)
        if reasons != self.reasons:
            previous, self.reasons = self.reasons, reasons
            self._log_change(previous, reasons)
            for listener in list(self._listeners):
                listener(reasons)

    def set_limits(
        self, memory_limit: int | None = None, disk_free_limit: int | None = None
    ) -> tuple[str, ...]:
        """Change limits at runtime and re-check at once."""
        if memory_limit is not None:
            self.memory_limit = memory_limit
        if disk_free_limit is not None:
            self.disk_free_limit = disk_free_limit
        return self.check()

    def start(self, loop: Timers, interval_s: float) -> None:
        """Check now, then every ``interval_s`` on ``loop``'s timers until ``stop``."""
        self.stop()

        def tick() -> None:
            try:
                self.check()
            finally:
                self._timer = loop.call_later(interval_s, tick)

        tick()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state for the admin overview."""
        return {
            "active": list(self.reasons),
            "memory": {
                "alarm": MEMORY in self.reasons,
                "used_bytes": self.memory_used,
                "limit_bytes": self.memory_limit,
            },
            "disk": {
                "alarm": DISK in self.reasons,
                "free_bytes": self.disk_free,
                "limit_bytes": self.disk_free_limit,
            },
        }

    def _log_change(self, previous: tuple[str, ...], now: tuple[str, ...]) -> None:
        for name in now:
            if name not in previous:
                log.warning(
                    "%s resource alarm set: publishers are blocked (%s)", name, self._figures(name)
                )
        for name in previous:
            if name not in now:
                log.warning("%s resource alarm cleared (%s)", name, self._figures(name))

    def _figures(self, name: str) -> str:
        if name == MEMORY:
            return f"used {self.memory_used} bytes, limit {self.memory_limit}"
        return f"free {self.disk_free} bytes, limit {self.disk_free_limit}"
