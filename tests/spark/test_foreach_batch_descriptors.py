"""A ``foreachBatch`` query in a driver process that holds more than a thousand descriptors.

py4j's callback server (the thread through which the JVM calls the batch function) waited with
``select.select()``, which cannot watch a descriptor numbered 1024 or more: when its listening
socket was made in a process already holding about a thousand descriptors, the thread died and
the query hung forever. This is why a foreachBatch example hung after the rest of the suite ran
in the same pytest process. ``sievemq.spark.register`` (the ``metrics`` fixture) installs the
poll()-based wait (``sievemq.spark.callback_server``); here the callback server is started
again past descriptor 1024 and a foreachBatch query must finish.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(900)

FD_SETSIZE = 1024


@pytest.fixture
def past_fd_setsize() -> Iterator[None]:
    """Every descriptor below 1024 in use while the test runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * FD_SETSIZE:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * FD_SETSIZE), hard))
    held: list[int] = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < FD_SETSIZE:
            held.append(fd)
        os.close(fd)
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_foreach_batch_runs_with_the_callback_server_past_descriptor_1024(
    spark: Any, metrics: Any, tmp_path: Path, past_fd_setsize: None
) -> None:
    gateway = spark.sparkContext._gateway
    # a fresh callback server, made now (by the query's start) with a descriptor past 1024
    gateway.shutdown_callback_server()
    gateway._callback_server = None
    source = tmp_path / "in"
    source.mkdir()
    (source / "part-0.json").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(10)))
    seen: list[tuple[int, int]] = []

    def record(batch: Any, batch_id: int) -> None:
        seen.append((batch_id, batch.count()))

    query = (
        spark.readStream.schema("n INT")
        .json(str(source))
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert gateway._callback_server.server_socket.fileno() >= FD_SETSIZE
        assert query.awaitTermination(600), "the foreachBatch query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    assert sum(count for _, count in seen) == 10
