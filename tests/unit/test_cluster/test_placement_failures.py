"""A queue claim that fails with nobody waiting is logged by the placement, as a warning."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from sievemq.cluster.placement import _log_failure
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed


def test_a_lost_declare_race_is_a_warning_not_an_unretrieved_task_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen in a chaos run: a declare race lost during a definitions sync ended as asyncio's
    "Task exception was never retrieved" (logged by the loop, at garbage collection)."""
    unretrieved: list[object] = []

    async def lose_the_race() -> None:
        raise ReplicationFailed("queue 'q' in vhost '/' was declared at the same time on 'a'")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
        task = asyncio.ensure_future(lose_the_race())
        task.add_done_callback(_log_failure)
        await asyncio.sleep(0.01)
        del task
        gc.collect()

    with caplog.at_level(logging.WARNING, logger="sievemq.cluster"):
        asyncio.run(main())
    assert unretrieved == []
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "declared at the same time" in caplog.records[0].getMessage()
