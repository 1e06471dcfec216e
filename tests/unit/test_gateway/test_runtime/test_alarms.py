"""Resource alarms: sizes, watermarks, the alarm state machine (injected probe), the real probe."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from sievemq.gateway.runtime.alarms import (
    DISK,
    MEMORY,
    ResourceAlarms,
    SystemProbe,
    blocked_reason,
    total_memory,
)
from sievemq.settings import Settings
from sievemq.testing.clock import ManualClock
from sievemq.units import MemoryWatermark, parse_memory_watermark, parse_size


@dataclass
class FakeProbe:
    memory: int = 100
    free: int = 10_000
    fail: bool = False

    def memory_used(self) -> int:
        if self.fail:
            raise OSError("no /proc")
        return self.memory

    def disk_free(self) -> int:
        if self.fail:
            raise OSError("stat failed")
        return self.free


def _alarms(probe: FakeProbe) -> tuple[ResourceAlarms, list[tuple[str, ...]]]:
    alarms = ResourceAlarms(probe, memory_limit=1000, disk_free_limit=5000)
    heard: list[tuple[str, ...]] = []
    alarms.add_listener(heard.append)
    return alarms, heard


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("50000000", 50_000_000),
        ("50MB", 50_000_000),
        ("50mb", 50_000_000),
        ("2GB", 2_000_000_000),
        ("512MiB", 512 * 2**20),
        ("1GiB", 2**30),
        ("4k", 4096),
        ("1PB", 10**15),
        (" 7 kB ", 7000),
        (123, 123),
    ],
)
def test_sizes_use_rabbitmq_units(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-5", "1.5GB", "10 XB", "MB"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_memory_watermark_is_a_fraction_or_a_size() -> None:
    assert parse_memory_watermark("0.4") == MemoryWatermark(relative=0.4)
    assert parse_memory_watermark(0.6).limit(1000) == 600
    assert parse_memory_watermark("1") == MemoryWatermark(relative=1.0)
    absolute = parse_memory_watermark("2GB")
    assert absolute.absolute == 2_000_000_000 and absolute.limit(10**12) == 2_000_000_000
    assert parse_memory_watermark("1000").limit(10**12) == 1000
    for bad in ("1.5", "0.0", "0", "lots"):
        with pytest.raises(ValueError):
            parse_memory_watermark(bad)


def test_settings_defaults_are_rabbitmq_defaults_and_flags_parse_sizes() -> None:
    settings = Settings()
    assert settings.memory_high_watermark == "0.4"
    assert settings.disk_free_limit == 50_000_000
    assert settings.alarm_interval_ms == 1000
    assert Settings(disk_free_limit="1GiB").disk_free_limit == 2**30
    with pytest.raises(ValueError):
        Settings(memory_high_watermark="2.0")


def test_no_alarm_while_within_limits() -> None:
    alarms, heard = _alarms(FakeProbe(memory=999, free=5000))
    assert alarms.check() == ()
    assert heard == []  # nothing changed: nobody is told


def test_memory_alarm_sets_and_clears() -> None:
    probe = FakeProbe()
    alarms, heard = _alarms(probe)
    probe.memory = 1001
    assert alarms.check() == (MEMORY,)
    assert alarms.check() == (MEMORY,)  # still on: listeners are not told twice
    probe.memory = 1000
    assert alarms.check() == ()
    assert heard == [(MEMORY,), ()]


def test_disk_alarm_sets_and_clears() -> None:
    probe = FakeProbe()
    alarms, heard = _alarms(probe)
    probe.free = 4999
    alarms.check()
    probe.free = 5000
    alarms.check()
    assert heard == [(DISK,), ()]


def test_both_alarms_report_memory_first_and_clear_one_at_a_time() -> None:
    probe = FakeProbe(memory=2000, free=0)
    alarms, heard = _alarms(probe)
    alarms.check()
    probe.memory = 10
    alarms.check()
    probe.free = 10**6
    alarms.check()
    assert heard == [(MEMORY, DISK), (DISK,), ()]
    assert blocked_reason((MEMORY, DISK)) == "low on memory & disk"
    assert blocked_reason((DISK,)) == "low on disk"


def test_a_failing_probe_keeps_the_alarms_as_they_were() -> None:
    probe = FakeProbe(free=0)
    alarms, heard = _alarms(probe)
    alarms.check()
    probe.fail = True
    assert alarms.check() == (DISK,)  # not lifted by a read error
    probe.fail = False
    probe.free = 10**6
    assert alarms.check() == ()
    assert heard == [(DISK,), ()]


def test_set_limits_rechecks_at_once() -> None:
    probe = FakeProbe(memory=500, free=6000)
    alarms, heard = _alarms(probe)
    assert alarms.set_limits(disk_free_limit=7000) == (DISK,)
    assert alarms.set_limits(memory_limit=100) == (MEMORY, DISK)
    assert alarms.set_limits(memory_limit=10**9, disk_free_limit=0) == ()
    assert heard == [(DISK,), (MEMORY, DISK), ()]


def test_snapshot_shows_figures_and_limits() -> None:
    alarms, _ = _alarms(FakeProbe(memory=1500, free=9000))
    alarms.check()
    snap = alarms.snapshot()
    assert snap["active"] == [MEMORY]
    assert snap["memory"] == {"alarm": True, "used_bytes": 1500, "limit_bytes": 1000}
    assert snap["disk"] == {"alarm": False, "free_bytes": 9000, "limit_bytes": 5000}


def test_the_timer_polls_every_interval_until_stopped() -> None:
    probe = FakeProbe()
    alarms, heard = _alarms(probe)
    clock = ManualClock()
    alarms.start(clock, 1.0)  # checks at once, then every second
    assert clock.pending() == [1.0]
    clock.advance(3.0)
    probe.free = 0
    clock.advance(0.5)
    assert heard == []  # not polled between two ticks
    clock.advance(0.5)
    assert heard == [(DISK,)]
    clock.advance(5.0)
    assert heard == [(DISK,)]  # still on: heard once
    alarms.stop()
    assert clock.pending() == []
    probe.free = 10**6
    clock.advance(5.0)
    assert heard == [(DISK,)]  # stopped: no more polls
    assert alarms.reasons == (DISK,)


def test_system_probe_reads_this_process_and_the_data_dir(tmp_path: Path) -> None:
    probe = SystemProbe(tmp_path)
    status = Path("/proc/self/status").read_text()
    rss_kib = int(status.split("VmRSS:")[1].split()[0])
    assert abs(probe.memory_used() - rss_kib * 1024) < 64 * 2**20
    assert abs(probe.disk_free() - shutil.disk_usage(tmp_path).free) < 256 * 2**20
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < total_memory() <= ram
