"""eventually: returns once the condition holds, fails naming it when it never does."""

from __future__ import annotations

import asyncio

import pytest

from sievemq.testing.wait import eventually


async def test_returns_once_the_condition_holds() -> None:
    state = {"done": False}
    asyncio.get_running_loop().call_soon(state.update, {"done": True})
    await eventually(lambda: state["done"])
    assert state["done"]


async def test_fails_naming_the_condition_after_the_timeout() -> None:
    def never() -> bool:
        return False

    with pytest.raises(AssertionError, match=r"condition not met in 0.05 s: .*never"):
        await eventually(never, timeout=0.05)
