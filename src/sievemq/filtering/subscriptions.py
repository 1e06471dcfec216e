"""Registered SQL subscriptions of a stream: RocketMQ's pre-computed filter bitmap, per chunk.

When a named consumer subscribes with ``x-stream-filter-sql``, the stream registers
(name, expression) in a numbered slot, durably (``subscriptions.json`` next to the segments,
written with write + fsync + rename). From then on the appender evaluates every registered
expression on each batch before ``Stream.append`` and stores the answer as the chunk's opaque
extra blob: ``u16 N`` (slots evaluated) + a bitmap of N bits (MSB first; 1 = some message of
the chunk may match that slot). A reader of slot *i* skips a chunk without reading its body
when *i* < N and bit *i* is 0. Chunks written before the registration carry no bit for the
slot (no blob, or *i* ≥ N) and are evaluated normally; a changed expression is a new slot.
The answers are exact (not a Bloom filter), so a skip never loses a message.

Slot numbers are what the stored bits mean, so the registry must never forget or reuse one:
a registration that cannot be saved is rolled back and refused (``RegistryError``); an
unreadable ``subscriptions.json`` is left as it is and the stream runs with registered
subscriptions DISABLED (no new bits, no skipping: SQL consumers evaluate every chunk), since
the bits of the old chunks could otherwise be read against different expressions.

HOT PATH (append): ``extra_for`` runs once per chunk; it stops evaluating a slot at the first
matching message, and an empty registry costs one attribute check.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import struct
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sievemq.filtering.sql import CompileError, compile_filter
from sievemq.filtering.view import StoredMessage, sql_predicate
from sievemq.storage import Stream

log = logging.getLogger(__name__)

FILE = "subscriptions.json"
MAX_SLOTS = 4096  # bitmap of at most 512 bytes per chunk; later registrations get no slot
_COUNT = struct.Struct(">H")


def subscription_id(name: str, expression: str) -> str:
    """Stable id of (consumer name, expression): a hash of ``name#expression``."""
    return hashlib.blake2b(f"{name}#{expression}".encode(), digest_size=8).hexdigest()


class RegistryError(Exception):
    """The registry could not be saved (the registration was rolled back) or is disabled."""


@dataclass
class Slot:
    id: str
    name: str
    expression: str
    active: bool


class SubscriptionRegistry:
    """The registered subscriptions of one stream and the per-chunk bits they produce."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self.slots: list[Slot] = []
        self._by_id: dict[str, int] = {}
        self._predicates: list[Callable[[StoredMessage], bool] | None] = []
        self.disabled = False  # subscriptions.json unreadable: no bits, no skipping
        # told the file's new bytes after each save (a cluster leader ships them to its
        # stream's replicas: the bits in the chunks they copy mean these slots)
        self.listeners: list[Callable[[bytes], None]] = []
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            slots = [
                Slot(
                    str(item["id"]),
                    str(item["name"]),
                    str(item["expression"]),
                    bool(item["active"]),
                )
                for item in data.get("slots", [])
            ]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            # the old chunks' bits are numbered by slots we no longer know: never read them
            # against other expressions, never overwrite the file
            log.error(
                "cannot read %s (%s): registered SQL subscriptions are disabled for this "
                "stream; SQL consumers evaluate every chunk",
                self.path,
                error,
            )
            self.disabled = True
            return
        for slot in slots:
            self._append(slot)

    def _append(self, slot: Slot) -> None:
        self._by_id[slot.id] = len(self.slots)
        self.slots.append(slot)
        self._predicates.append(None)
        self._compile(len(self.slots) - 1)

    def _compile(self, index: int) -> None:
        slot = self.slots[index]
        predicate = None
        if slot.active:
            try:
                predicate = sql_predicate(compile_filter(slot.expression))
            except CompileError as error:  # a dialect change made it invalid: match-all
                log.error("subscription %s no longer compiles: %s", slot.name, error)
        self._predicates[index] = predicate

    def _save(self) -> None:
        data = {"version": 1, "slots": [vars(s) for s in self.slots]}
        raw = json.dumps(data).encode()
        write_file(self.path.parent, raw)
        for listener in self.listeners:
            listener(raw)

    # ------------------------------------------------------------------ registration

    def _snapshot(self) -> tuple[list[Slot], dict[str, int], list[Callable[..., bool] | None]]:
        return copy.deepcopy(self.slots), dict(self._by_id), list(self._predicates)

    def _save_or_rollback(
        self, snapshot: tuple[list[Slot], dict[str, int], list[Callable[..., bool] | None]]
    ) -> None:
        try:
            self._save()
        except OSError as error:
            self.slots, self._by_id, self._predicates = snapshot
            raise RegistryError(f"cannot save {self.path}: {error}") from error

    def register(self, name: str, expression: str) -> int | None:
        """The slot of (name, expression), registering it; None when the registry is full
        or disabled. Raises RegistryError (nothing changed) when it cannot be saved.

        The consumer's other expressions are deactivated (their bits are then always 1).
        """
        if self.disabled:
            return None
        snapshot = self._snapshot()
        sid = subscription_id(name, expression)
        changed = False
        for i, slot in enumerate(self.slots):
            if slot.name == name and slot.id != sid and slot.active:
                slot.active = False
                self._compile(i)
                changed = True
        index = self._by_id.get(sid)
        if index is not None:
            if not self.slots[index].active:
                self.slots[index].active = True
                self._compile(index)
                changed = True
        elif len(self.slots) < MAX_SLOTS:
            self._append(Slot(sid, name, expression, True))
            index = len(self.slots) - 1
            changed = True
        if changed:
            self._save_or_rollback(snapshot)
        return index

    def forget(self, name: str) -> None:
        """Deactivate the consumer's subscriptions (its offset was deleted)."""
        if self.disabled:
            return
        snapshot = self._snapshot()
        changed = False
        for i, slot in enumerate(self.slots):
            if slot.name == name and slot.active:
                slot.active = False
                self._compile(i)
                changed = True
        if changed:
            self._save_or_rollback(snapshot)

    def active(self) -> list[Slot]:
        return [s for s in self.slots if s.active]

    # ------------------------------------------------------------------ bits

    def extra_for(self, messages: Sequence[StoredMessage]) -> bytes:
        """The chunk's extra blob: which slots some message of ``messages`` may match."""
        predicates = self._predicates
        n = len(predicates)
        if not n:
            return b""
        bits = bytearray((n + 7) // 8)
        for i, predicate in enumerate(predicates):
            if predicate is None or any(map(predicate, messages)):
                bits[i >> 3] |= 0x80 >> (i & 7)
        return _COUNT.pack(n) + bytes(bits)

    @staticmethod
    def chunk_filter(index: int) -> Callable[[bytes], bool]:
        """For ``StreamReader.read``: False when the chunk's blob rules slot ``index`` out."""
        byte, mask = 2 + (index >> 3), 0x80 >> (index & 7)

        def may_match(extra: bytes) -> bool:
            if len(extra) <= byte or _COUNT.unpack_from(extra)[0] <= index:
                return True  # written before the slot existed: evaluate normally
            return bool(extra[byte] & mask)

        return may_match


def write_file(directory: Path, raw: bytes) -> None:
    """Write ``subscriptions.json`` durably (write, fsync, rename, fsync of the directory):
    the registry's own saves, and a replica taking its leader's registry as it is."""
    path = directory / FILE
    tmp = path.with_name(FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, raw)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


_registries: weakref.WeakKeyDictionary[Stream, SubscriptionRegistry] = weakref.WeakKeyDictionary()


def registry(stream: Stream) -> SubscriptionRegistry:
    """The registry of a stream (loaded on first use, shared by appender and consumers)."""
    reg = _registries.get(stream)
    if reg is None:
        reg = _registries[stream] = SubscriptionRegistry(stream.directory)
    return reg


def registered_slot(directory: Path, name: str, expression: str) -> int | None:
    """Read-only: the slot whose chunk bits answer (name, expression), if registered.

    For stand-alone readers (Spark, export) beside a running server: nothing is written. A
    slot's bits are exact for its expression whether or not it is still active (an inactive
    slot's later bits are all 1), so any slot with the same id can be used to skip chunks.
    """
    reg = SubscriptionRegistry(directory)
    if reg.disabled:
        return None
    return reg._by_id.get(subscription_id(name, expression))
