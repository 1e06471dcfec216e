"""Waiting for a condition on the event loop, with a deadline instead of a fixed sleep.

A test that sleeps a fixed time is either slow or flaky; ``eventually`` returns as soon as
the condition holds and fails, naming it, only when the deadline passes (generous by
default: CI machines are slower and busier than a developer's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["eventually"]

POLL_S = 0.01


async def eventually(check: Callable[[], object], timeout: float = 10.0) -> None:
    """Return once ``check()`` is truthy; AssertionError if it is still falsy after
    ``timeout`` seconds. ``check`` runs on the loop between polls, so it may look at
    in-process state (an in-process gateway's broker, a client's received list)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout} s: {_name(check)}")
        await asyncio.sleep(POLL_S)


def _name(check: Callable[[], object]) -> str:
    code = getattr(check, "__code__", None)
    if code is None:
        return repr(check)
    return f"{getattr(check, '__qualname__', '?')} ({code.co_filename}:{code.co_firstlineno})"
