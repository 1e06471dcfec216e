"""Where streams live in a data directory: ``<data_dir>/streams/<safe vhost>/<safe name>``
(classic and quorum queues: ``<data_dir>/queues/...``).

Shared by the gateway (which creates the directories) and the stand-alone readers (Spark,
``sievemq export``), so both agree on the layout without the readers importing the gateway.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import threading
import uuid
from pathlib import Path

STREAMS_DIR = "streams"
QUEUES_DIR = "queues"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_MAX_NAME = 200
# a deleted stream's directory is renamed to this prefix + a random id + "-" + its own name
# beside it, then removed (``Stream.delete``): the name is free at once. ``safe_name`` never
# starts a name with "~", and ``name_of`` reads none; ``settle_tombstones`` deals with what
# a crash left: a delete that was not durable yet is undone, any other tombstone removed.
TOMBSTONE_PREFIX = "~deleted-"
_ID_HEX = 32


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


def name_of(directory_name: str) -> str | None:
    """The name a ``safe_name`` directory stands for; None for a shortened (hashed) one."""
    if "~" in directory_name:
        return None
    if directory_name == "%":
        return ""
    raw = bytearray()
    i = 0
    while i < len(directory_name):
        c = directory_name[i]
        if c == "%":
            try:
                raw.append(int(directory_name[i + 1 : i + 3], 16))
            except ValueError:
                return None
            i += 3
        else:
            raw.append(ord(c))
            i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def stream_directory(data_dir: Path, vhost: str, name: str) -> Path:
    """``<data_dir>/streams/<safe vhost>/<safe name>``."""
    return Path(data_dir) / STREAMS_DIR / safe_name(vhost) / safe_name(name)


def stream_names(data_dir: Path, vhost: str) -> list[str]:
    """The streams of a vhost that have a directory on disk, sorted."""
    base = Path(data_dir) / STREAMS_DIR / safe_name(vhost)
    try:
        entries = sorted(p.name for p in base.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []
    return sorted(n for e in entries if (n := name_of(e)) is not None)


def queue_directory(data_dir: Path, vhost: str, name: str) -> Path:
    """``<data_dir>/queues/<safe vhost>/<safe name>``: a classic/quorum queue's log."""
    return Path(data_dir) / QUEUES_DIR / safe_name(vhost) / safe_name(name)


def tombstone_of(directory: Path) -> Path:
    """The tombstone name ``directory`` is renamed to when deleted: beside it, with a
    random id and its own name (what ``settle_tombstones`` may rename it back to)."""
    directory = Path(directory)
    return directory.with_name(f"{TOMBSTONE_PREFIX}{uuid.uuid4().hex}-{directory.name}")


def origin_of(tombstone_name: str) -> str | None:
    """The directory name a tombstone was (None for one without it: an older format)."""
    rest = tombstone_name[len(TOMBSTONE_PREFIX) :]
    if not tombstone_name.startswith(TOMBSTONE_PREFIX) or rest[_ID_HEX : _ID_HEX + 1] != "-":
        return None
    return rest[_ID_HEX + 1 :] or None


def settle_tombstones(data_dir: Path, live: set[tuple[str, str, str]]) -> tuple[int, int]:
    """At start, before any queue opens: the tombstones a crash left behind. One whose
    queue the definitions still hold (``live``: (``streams`` or ``queues``, safe vhost,
    safe name)) and that has no directory of its own was deleted by a change that never
    reached the disk: it is renamed back, with its data. Every other one is removed.
    Returns (renamed back, removed)."""
    restored = removed = 0
    for kind in (STREAMS_DIR, QUEUES_DIR):
        for tombstone in sorted((Path(data_dir) / kind).glob(f"*/{TOMBSTONE_PREFIX}*")):
            origin = origin_of(tombstone.name)
            home = tombstone.with_name(origin) if origin is not None else None
            if (
                home is not None
                and (kind, tombstone.parent.name, home.name) in live
                and not home.exists()
            ):
                os.rename(tombstone, home)
                restored += 1
            else:
                shutil.rmtree(tombstone, ignore_errors=True)
                removed += 1
    return restored, removed


def remove_empty_vhost_dirs(data_dir: Path, vhosts: set[str]) -> None:
    """Remove the empty directories of vhosts not in ``vhosts`` (a deleted vhost's: its
    queues' tombstones are gone by then). Only at start, once the definitions are read."""
    for vhost_dir in _other_vhost_dirs(data_dir, vhosts):
        with contextlib.suppress(OSError):  # not empty (or not a directory): kept
            vhost_dir.rmdir()


def remove_deleted_vhost_dirs(data_dir: Path, vhosts: set[str]) -> int:
    """Remove, with everything in them, the directories of vhosts not in ``vhosts`` (the
    stored definitions' vhosts). A vhost's delete writes the vhost's definitions line before
    its queues' lines and before any of their files move: a crash in between leaves the
    vhost gone and its queues' directories where they were, which go here. Only at start,
    once the definitions are read, and only when there are stored definitions. Returns how
    many vhost directories were removed."""
    removed = 0
    for vhost_dir in _other_vhost_dirs(data_dir, vhosts):
        if vhost_dir.is_dir():
            shutil.rmtree(vhost_dir, ignore_errors=True)
            removed += 1
    return removed


def _other_vhost_dirs(data_dir: Path, vhosts: set[str]) -> list[Path]:
    """The vhost directories (of streams and of classic/quorum queues) whose vhost is not
    in ``vhosts``."""
    found: list[Path] = []
    for kind in (STREAMS_DIR, QUEUES_DIR):
        try:
            vhost_dirs = list((Path(data_dir) / kind).iterdir())
        except OSError:
            continue
        for vhost_dir in vhost_dirs:
            name = name_of(vhost_dir.name)
            if name is not None and name not in vhosts:
                found.append(vhost_dir)
    return found


class _Remover:
    """One daemon thread that removes discarded directories (``discard``), started on
    first use; ``wait`` blocks until it has removed everything given so far."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.removed = 0

    def put(self, path: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sievemq-remover", daemon=True
                )
                self._thread.start()
        self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                shutil.rmtree(path, ignore_errors=True)
                self.removed += 1
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        self._queue.join()


_remover = _Remover()


def bury(directory: Path) -> Path | None:
    """Rename a closed directory to its tombstone (``tombstone_of``) at once, so its name
    is free again; returns the tombstone (``directory`` itself when it could not be
    renamed), or None when there was no directory. ``remove_later`` removes it."""
    directory = Path(directory)
    tombstone = tombstone_of(directory)
    try:
        os.rename(directory, tombstone)
    except FileNotFoundError:
        return None
    except OSError:
        return directory
    return tombstone


def discard(directory: Path) -> Path:
    """Remove a closed directory without waiting for it: renamed at once to a tombstone
    beside it (``bury``), then removed by a background thread. Returns the tombstone
    (``directory`` itself when it could not be renamed or was missing)."""
    tombstone = bury(directory)
    if tombstone is None:
        return Path(directory)
    _remover.put(tombstone)
    return tombstone


def remove_later(tombstone: Path) -> None:
    """Have the background thread remove an already renamed-away (tombstone) directory."""
    _remover.put(Path(tombstone))


def wait_discarded() -> None:
    """Block until every directory ``discard`` was given is removed (shutdown, tests)."""
    _remover.wait()
