"""What the appender's tests share: a stream that fails or blocks on demand, a publisher's
confirms, and an appender on the running loop closed after the test's block."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Message, StorageError, Stream


def msg(body: bytes) -> Message:
    """A message with ``body`` and no properties, routed with key ``rk``."""
    return Message((), "", "rk", b"\x00\x00", body)


class FlakyStream:
    """A real stream whose append refuses any batch holding a body of b"bad", and blocks
    in the worker thread while ``release`` is clear (``started`` says it got there)."""

    def __init__(self, stream: Stream) -> None:
        self.real = stream
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.appends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def append(self, messages: Sequence[Message], ts: int | None = None, extra: bytes = b"") -> int:
        self.started.set()
        self.release.wait(5)
        self.appends += 1
        if any(m.body == b"bad" for m in messages):
            raise StorageError("refused")
        return self.real.append(messages, ts, extra)


class Sink:
    """A publisher's confirms: seq -> acked (True) or nacked (False), each settled once."""

    def __init__(self) -> None:
        self.outcomes: dict[int, bool] = {}

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        for seq in seqs:
            assert seq not in self.outcomes, f"seq {seq} settled twice"
            self.outcomes[seq] = ok


def stored(stream: Stream) -> list[bytes]:
    """The bodies the stream holds, from its first offset."""
    reader = stream.reader()
    reader.seek_first()
    out = [r.body for r in reader.read(1000, None)]
    reader.close()
    return out


async def settled(sink: Sink, n: int) -> None:
    """Wait until ``n`` of the sink's publishes are settled (generous: 5 s)."""
    for _ in range(500):
        if len(sink.outcomes) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {sink.outcomes} settled")


@contextmanager
def appender_on(stream: Stream | FlakyStream, **options: Any) -> Iterator[StreamAppender]:
    """``stream``'s appender on the running loop, with one worker thread and batches of up
    to 1000 messages (``options``: the appender's keywords); after the block the appender is
    closed, its thread shut down and the stream closed."""
    executor = ThreadPoolExecutor(1)
    appender = StreamAppender(
        stream,  # type: ignore[arg-type]
        asyncio.get_running_loop(),
        executor,
        1000,
        **options,
    )
    try:
        yield appender
    finally:
        appender.close()
        executor.shutdown()
        stream.close()
