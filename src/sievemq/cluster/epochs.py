"""A stream copy's epoch history: which leader's term wrote which of its chunks.

Every failover writes a new epoch into the stream's etcd record by compare-and-swap, with
the offset where that epoch's leader started writing (its copy's end when it won):
``epochs`` = ``[[1, 0], [2, 900], ...]`` (Kafka's leader-epoch checkpoint; osiris keeps the
same in its chunk headers). Each copy keeps the history it last took from the record in a
small file beside its segments (``epochs``: one ``EPOCH FIRST_OFFSET`` line per epoch), so a
copy that comes back knows which epoch wrote its last chunk, and where that epoch ended in
the cluster's history: what it holds past that point no other copy shares (an old leader's
last chunks no majority took), and it truncates there (``common_end``) before following.
A copy without the file predates failover: all of it is epoch 1.
"""

from __future__ import annotations

import os
from pathlib import Path

from sievemq.storage.durable import fsync_dir

EPOCHS_FILE = "epochs"
FIRST = [(1, 0)]  # a stream's history before any failover

History = list[tuple[int, int]]  # (epoch, first offset), by epoch


def history_of(value: object) -> History:
    """A record's ``epochs`` (a JSON list of pairs); absent or odd: ``FIRST``."""
    if not isinstance(value, list):
        return list(FIRST)
    out = [(int(p[0]), int(p[1])) for p in value if isinstance(p, list) and len(p) == 2]
    return sorted(out) or list(FIRST)


def read_history(directory: Path) -> History:
    try:
        text = (Path(directory) / EPOCHS_FILE).read_text(encoding="ascii")
    except FileNotFoundError:
        return list(FIRST)
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[1])))
    return sorted(out) or list(FIRST)


def write_history(directory: Path, history: History) -> None:
    """Replace the file durably (written aside, fsynced, renamed, directory fsynced)."""
    directory = Path(directory)
    temporary = directory / (EPOCHS_FILE + ".new")
    with temporary.open("w", encoding="ascii") as out:
        out.writelines(f"{epoch} {first}\n" for epoch, first in history)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, directory / EPOCHS_FILE)
    fsync_dir(directory)


def last_epoch(history: History, end: int) -> int:
    """The epoch that wrote a copy's last chunk (0: the copy is empty)."""
    if end <= 0:
        return 0
    return max((epoch for epoch, first in history if first < end), default=history[0][0])


def common_end(local: History, cluster: History, end: int) -> int:
    """How much of a copy (``end``, its ``local`` history) the cluster's history shares:
    its last chunk's epoch ended where the first later epoch began."""
    mine = last_epoch(local, end)
    return min([end, *(first for epoch, first in cluster if epoch > mine)])
