"""The chaos suite's checkers: each takes what the clients recorded and what the cluster
holds once healed, and returns its figures and its findings (sentences; none expected).

- ``check_publisher``: every confirmed message is in the queue (lost = 0), nothing there
  that was never sent (unexpected = 0), and, for a publisher whose ids the leader
  deduplicates, nothing twice (duplicates = 0).
- ``check_reader``: a consumer's offsets increase with no gap within a connection, a new
  connection resumes at or before the next offset, and a filtered one got exactly the
  matching messages up to where it read.
- ``check_declared``: every queue whose declare-ok came (and no delete was asked) exists.
- ``replicas_equal``: every copy of a stream holds the leader's segment files, byte for byte.
- ``check_quorum``: a quorum queue's confirmed messages all acked by a consumer or the final
  drain (lost = 0), nothing never sent, no ``x-delivery-count`` going back.
- ``quorum_copies_equal``: every copy of a quorum queue holds its leader's live records (ids
  and bytes) and delivery counts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sievemq.cluster.replication import replica_directory
from sievemq.storage.layout import queue_directory, stream_directory
from sievemq.storage.queue_log import read_counts
from sievemq.testing.queue_files import live_records
from sievemq.testing.stream_files import segment_files

from .quorum_load import QuorumDelivery
from .workload import Delivery


class Published(Protocol):
    """What a publisher recorded (``fault_load.Publisher``, ``workload.StreamPublisher``)."""

    confirmed: list[int]
    confirm_times: list[float]

    @property
    def name(self) -> str: ...


@dataclass
class Stored:
    """One queue read back: (offset, label, seq) of every message, in order; offset -1 for
    a classic queue."""

    messages: list[tuple[int, str, int]] = field(default_factory=list)
    malformed: int = 0

    def seqs(self, label: str) -> list[int]:
        return [seq for _, lab, seq in self.messages if lab == label]


@dataclass
class Result:
    figures: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


def check_publisher(
    label: str,
    confirmed: Iterable[int],
    attempted: set[int],
    stored: Stored,
    dedup: bool,
) -> Result:
    seqs = stored.seqs(label)
    present = set(seqs)
    confirmed_set = set(confirmed)
    lost = sorted(confirmed_set - present)
    unexpected = sorted(present - attempted)
    twice = sorted(seq for seq, n in Counter(seqs).items() if n > 1)
    result = Result(
        {
            "confirmed": len(confirmed_set),
            "stored": len(seqs),
            "lost": len(lost),
            "unexpected": len(unexpected),
            "duplicates": len(twice),
            "unconfirmed_but_stored": len(present - confirmed_set),
            "first_duplicates": twice[:10],
        }
    )
    if lost:
        result.findings.append(f"{label}: {len(lost)} confirmed messages lost, first {lost[:10]}")
    if unexpected:
        result.findings.append(f"{label}: {len(unexpected)} never sent, first {unexpected[:10]}")
    if dedup and twice:
        result.findings.append(f"{label}: {len(twice)} stored twice despite dedup: {twice[:10]}")
    return result


def check_reader(
    label: str,
    deliveries: list[Delivery],
    stored: Stored,
    matches: Callable[[str, int], bool] | None = None,
) -> Result:
    """``matches``: the filter of a filtered reader (label, seq -> wanted)."""
    result = Result({"deliveries": len(deliveries), "gaps": 0, "reconnects": 0})
    by_offset = {offset: (lab, seq) for offset, lab, seq in stored.messages}
    previous: Delivery | None = None
    for d in deliveries:
        if by_offset.get(d.offset) != (d.label, d.seq):
            result.findings.append(
                f"{label}: offset {d.offset} delivered {d.label}:{d.seq}, the stream holds "
                f"{by_offset.get(d.offset)}"
            )
        if matches is not None and not matches(d.label, d.seq):
            result.findings.append(f"{label}: {d.label}:{d.seq} does not match its filter")
        if previous is not None:
            if d.connection == previous.connection:
                wrong = d.offset <= previous.offset or (
                    matches is None and d.offset != previous.offset + 1
                )
            else:
                result.figures["reconnects"] += 1
                wrong = d.offset > previous.offset + 1 and matches is None
            if wrong:
                result.figures["gaps"] += 1
                result.findings.append(
                    f"{label}: offset {previous.offset} then {d.offset} "
                    f"(connections {previous.connection}, {d.connection})"
                )
        previous = d
    if matches is not None and deliveries:
        top = max(d.offset for d in deliveries)
        wanted = {o for o, (lab, seq) in by_offset.items() if o <= top and matches(lab, seq)}
        missed = sorted(wanted - {d.offset for d in deliveries})
        result.figures["gaps"] += len(missed)
        if missed:
            result.findings.append(f"{label}: missed matching offsets {missed[:10]}")
    return result


def check_declared(expected: set[str], listed: set[str]) -> Result:
    missing = sorted(expected - listed)
    result = Result({"declared_ok": len(expected), "missing": len(missing)})
    if missing:
        result.findings.append(f"declared-ok queues gone: {missing[:10]}")
    return result


def replicas_equal(
    leader_dir: Path, replica_dirs: dict[str, Path], vhost: str, name: str
) -> dict[str, str]:
    """Replica node name -> "" when its copy's segment files equal the leader's (byte for
    byte), else what differs."""
    theirs = segment_files(stream_directory(leader_dir, vhost, name))
    differences: dict[str, str] = {}
    for node, data in replica_dirs.items():
        mine = segment_files(replica_directory(data, vhost, name))
        if not theirs:
            differences[node] = "the leader has no segment file"
        elif not mine:
            differences[node] = "no copy"
        elif mine != theirs:
            sizes = {f: (len(theirs.get(f, b"")), len(mine.get(f, b""))) for f in theirs | mine}
            differences[node] = f"segments differ (leader, copy bytes): {sizes}"
        else:
            differences[node] = ""
    return differences


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time in [start, end] without a confirm, in seconds."""
    inside = [t for t in times if start <= t <= end]
    return max(b - a for a, b in itertools.pairwise([start, *inside, end]))


def check_quorum(
    queue: str,
    published: dict[str, tuple[list[int], set[int]]],
    deliveries: list[QuorumDelivery],
) -> Result:
    """A quorum queue's publishers (label: (confirmed, attempted)) against every delivery
    its consumers and the final drain got: every confirmed message settled (acked) at least
    once (lost = 0), nothing delivered that was never sent (unexpected = 0), and each
    message's ``x-delivery-count`` never lower than at its previous delivery on the same
    consumer connection (a message: one send, by its message id; a body sent again is
    another message, counted from 0). Across connections the order the clients saw is not
    the server's: around a failover the old leader's delivery of a message may reach one
    consumer after the new leader's redelivery of it (counted one more) reached another."""
    acked = {(d.label, d.seq) for d in deliveries if d.settled == "ack"}
    confirmed = {(label, seq) for label, (seqs, _) in published.items() for seq in seqs}
    lost = sorted(confirmed - acked)
    unexpected = sorted(
        {
            (d.label, d.seq)
            for d in deliveries
            if d.label not in published or d.seq not in published[d.label][1]
        }
    )
    backwards: list[str] = []
    last: dict[tuple[str, int, str, str], QuorumDelivery] = {}
    for d in sorted(deliveries, key=lambda d: d.t):
        key = (d.consumer, d.connection, d.label, d.message_id)
        before = last.get(key)
        if before is not None and d.count < before.count:
            backwards.append(
                f"{d.label}:{d.seq} (id {d.message_id}) x-delivery-count {before.count} "
                f"({before.consumer}) then {d.count} ({d.consumer})"
            )
        last[key] = d
    times = Counter((d.label, d.seq) for d in deliveries if d.settled == "ack")
    # ((label, seq), message id) of every send delivered: a body there twice was resent
    sends = {((d.label, d.seq), d.message_id) for d in deliveries}
    result = Result(
        {
            "confirmed": len(confirmed),
            "deliveries": len(deliveries),
            "acked": len(acked),
            "lost": len(lost),
            "unexpected": len(unexpected),
            "acked_more_than_once": sum(1 for n in times.values() if n > 1),
            "stored_twice": sum(1 for n in Counter(lab for lab, _ in sends).values() if n > 1),
            "requeued": sum(1 for d in deliveries if d.settled == "requeue"),
            "redelivered": sum(1 for d in deliveries if d.redelivered),
            "delivery_count_backwards": len(backwards),
        }
    )
    if lost:
        result.findings.append(f"{queue}: {len(lost)} confirmed messages lost, first {lost[:10]}")
    if unexpected:
        result.findings.append(f"{queue}: {len(unexpected)} never sent, first {unexpected[:10]}")
    if backwards:
        result.findings.append(f"{queue}: x-delivery-count went back: {backwards[:5]}")
    return result


@dataclass
class QuorumState:
    """A quorum queue's log on one node, read from its files: its live records (id: the
    record's bytes) and their delivery counts (id: (count, out))."""

    live: dict[int, bytes]
    counts: dict[int, tuple[int, bool]]


def quorum_state(data_dir: Path, vhost: str, name: str) -> QuorumState | None:
    """None when the node holds no log of the queue."""
    live = live_records(data_dir, vhost, name)
    if live is None:
        return None
    kept = read_counts(queue_directory(data_dir, vhost, name))
    counts = {i: c for i, c in kept.items() if i in live}
    return QuorumState(live, counts)


def quorum_copies_equal(
    leader_dir: Path, replica_dirs: dict[str, Path], vhost: str, name: str
) -> dict[str, str]:
    """Replica node name -> "" when its copy holds the leader's live records (same ids,
    same bytes) with the same delivery counts, else what differs."""
    theirs = quorum_state(leader_dir, vhost, name)
    differences: dict[str, str] = {}
    for node, data in replica_dirs.items():
        mine = quorum_state(data, vhost, name)
        if theirs is None:
            differences[node] = "the leader holds no log"
        elif mine is None:
            differences[node] = "no copy"
        elif mine.live != theirs.live:
            missing = sorted(set(theirs.live) - set(mine.live))
            extra = sorted(set(mine.live) - set(theirs.live))
            changed = sorted(
                i for i in set(mine.live) & set(theirs.live) if mine.live[i] != theirs.live[i]
            )
            differences[node] = (
                f"live records differ: {len(missing)} missing (first {missing[:5]}), "
                f"{len(extra)} extra (first {extra[:5]}), {len(changed)} changed"
            )
        elif mine.counts != theirs.counts:
            ids = sorted(i for i in theirs.live if mine.counts.get(i) != theirs.counts.get(i))
            pairs = [(i, theirs.counts.get(i), mine.counts.get(i)) for i in ids[:5]]
            differences[node] = f"delivery counts differ (id, leader, copy): {pairs}"
        else:
            differences[node] = ""
    return differences
