"""Durable definitions on disk: vhosts, users, durable exchanges, queues, bindings, policies
and runtime/global parameters.

The API is a dict shaped like RabbitMQ's definitions export (``{"vhosts": [...], "users":
[...], "queues": [...], ...}``): ``DefinitionStore.load()`` returns it, ``save(dict)``
persists it. What a section holds is the broker's business; this module only knows how to
key the items of a list section (``_KEY_FIELDS``; an unknown section's items are keyed by
their whole content, a non-list value is kept whole), so new sections need no change here.

On disk: ``<data_dir>/definitions.log``, an append-only log of one line per change,
``<crc32 hex> <json [op, section, key, item]>``; ``put`` adds or replaces the item with
that key, ``del`` removes it. ``save`` writes only the items that differ from what is stored
and ends with one fdatasync, and ``put``/``delete`` + ``commit`` let the broker persist one
declare without looking at the others: a declare costs the same at 50,000 streams as at 1.
Loading stops at the first torn or corrupt line (a SIGKILL mid-write leaves at most one,
never a committed one) and cuts it off. When the log holds more than four times as many
lines as live items (and at least 1024) it is rewritten (temp + fsync + rename + fsync of
the directory); while syncs are deferred (the gateway's event loop) the rewrite joins the
next deferred sync and runs in its worker thread, the lines committed meanwhile carried
over to the new log (``take_sync``, ``_compact_from``). A ``definitions.json`` from older
versions is read once and converted.
Field-table values that JSON cannot hold (non-UTF-8 longstr, byte arrays, timestamps,
decimals) are tagged so they come back with their AMQP type.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import threading
import zlib
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from sievemq.storage import handles
from sievemq.storage.durable import fsync_dir
from sievemq.storage.layout import queue_directory, safe_name, stream_directory

__all__ = [
    "DefinitionStore",
    "decode_value",
    "encode_value",
    "load",
    "queue_directory",
    "safe_name",
    "save",
    "stream_directory",
]

FILE_NAME = "definitions.json"  # versions before the log: read once, then converted
LOG_NAME = "definitions.log"
FORMAT_VERSION = 1
_COMPACT_MIN = 1024
_KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "vhosts": ("name",),
    "users": ("name",),
    "exchanges": ("vhost", "name"),
    "queues": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key", "arguments"),
    "policies": ("vhost", "name"),
    "parameters": ("component", "vhost", "name"),
    "global_parameters": ("name",),
}
_TAG = "__amqp__"
_TAG_BYTES = b'"__amqp__"'


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


def _special(value: Any) -> Any:
    """``encode_value`` of a value JSON has no type for (the C encoder's ``default``)."""
    if isinstance(value, bytes | bytearray | datetime.datetime | Decimal):
        return encode_value(value)
    raise TypeError(f"cannot store a {type(value).__name__} in definitions")


def _dumps(value: Any) -> str:
    """JSON of ``encode_value(value)``, keys sorted, in C (no Python walk of the value)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_special)


def _canonical(value: Any) -> str:
    return _dumps(value)


def item_key(section: str, item: Any) -> str:
    """The key of one item of a list section (the fields that identify it, as JSON)."""
    fields = _KEY_FIELDS.get(section)
    if fields is None or not isinstance(item, dict):
        return _canonical(item)
    return _canonical([item.get(f) for f in fields])


def canonical(value: Any) -> str:
    """The JSON text two equal items share (keys sorted; tagged AMQP values)."""
    return _dumps(value)


def _line(op: str, section: str, key: str | None, item: Any) -> bytes:
    raw = _dumps([op, section, key, item]).encode("utf-8")
    return b"%08x " % zlib.crc32(raw) + raw + b"\n"


class DefinitionStore:
    """The definitions log of one data directory (see the module docstring)."""

    def __init__(self, data_dir: Path, fsync: bool = True) -> None:
        self.directory = Path(data_dir)
        self.path = self.directory / LOG_NAME
        self._fsync = fsync
        # section -> key (None for a whole non-list value) -> (canonical JSON, item); the
        # canonical text of a replayed item is computed when a change is compared with it
        self._items: dict[str, dict[str | None, tuple[str | None, Any]]] = {}
        self.compared = 0  # items a save or put compared with the stored ones (tests count)
        self._lines = 0
        self._pending: list[bytes] = []
        self._fd = -1
        self.defer_sync = False  # commits write but leave the fdatasync to take_sync()
        self._unsynced = False
        self.writes = 0  # commits that wrote something (a caller tells whether it changed)
        # how many of them are known to be on disk, and what waits for more (``after_synced``)
        self.synced_writes = 0
        self._after: list[tuple[int, Callable[[], None]]] = []
        self._after_lock = threading.Lock()
        # work owed with the next deferred sync and run by the same worker thread before the
        # fdatasync: file creations (a new stream's, ``defer_job``) and a compaction
        self._jobs: list[Callable[[], None]] = []
        self._compact_owed = False
        # lines committed since a deferred compaction's snapshot (None when none runs): the
        # worker appends them to the new log before it replaces the old one
        self._tail: list[bytes] | None = None
        self._lock = threading.Lock()  # the log's descriptor against a compaction's swap
        # told of every change as it is made (op, section, key, item or None for a delete):
        # a cluster node mirrors the queues it leads into etcd (sievemq.cluster.placement)
        self.observer: Callable[[str, str, str | None, Any], None] | None = None
        self.compactions = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(LOG_NAME + ".tmp")
        if temp.exists():
            temp.unlink()  # a compaction that died before its rename
        self._found = self._read_log()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if not self._found:
            legacy = _load_legacy(self.directory)
            if legacy is not None:
                self.save(legacy)
                self._found = True
                (self.directory / FILE_NAME).unlink()

    def _read_log(self) -> bool:
        """Replay the log: every line is checked (CRC) first, then all are parsed by one
        ``json.loads`` of the lines joined as a JSON array (one C call, not one per line)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        pos = 0
        bodies: list[bytes] = []
        while True:
            end = data.find(b"\n", pos)
            if end < 0:
                break
            line = data[pos:end]
            if len(line) < 10 or line[8:9] != b" ":
                break
            try:
                crc = int(line[:8], 16)
            except ValueError:
                break
            body = line[9:]
            if zlib.crc32(body) != crc:
                break
            bodies.append(body)
            pos = end + 1
        if pos != len(data):
            os.truncate(self.path, pos)  # the torn or corrupt tail: never a committed line
        try:
            entries = json.loads(b"[" + b",".join(bodies) + b"]")
        except ValueError:
            entries = [json.loads(body) for body in bodies]  # names the bad line
        items = self._items
        for body, (op, section, key, value) in zip(bodies, entries, strict=True):
            stored = items.get(section)
            if stored is None:
                stored = items[section] = {}
            if op == "put":
                if _TAG_BYTES in body:  # a tagged AMQP value inside: decode it
                    value = decode_value(value)
                # the canonical text is computed when a save first compares with it
                stored[key] = (None, value)
            else:
                stored.pop(key, None)
        self._lines += len(bodies)
        return pos > 0

    # ------------------------------------------------------------------ reading

    def load(self) -> dict[str, Any] | None:
        """The stored definitions, or None when there are none yet."""
        if not self._found and not self._items:
            return None
        out: dict[str, Any] = {}
        for section, stored in self._items.items():
            for key, (_, item) in stored.items():
                if key is None:
                    out[section] = item
                else:
                    out.setdefault(section, []).append(item)
        out["version"] = FORMAT_VERSION
        return out

    def get(self, section: str, key: str | None) -> Any:
        """The stored item of ``section`` with this key (``item_key``), or None."""
        found = self._items.get(section, {}).get(key)
        return None if found is None else found[1]

    def items(self, section: str) -> list[tuple[str | None, Any]]:
        """(key, item) of every stored item of ``section``."""
        return [(key, item) for key, (_, item) in self._items.get(section, {}).items()]

    # ------------------------------------------------------------------ writing

    def put(self, section: str, item: Any) -> None:
        """Add or replace one item of a list section (written at ``commit``)."""
        self._set(section, item_key(section, item), item)

    def delete(self, section: str, item: Any) -> None:
        """Remove the item with ``item``'s key fields, if stored (written at ``commit``)."""
        key = item_key(section, item)
        stored = self._items.get(section)
        if stored is not None and key in stored:
            del stored[key]
            self._record("del", section, key, None)

    def _set(self, section: str, key: str | None, item: Any) -> None:
        self.compared += 1
        text = _canonical(item)
        stored = self._items.get(section)
        if stored is None:
            stored = self._items[section] = {}
        old = stored.get(key)
        if old is not None and (old[0] if old[0] is not None else _canonical(old[1])) == text:
            stored[key] = (text, old[1])
            return
        stored[key] = (text, item)
        self._record("put", section, key, item)

    def _record(self, op: str, section: str, key: str | None, item: Any) -> None:
        self._pending.append(_line(op, section, key, item))
        if self.observer is not None:
            self.observer(op, section, key, item)

    def save(self, definitions: dict[str, Any], only_given: bool = False) -> None:
        """Make the stored definitions equal ``definitions``: writes only what differs.
        With ``only_given`` the sections ``definitions`` does not name are left as they are
        (and not compared: the cost is that of the given sections only)."""
        given: set[str] = set()
        for section, value in definitions.items():
            if section == "version":
                continue
            given.add(section)
            wanted: set[str | None] = set()
            if isinstance(value, list):
                for item in value:
                    key = item_key(section, item)
                    wanted.add(key)
                    self._set(section, key, item)
            else:
                wanted.add(None)
                self._set(section, None, value)
            stored = self._items.get(section, {})
            for stale in [k for k in stored if k not in wanted]:
                del stored[stale]
                self._record("del", section, stale, None)
        if not only_given:
            for section, stored in self._items.items():
                if section not in given:
                    for stale in list(stored):
                        del stored[stale]
                        self._record("del", section, stale, None)
        self.commit()

    def count(self) -> int:
        """How many items are stored."""
        return sum(len(stored) for stored in self._items.values())

    def commit(self) -> None:
        """Append what changed since the last commit and fdatasync it (one write)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        lines = len(self._pending)
        self._pending = []
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            if self._tail is not None:
                self._tail.append(data)
            self._lines += lines
        if self._fsync and self.defer_sync:
            self._unsynced = True
        elif self._fsync:
            os.fdatasync(self._fd)
            self._unsynced = False
        self.writes += 1
        if not self._unsynced:
            self._synced(self.writes)
        self._found = True
        if (
            self._lines > _COMPACT_MIN
            and self._lines > 4 * self.count()
            and self._tail is None  # (one compaction at a time)
        ):
            if self._fsync and self.defer_sync:
                self._compact_owed = True  # with the deferred sync, in its worker thread
            else:
                self.compact()

    def defer_job(self, job: Callable[[], None]) -> None:
        """Run ``job`` (file work that must be durable with this change, such as a new
        stream's files) in the worker thread of the next deferred sync, before its
        fdatasync; at once when syncs are not deferred."""
        if self.defer_sync:
            self._jobs.append(job)
        else:
            job()

    def after_synced(self, job: Callable[[], None], ticket: int | None = None) -> None:
        """Run ``job`` once the commits made so far (the first ``ticket`` of them) are on
        disk: at once when they are, else in the thread whose fdatasync gets them there
        (thread-safe). A deleted queue's files go this way: until its delete is durable,
        a crash finds its tombstone and the definitions still holding it, and puts it
        back (``layout.settle_tombstones``)."""
        ticket = self.writes if ticket is None else ticket
        with self._after_lock:
            if self.synced_writes < ticket:
                self._after.append((ticket, job))
                return
        job()

    def _synced(self, upto: int) -> None:
        """The first ``upto`` commits are on disk: run the jobs that waited for them."""
        with self._after_lock:
            self.synced_writes = max(self.synced_writes, upto)
            due = [job for ticket, job in self._after if ticket <= self.synced_writes]
            self._after = [(t, job) for t, job in self._after if t > self.synced_writes]
        for job in due:
            job()

    @property
    def owes_sync(self) -> bool:
        """True when deferred commits wrote lines no fdatasync has covered yet (or owe a
        job or a compaction)."""
        return self._unsynced or bool(self._jobs) or self._compact_owed

    def sync_failed(self) -> None:
        """The work ``take_sync`` gave failed: the lines it covered are owed again (a
        failed compaction is tried again at a later commit; a stream whose files could not
        be created gets them when it is first opened)."""
        if self._fsync:
            self._unsynced = True

    def take_sync(self) -> Callable[[], None] | None:
        """What deferred commits still owe, as a call that may run in another thread: the
        deferred jobs, then a compaction if one is due (of the items as they are now; the
        lines committed meanwhile are carried over), then the fdatasync (on its own
        duplicate of the descriptor). None when nothing is owed."""
        if self._fd < 0 or not self.owes_sync:
            return None
        upto = self.writes  # what this sync makes durable (``after_synced``)
        fd = -1
        if self._unsynced and not self._compact_owed:  # (a compaction syncs the whole log)
            # first: out of descriptors, nothing owed is taken (the next round retries)
            fd = handles.retrying(lambda: os.dup(self._fd))
        jobs, self._jobs = self._jobs, []
        snapshot: list[tuple[str, list[tuple[str | None, tuple[str | None, Any]]]]] | None = None
        if self._compact_owed:
            self._compact_owed = False
            # the items as of now, copied (cheap, in C); the lines are built in the thread
            snapshot = [(s, list(stored.items())) for s, stored in self._items.items()]
            self._tail = []
        self._unsynced = False

        def sync() -> None:
            try:
                for job in jobs:
                    job()
                if snapshot is not None:
                    self._compact_from(snapshot)
                if fd >= 0:
                    os.fdatasync(fd)
                self._synced(upto)
            finally:
                if fd >= 0:
                    os.close(fd)
                if snapshot is not None:
                    self._tail = None

        return sync

    def _compact_from(
        self, snapshot: list[tuple[str, list[tuple[str | None, tuple[str | None, Any]]]]]
    ) -> None:
        """A compaction in a worker thread: the snapshot's lines go to a temp file
        (fsynced), then, under the lock the loop's commits take, the lines committed since
        the snapshot are appended, the temp file replaces the log and the loop writes to
        the new one; then the new log and the directory are fsynced. A crash at any step
        leaves either the old log whole (the temp file is removed at start) or the new one
        holding every line the old one had (its tail torn at worst, never a synced line)."""
        temp = self.path.with_name(LOG_NAME + ".tmp")
        data = b"".join(
            _line("put", s, k, item) for s, entries in snapshot for k, (_, item) in entries
        )
        lines = sum(len(entries) for _, entries in snapshot)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
            _crash_point("temp-synced")
            with self._lock:
                if self._fd < 0:  # closed meanwhile: the old log stays
                    os.unlink(temp)
                    return
                tail = b"".join(self._tail or ())
                self._tail = None
                _write_all(fd, tail)
                os.replace(temp, self.path)
                old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o644)
                self._lines = lines + tail.count(b"\n")
            os.close(old)
            _crash_point("renamed")
            os.fsync(fd)
            _crash_point("log-synced")
            fsync_dir(self.directory)
            _crash_point("dir-synced")
            self.compactions += 1
        finally:
            os.close(fd)

    def compact(self) -> None:
        """Rewrite the log with one line per live item (write, fsync, rename, fsync dir)."""
        temp = self.path.with_name(LOG_NAME + ".tmp")
        data = b"".join(
            _line("put", s, k, item)
            for s, stored in self._items.items()
            for k, (_, item) in stored.items()
        )
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        fsync_dir(self.directory)
        with self._lock:
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o644)
        self._lines = self.count()
        self._unsynced = False  # the new file was synced whole
        self.compactions += 1

    def close(self) -> None:
        self.defer_sync = False
        jobs, self._jobs = self._jobs, []
        for job in jobs:  # (owed by a change whose sync never started)
            job()
        self.commit()
        with self._lock:  # a compaction in a worker thread now leaves the old log alone
            if self._fd >= 0:
                if self._fsync:
                    os.fdatasync(self._fd)
                os.close(self._fd)
                self._fd = -1
        self._synced(self.writes)

    def __enter__(self) -> DefinitionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _no_crash(step: str) -> None:
    """Where a deferred compaction stands (tests replace it to crash there)."""


_crash_point: Callable[[str], None] = _no_crash


def _load_legacy(data_dir: Path) -> dict[str, Any] | None:
    """A ``definitions.json`` written by an older SieveMQ, or None."""
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


def load(data_dir: Path) -> dict[str, Any] | None:
    """The stored definitions, or None when there are none yet."""
    with DefinitionStore(data_dir) as store:
        return store.load()


def save(data_dir: Path, definitions: dict[str, Any]) -> None:
    """Persist ``definitions`` (only what differs from the stored ones is written)."""
    with DefinitionStore(data_dir) as store:
        store.save(definitions)
