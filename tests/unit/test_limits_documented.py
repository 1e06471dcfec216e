"""Every limit setting is documented with its default in docs/compatibility.md.

Each field of ``Settings`` is either a limit (it must have a row in the "Limits on input and
resources" table of docs/compatibility.md naming its flag, or its environment variable when it
has no flag, with its default) or listed below as not one, so a new setting cannot slip by.
"""

from __future__ import annotations

import re
from pathlib import Path

from sievemq.settings import _FLAGS, Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
NOT_LIMITS = {
    "amqp_host", "amqp_port", "admin_host", "admin_port", "amqps_port", "stream_port",
    "stream_tls_port", "data_dir", "durability", "fsync", "sync_interval_ms", "tls_cert",
    "tls_key", "default_user", "default_pass", "definitions", "default_queue_type",
    "gc_freeze", "collect_statistics_interval_ms",
    # a cluster node's identity and its etcd (docs/cluster.md), not limits
    "node_name", "cluster_etcd", "cluster_port", "advertise_host", "cluster_lease_ttl",
    "reuse_port",
}  # fmt: skip


def limits_section() -> str:
    text = DOC.read_text()
    start = text.index("## Limits on input and resources")
    return text[start : text.index("\n## ", start + 1)]


def renderings(value: object) -> set[str]:
    """How a default may be written: 4096, 131072, 1 MiB, 256 MiB, 50MB, 10 s, 0.4."""
    if value is None:
        return {"auto"}  # computed at start (e.g. max_open_files from the descriptor limit)
    out = {str(value)}
    if isinstance(value, float) and value.is_integer():
        out |= {f"{int(value)} s", str(int(value))}
    if isinstance(value, int) and not isinstance(value, bool):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value and value % size == 0:
                out.add(f"{value // size} {unit}")
        if value and value % 1_000_000 == 0:
            out.add(f"{value // 1_000_000}MB")
    return out


def test_every_setting_is_classified() -> None:
    unknown = set(Settings.model_fields) - NOT_LIMITS
    limits = {name for name in unknown if name.startswith("max_")}
    assert limits, "no max_* settings found: did the names change?"
    # everything else must be a limit too (documented below) or named in NOT_LIMITS
    other_limits = {
        "channel_max", "frame_max", "heartbeat", "write_buffer_high", "delivery_batch",
        "memory_high_watermark", "disk_free_limit", "alarm_interval_ms",
        "handshake_timeout_s", "shutdown_timeout_s", "stream_frame_max",
        "stream_consumer_update_timeout_s",
        "queue_memory_messages", "queue_memory_bytes",
    }  # fmt: skip
    new = unknown - limits - other_limits
    assert not new, f"add {new} to the Limits table of docs/compatibility.md or to NOT_LIMITS"


def test_every_limit_has_a_row_with_its_default() -> None:
    section = limits_section()
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    flags = {name for name, _kind, _help in _FLAGS}
    missing = []
    for name, field in Settings.model_fields.items():
        if name in NOT_LIMITS:
            continue
        key = f"`--{name.replace('_', '-')}`" if name in flags else f"`SIEVEMQ_{name.upper()}`"
        row = next((r for r in rows if r.startswith(f"| {key}")), None)
        if row is None:
            missing.append(f"{name}: no row starting with {key}")
            continue
        default_cell = row.split(" | ")[1]
        if not renderings(field.default) & {default_cell.strip(), *re.split(r" \(", default_cell)}:
            missing.append(f"{name}: default {field.default!r} not in {default_cell!r}")
    assert missing == []
