"""The `sievemq` data source's options: parsed once, validated, with the names users see.

Spark hands options over as a case-insensitive dict of strings (keys arrive lower-cased).
Every option is checked here; an unknown name or a malformed value raises ``OptionError``
naming the option as the user spelled it in the docs (``startingOffsets``, not
``startingoffsets``). Pure Python: no Spark needed to test it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sievemq.filtering.sql import CompileError, compile_filter
from sievemq.spark.stream_client import StreamURI

# lower-cased key -> the spelling in the docs
BATCH_OPTIONS = (
    "uri",
    "path",
    "dataDir",
    "vhost",
    "stream",
    "streamPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "filterValues",
    "matchUnfiltered",
    "filterMatchType",
    "sql",
    "consumerName",
    "minPartitions",
    "maxBytesPerPartition",
    "maxOffsetsPerPartition",
    "failOnDataLoss",
)
STREAM_OPTIONS = ("maxOffsetsPerTrigger", "maxBytesPerTrigger")
_SPELLING = {name.lower(): name for name in BATCH_OPTIONS + STREAM_OPTIONS}
_KEYWORDS = ("earliest", "latest", "first", "last", "next")
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024


class OptionError(ValueError):
    """A data source option is unknown or malformed (the text names it)."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"sievemq: option '{option}': {problem}")
        self.option = option


@dataclass(frozen=True)
class OffsetChoice:
    """Where to start or stop: a keyword, one offset for every stream, or per stream (JSON)."""

    kind: str  # earliest | latest | first | last | next | offset | json
    value: int = 0
    per_stream: dict[str, dict[str, int]] = field(default_factory=dict)

    def for_stream(self, vhost: str, stream: str) -> tuple[str, int]:
        """(kind, value) for one stream; JSON -2 = earliest, -1 = latest, absent = None-kind."""
        if self.kind != "json":
            return self.kind, self.value
        got = self.per_stream.get(vhost, {}).get(stream)
        if got is None:
            return "default", 0
        if got == -2:
            return "earliest", 0
        if got == -1:
            return "latest", 0
        return "offset", got


@dataclass(frozen=True)
class ReadOptions:
    data_dir: Path
    vhost: str = "/"
    streams: tuple[str, ...] = ()
    stream_pattern: str | None = None
    starting: OffsetChoice | None = None  # None: the default (earliest batch, latest stream)
    ending: OffsetChoice = OffsetChoice("latest")
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    filter_values: tuple[str, ...] = ()
    match_unfiltered: bool = False
    match_all: bool = False
    sql: str | None = None
    consumer_name: str | None = None
    min_partitions: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_offsets_per_partition: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    # network mode: rabbitmq-stream://user:pass@host:port/vhost (None: file mode)
    uri: str | None = None

    @property
    def several(self) -> bool:
        """Whether the rows carry ``stream`` and ``vhost`` columns (more than one stream)."""
        return self.stream_pattern is not None or len(self.streams) > 1


def _bool(option: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise OptionError(option, f"expected true or false, got {text!r}")


def _positive(option: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(option, f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise OptionError(option, f"expected a positive integer, got {text!r}")
    return value


def parse_timestamp(option: str, text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (naive = UTC) -> ms."""
    raw = text.strip()
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            option, f"expected milliseconds since the epoch or an ISO-8601 time, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_offsets(option: str, text: str, *, ending: bool) -> OffsetChoice:
    raw = text.strip()
    low = raw.lower()
    allowed = ("latest",) if ending else _KEYWORDS
    if low in allowed:
        return OffsetChoice(low)
    if re.fullmatch(r"\d+", raw):
        return OffsetChoice("offset", int(raw))
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError as error:
            raise OptionError(option, f"invalid JSON: {error}") from None
        per: dict[str, dict[str, int]] = {}
        if not isinstance(data, dict):
            raise OptionError(option, 'expected JSON like {"/": {"orders": 12}}')
        for vhost, streams in data.items():
            if not isinstance(streams, dict):
                raise OptionError(option, f'vhost {vhost!r}: expected {{"stream": offset}}')
            for name, value in streams.items():
                low_ok = -1 if ending else -2
                if not isinstance(value, int) or isinstance(value, bool) or value < low_ok:
                    raise OptionError(
                        option,
                        f"{vhost}/{name}: expected an offset >= 0"
                        + (" or -1 (latest)" if ending else ", -2 (earliest) or -1 (latest)"),
                    )
                per.setdefault(str(vhost), {})[str(name)] = value
        return OffsetChoice("json", per_stream=per)
    words = ", ".join(allowed)
    raise OptionError(option, f"expected {words}, an offset or JSON, got {text!r}")


def _check_network(given: Mapping[str, str], uri: str) -> None:
    """The network mode's own rules: a valid URI, and no option that needs the files."""
    try:
        StreamURI.parse(uri)
    except ValueError as error:
        raise OptionError("uri", str(error)) from None
    for name, why in (
        ("path", "give either uri (network) or a data directory (files), not both"),
        ("dataDir", "give either uri (network) or a data directory (files), not both"),
        ("vhost", "the vhost is the uri's path (%2F for /)"),
        ("streamPattern", "not in network mode: name the streams"),
        ("maxBytesPerTrigger", "not in network mode: use maxOffsetsPerTrigger"),
        ("maxBytesPerPartition", "not in network mode: use maxOffsetsPerPartition"),
    ):
        if given.get(name):
            raise OptionError(name, why)


def parse_options(
    options: Mapping[str, str], *, streaming: bool = False, either: bool = False
) -> ReadOptions:
    """Validate Spark's option dict (keys in any case) into ReadOptions.

    ``either``: accept the options of batch and stream reads (``schema()`` serves both).
    """
    given: dict[str, str] = {}
    for key, value in options.items():
        name = _SPELLING.get(key.lower())
        if name is None or (name in STREAM_OPTIONS and not (streaming or either)):
            known = ", ".join(BATCH_OPTIONS + (STREAM_OPTIONS if streaming else ()))
            raise OptionError(key, f"unknown option (known: {known})")
        given[name] = value
    for batch_only in ("endingOffsets", "endingTimestamp"):
        if streaming and not either and batch_only in given:
            raise OptionError(batch_only, "is for batch reads only")
    data_dir = given.get("path") or given.get("dataDir")
    uri = given.get("uri")
    if uri is not None:
        _check_network(given, uri)
        data_dir = ""
    elif not data_dir:
        raise OptionError(
            "path", "the data directory is required: .load(DATA_DIR) (or option uri: network)"
        )
    streams = tuple(s.strip() for s in given.get("stream", "").split(",") if s.strip())
    pattern = given.get("streamPattern")
    if pattern is not None:
        if streams:
            raise OptionError("streamPattern", "give either stream or streamPattern, not both")
        try:
            re.compile(pattern)
        except re.error as error:
            raise OptionError("streamPattern", f"invalid regular expression: {error}") from None
    elif not streams:
        raise OptionError("stream", "required: the stream name(s), comma separated")
    values: tuple[str, ...] = ()
    if "filterValues" in given:
        raw = given["filterValues"].strip()
        if raw.startswith("["):
            try:
                parsed = json.loads(raw)
            except ValueError as error:
                raise OptionError("filterValues", f"invalid JSON array: {error}") from None
            if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
                raise OptionError("filterValues", "expected a JSON array of strings")
            values = tuple(parsed)
        else:
            values = tuple(v.strip() for v in raw.split(",") if v.strip())
        if not values or any(not v for v in values):
            raise OptionError("filterValues", "expected one or more non-empty values")
    match_type = given.get("filterMatchType", "any").strip().lower()
    if match_type not in ("any", "all"):
        raise OptionError("filterMatchType", f"expected any or all, got {match_type!r}")
    sql = given.get("sql")
    if sql is not None:
        try:
            compile_filter(sql)
        except CompileError as error:
            raise OptionError("sql", str(error)) from None
    consumer = given.get("consumerName")
    if consumer is not None and not consumer:
        raise OptionError("consumerName", "must not be empty")

    def opt_int(name: str) -> int | None:
        return _positive(name, given[name]) if name in given else None

    def opt_ts(name: str) -> int | None:
        return parse_timestamp(name, given[name]) if name in given else None

    starting = (
        parse_offsets("startingOffsets", given["startingOffsets"], ending=False)
        if "startingOffsets" in given
        else None
    )
    ending = (
        parse_offsets("endingOffsets", given["endingOffsets"], ending=True)
        if "endingOffsets" in given
        else OffsetChoice("latest")
    )
    vhost = given.get("vhost", "/")
    if uri is not None:
        vhost = StreamURI.parse(uri).vhost
    return ReadOptions(
        uri=uri,
        data_dir=Path(data_dir),
        vhost=vhost,
        streams=streams,
        stream_pattern=pattern,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=opt_ts("startingTimestamp"),
        ending_timestamp_ms=opt_ts("endingTimestamp"),
        filter_values=values,
        match_unfiltered=_bool("matchUnfiltered", given.get("matchUnfiltered", "false")),
        match_all=match_type == "all",
        sql=sql,
        consumer_name=consumer,
        min_partitions=opt_int("minPartitions"),
        max_bytes_per_partition=opt_int("maxBytesPerPartition") or DEFAULT_MAX_BYTES_PER_PARTITION,
        max_offsets_per_partition=opt_int("maxOffsetsPerPartition"),
        fail_on_data_loss=_bool("failOnDataLoss", given.get("failOnDataLoss", "true")),
        max_offsets_per_trigger=opt_int("maxOffsetsPerTrigger"),
        max_bytes_per_trigger=opt_int("maxBytesPerTrigger"),
    )
