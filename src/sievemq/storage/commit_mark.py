"""The committed end of a gated copy, kept beside it for the next start.

A replicated stream's leader commits a chunk once a majority holds it (``cluster/commit.py``),
and so does a replicated quorum queue's leader with its log ids; a replica's copy of a stream
reads up to what its leader said it committed. A copy that starts again on its data (a
restart, even after SIGKILL) must not count all it holds as committed: its last chunks may be
held by no other member, and a later election may cut them away after readers saw them. So
the committed end is kept in a small file, ``committed``, beside the copy's files
(``u64 end | u32 crc32 of the end``), and a copy gated again on start resumes from it; what
it holds past that commits as its replicas acknowledge it.

The file is created durably (written aside, fsynced, renamed) when the copy is first gated,
and then rewritten in place, without an fsync, as the committed end moves: after a crash it
may say less than what was committed (an older value), never more, and a lower end only
delays what readers see until the replicas acknowledge again. A copy without the file was
never gated (a stream with one member commits everything as it is written): all of it counts.
A file that cannot be read counts nothing as committed.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from pathlib import Path

from sievemq.storage import handles
from sievemq.storage.durable import fsync_dir

COMMITTED_FILE = "committed"
_MARK = struct.Struct(">QI")


def _pack(end: int) -> bytes:
    value = end.to_bytes(8, "big")
    return _MARK.pack(end, zlib.crc32(value))


def read_committed(directory: Path) -> int | None:
    """The committed end kept beside a copy; None when it was never gated; 0 when the
    file is torn or damaged (nothing is known to be committed)."""
    try:
        data = (Path(directory) / COMMITTED_FILE).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) != _MARK.size:
        return 0
    end, crc = _MARK.unpack(data)
    return end if zlib.crc32(end.to_bytes(8, "big")) == crc else 0


def forget_committed(directory: Path) -> None:
    """No committed end kept for the copy any more (it is no longer gated)."""
    with contextlib.suppress(OSError):
        (Path(directory) / COMMITTED_FILE).unlink()


class CommitMark:
    """The ``committed`` file of one gated copy, rewritten as its committed end moves."""

    __slots__ = ("_file", "_written", "path")

    def __init__(self, directory: Path, end: int) -> None:
        directory = Path(directory)
        self.path = directory / COMMITTED_FILE
        if not self.path.exists():
            temporary = directory / (COMMITTED_FILE + ".new")
            with temporary.open("wb") as out:
                out.write(_pack(end))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            fsync_dir(directory)
            self._written = end
        else:
            self._written = -1
        self._file = handles.shared.file(self.path, os.O_WRONLY)
        self.write(end)

    def write(self, end: int) -> None:
        """Keep ``end`` (one write in place; a failed one leaves the older, lower end)."""
        if end == self._written:
            return
        try:  # (no context managers: this runs once per commit, on the event loop)
            fd = self._file.acquire()
        except OSError:
            return
        try:
            os.pwrite(fd, _pack(end), 0)
            self._written = end
        except OSError:
            pass
        finally:
            self._file.release()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()

    def remove(self) -> None:
        """The copy is no longer gated (no replica left): everything it holds is committed
        from now on, and a later start must count it so."""
        self.close()
        forget_committed(self.path.parent)

    @classmethod
    def resume(
        cls, directory: Path, end: int, elected: int | None = None
    ) -> tuple[CommitMark, int]:
        """The mark of a copy gated now that holds everything below ``end``, and the end it
        counts as committed: the one kept beside it from when it last ran gated (no more
        than ``end``), or ``end`` when it never was; with ``elected`` (what an election
        knows a majority holds) that instead, at most ``end``, without reading the file."""
        if elected is None:
            kept = read_committed(directory)
            committed = end if kept is None else min(end, kept)
        else:
            committed = min(elected, end)
        return cls(directory, committed), committed

    @staticmethod
    def drop(mark: CommitMark | None, directory: Path) -> None:
        """The copy in ``directory`` is no longer gated: its ``mark`` removed, or without
        one (not gated since it started) the file an earlier gating left."""
        if mark is not None:
            mark.remove()
        else:
            forget_committed(directory)
