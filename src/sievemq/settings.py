"""Server settings: one frozen object built at the edge (CLI flags over env over defaults).

Wiring only: the settings are passed down to the gateway; nothing reads a global config.
Environment variables use the ``SIEVEMQ_`` prefix (``SIEVEMQ_AMQP_PORT``, ``SIEVEMQ_DATA_DIR``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sievemq.units import parse_memory_watermark, parse_size

FsyncPolicy = Literal["batch", "always", "never"]
QueueType = Literal["classic", "quorum", "stream"]

TLS_PAIR_ERROR = "--tls-cert and --tls-key must be given together (or neither, for no TLS)"


class Settings(BaseSettings):
    """Everything `sievemq serve` needs; limits are named so tests and operators can set them."""

    model_config = SettingsConfigDict(env_prefix="SIEVEMQ_", frozen=True, extra="forbid")

    amqp_host: str = "127.0.0.1"
    amqp_port: int = Field(default=5672, ge=0, le=65535)
    admin_host: str = "127.0.0.1"
    admin_port: int = Field(default=15672, ge=0, le=65535)
    data_dir: Path = Path("./data")

    fsync: FsyncPolicy = "batch"
    # what queue.declare without x-queue-type creates (RabbitMQ 4's vhost default queue type)
    default_queue_type: QueueType = "classic"
    sync_interval_ms: int = Field(default=200, ge=1)

    # negotiation (the client may lower these)
    channel_max: int = Field(default=2047, ge=1, le=65535)
    frame_max: int = Field(default=131072, ge=4096)
    heartbeat: int = Field(default=60, ge=0, le=65535)

    # resource limits
    max_connections: int = Field(default=4096, ge=1)
    max_message_size: int = Field(default=128 * 1024 * 1024, ge=1)
    max_unparsed_bytes: int = Field(default=4 * 1024 * 1024, ge=8192)
    # body bytes of unfinished messages buffered per connection, over all its channels
    max_pending_content_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    # past this many bytes waiting in a client's socket buffer its consumers stop reading the
    # stream and the server stops reading from that client, until the buffer drains
    write_buffer_high: int = Field(default=1024 * 1024, ge=4096)
    # how many deliveries one consumer writes per loop tick before yielding
    delivery_batch: int = Field(default=256, ge=1)
    # storage descriptors kept open (segment, index and offset files, least recently used
    # closed first and reopened when needed): bounds descriptors whatever the stream count;
    # None: what the process's descriptor limit leaves (gateway/runtime/descriptors.py)
    max_open_files: int | None = Field(default=None, ge=4)
    # ready messages of one classic/quorum queue held in memory with their bodies (count and
    # body bytes, whichever is reached first); past them the persistent messages of a durable
    # queue keep only a small index entry in memory and are read back from the queue's log
    queue_memory_messages: int = Field(default=2048, ge=1)
    queue_memory_bytes: int = Field(default=64 * 1024 * 1024, ge=1)

    @field_validator("queue_memory_bytes", mode="before")
    @classmethod
    def _parse_queue_memory_bytes(cls, value: Any) -> int:
        return parse_size(value)

    # hostile-input limits (docs/compatibility.md "Limits"): field tables from the wire
    # (headers, arguments, client properties) and x-stream-filter-sql expressions
    max_table_depth: int = Field(default=32, ge=1, le=200)
    max_table_entries: int = Field(default=4096, ge=1)
    max_array_length: int = Field(default=4096, ge=1)
    max_sql_length: int = Field(default=4096, ge=16, le=4096)  # the compiler's own cap
    max_sql_depth: int = Field(default=64, ge=1, le=64)

    # resource alarms (RabbitMQ's): while the process's memory is above the high watermark or
    # the data directory's free disk is below the limit, publishing connections are blocked
    memory_high_watermark: str = "0.4"  # a fraction of RAM, or a byte size such as "2GB"
    disk_free_limit: int = Field(default=50_000_000, ge=0)  # bytes; flags accept "50MB", "1GiB"
    alarm_interval_ms: int = Field(default=1000, ge=10)
    # the admin plane's rates: counters and lengths sampled this often (RabbitMQ's
    # collect_statistics_interval)
    collect_statistics_interval_ms: int = Field(default=5000, ge=100)

    @field_validator("memory_high_watermark", mode="before")
    @classmethod
    def _check_watermark(cls, value: Any) -> str:
        parse_memory_watermark(value)  # ValueError -> a pydantic validation error
        return str(value)

    @field_validator("disk_free_limit", mode="before")
    @classmethod
    def _parse_disk_limit(cls, value: Any) -> int:
        return parse_size(value)

    # freeze the long-lived objects out of the garbage collector's full collections (at
    # start and after bulk declares): gateway/runtime/gc_tuning.py
    gc_freeze: bool = True

    # connection timeouts
    handshake_timeout_s: float = Field(default=10.0, gt=0)
    shutdown_timeout_s: float = Field(default=5.0, gt=0)

    # --- TLS (AMQPS): off unless a certificate and its key are given; listens on amqp_host
    tls_cert: Path | None = None
    tls_key: Path | None = None
    amqps_port: int = Field(default=5671, ge=0, le=65535)

    # --- RabbitMQ Stream protocol listener (same host, users, vhosts and streams as AMQP)
    stream_port: int = Field(default=5552, ge=0, le=65535)
    stream_frame_max: int = Field(default=1048576, ge=8192)
    stream_tls_port: int = Field(default=5551, ge=0, le=65535)  # with --tls-cert/--tls-key
    # seconds a single active consumer has to answer ConsumerUpdate before its group moves on
    stream_consumer_update_timeout_s: float = Field(default=60.0, gt=0)
    # --- the first administrator, created with a new data directory (as RabbitMQ's
    # RABBITMQ_DEFAULT_USER/PASS; a user named guest may only log in from loopback), and a
    # RabbitMQ definitions file merged at every start
    default_user: str = Field(
        default="guest",
        min_length=1,
        validation_alias=AliasChoices(
            "default_user", "SIEVEMQ_DEFAULT_USER", "RABBITMQ_DEFAULT_USER"
        ),
    )
    default_pass: str = Field(
        default="guest",
        validation_alias=AliasChoices(
            "default_pass", "SIEVEMQ_DEFAULT_PASS", "RABBITMQ_DEFAULT_PASS"
        ),
        repr=False,
    )
    definitions: Path | None = None

    # --- a cluster (docs/cluster.md): off unless --cluster-etcd names etcd's client URLs
    node_name: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9@._-]+$")
    cluster_etcd: str | None = None  # URL[,URL...]
    cluster_port: int = Field(default=25672, ge=0, le=65535)  # the inter-node listener
    advertise_host: str | None = None  # how other nodes and Stream clients reach this one
    cluster_lease_ttl: int = Field(default=5, ge=1, le=300)  # seconds
    # SO_REUSEPORT on the AMQP(S) and HTTP ports: nodes of one machine share them
    reuse_port: bool = False

    @field_validator("cluster_etcd")
    @classmethod
    def _check_etcd(cls, value: str | None) -> str | None:
        if value is None:
            return None
        urls = [u.strip() for u in value.split(",") if u.strip()]
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if not urls or bad:
            raise ValueError(
                f"expected URL[,URL...] of etcd's client port, e.g. "
                f"http://127.0.0.1:2379, not {value!r}"
            )
        return ",".join(urls)

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        # a certificate without its key (or the reverse) is a typo, not "TLS off"
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(TLS_PAIR_ERROR)
        if self.cluster_etcd is not None and self.node_name is None:
            raise ValueError("--cluster-etcd needs --node-name (each node's own name)")
        return self

    @property
    def etcd_endpoints(self) -> list[str]:
        return self.cluster_etcd.split(",") if self.cluster_etcd else []

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None


_FLAGS: list[tuple[str, type, str]] = [
    ("amqp_host", str, "AMQP listen address (default 127.0.0.1)"),
    ("amqp_port", int, "AMQP port, 0 picks a free one (default 5672)"),
    ("admin_host", str, "admin HTTP listen address (default 127.0.0.1)"),
    ("admin_port", int, "admin HTTP port, 0 picks a free one (default 15672)"),
    ("data_dir", Path, "data directory (default ./data)"),
    ("sync_interval_ms", int, "fdatasync period under --fsync batch (default 200)"),
    ("channel_max", int, "max channels per connection offered in tune (default 2047)"),
    ("frame_max", int, "max frame size offered in tune (default 131072)"),
    ("heartbeat", int, "heartbeat interval offered in tune, seconds (default 60)"),
    (
        "max_connections",
        int,
        "max concurrent AMQP and stream connections (default 4096, at most half the "
        "descriptor limit less 64)",
    ),
    ("max_message_size", int, "max message body size in bytes (default 128 MiB)"),
    ("max_unparsed_bytes", int, "max unparsed input buffered per connection (default 4 MiB)"),
    (
        "max_pending_content_bytes",
        int,
        "max body bytes of unfinished messages per connection (default 256 MiB)",
    ),
    (
        "memory_high_watermark",
        str,
        "block publishers above this memory use: a fraction of RAM or a size (default 0.4)",
    ),
    ("disk_free_limit", str, "block publishers below this free disk, e.g. 1GB (default 50MB)"),
    ("alarm_interval_ms", int, "how often memory and disk are checked (default 1000)"),
    (
        "collect_statistics_interval_ms",
        int,
        "how often the admin API's rates sample every counter (default 5000)",
    ),
    ("write_buffer_high", int, "output bytes per connection before reading pauses (default 1 MiB)"),
    (
        "max_open_files",
        int,
        "storage file descriptors kept open, LRU (default: the descriptor limit, raised to "
        "the hard limit at start, less 64 internal and the connections' share, which is "
        "half the rest up to --max-connections; a larger value is lowered to it)",
    ),
    (
        "queue_memory_messages",
        int,
        "ready messages per classic queue kept in memory; past them durable ones are read "
        "back from disk (default 2048)",
    ),
    (
        "queue_memory_bytes",
        str,
        "body bytes all durable classic/quorum queues of the node keep in memory together, "
        "shared fairly among them; past them bodies are read back from disk, e.g. 64MiB "
        "(default 64 MiB)",
    ),
    ("max_table_depth", int, "max nesting of a field table from the wire (default 32)"),
    ("max_table_entries", int, "max entries of one field table from the wire (default 4096)"),
    ("max_array_length", int, "max elements of one field array from the wire (default 4096)"),
    ("max_sql_length", int, "max characters of an x-stream-filter-sql expression (default 4096)"),
    ("max_sql_depth", int, "max nesting of an x-stream-filter-sql expression (default 64)"),
    # --- TLS (AMQPS)
    ("tls_cert", Path, "PEM certificate (chain) for the AMQPS listener; turns TLS on"),
    ("tls_key", Path, "PEM private key of --tls-cert"),
    ("amqps_port", int, "AMQPS (TLS) port when --tls-cert is given, 0 picks one (default 5671)"),
    # --- RabbitMQ Stream protocol
    ("stream_port", int, "RabbitMQ Stream protocol port, 0 picks a free one (default 5552)"),
    ("stream_frame_max", int, "max stream-protocol frame size offered in Tune (default 1 MiB)"),
    ("stream_tls_port", int, "stream protocol over TLS when --tls-cert is given (default 5551)"),
    # --- users
    ("default_user", str, "first administrator of a new data directory (default guest)"),
    ("default_pass", str, "its password (default guest; env RABBITMQ_DEFAULT_PASS works too)"),
    ("definitions", Path, "RabbitMQ definitions JSON file merged at start-up"),
    # --- cluster
    ("node_name", str, "this node's name in the cluster (with --cluster-etcd)"),
    ("cluster_etcd", str, "join a cluster through etcd: its client URL[,URL...]"),
    ("cluster_port", int, "inter-node port, 0 picks a free one (default 25672)"),
    (
        "advertise_host",
        str,
        "host other nodes and Stream clients (Open, Metadata) reach this one at "
        "(default --amqp-host)",
    ),
    ("cluster_lease_ttl", int, "seconds before a silent node is listed stopped (default 5)"),
]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `serve` flags; unset flags fall back to env then defaults."""
    for name, kind, help_text in _FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=help_text)
    parser.add_argument(
        "--default-queue-type",
        choices=["classic", "quorum", "stream"],
        default=None,
        help="queue type of a queue.declare without x-queue-type (default classic)",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        default=None,
        help="share the AMQP(S) and HTTP ports with this machine's other nodes (SO_REUSEPORT)",
    )
    parser.add_argument(
        "--gc-freeze",
        choices=["on", "off"],
        default=None,
        help="keep long-lived objects out of full garbage collections (default on)",
    )
    parser.add_argument(
        "--fsync",
        choices=["batch", "always", "never"],
        default=None,
        help="durability policy for confirms (default batch)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Build the frozen Settings from parsed `serve` flags (flags win over env)."""
    given: dict[str, Any] = {}
    for name in [f[0] for f in _FLAGS] + ["fsync", "default_queue_type", "reuse_port"]:
        value = getattr(args, name, None)
        if value is not None:
            given[name] = value
    if getattr(args, "gc_freeze", None) is not None:
        given["gc_freeze"] = args.gc_freeze == "on"
    return Settings(**given)


def settings_error(exc: ValidationError) -> str:
    """One line per problem, naming the flag (``--amqp-port: ...``), for ``parser.error``."""
    lines = []
    for problem in exc.errors():
        message = str(problem["msg"]).removeprefix("Value error, ")
        loc = [str(part) for part in problem["loc"]]
        lines.append(f"--{loc[0].replace('_', '-')}: {message}" if loc else message)
    return "; ".join(lines)
