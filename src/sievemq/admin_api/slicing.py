"""Big admin answers built in slices across event-loop turns, within a time budget.

The admin app runs on the gateway's event loop (as RabbitMQ's management plugin shares the
node). A listing of thousands of queues or a per-object scrape costs 100+ ms of CPU; done in
one go it would hold every AMQP connection that long. A ``Slicer`` hands the loop back
whenever ``SLICE_S`` of work has been done since the last turn (``await asyncio.sleep(0)``:
ready AMQP callbacks and socket reads run in between), and ends the request with 503 when it
has taken longer than its budget. Only one big answer is built at a time (``HEAVY``): with
several pollers, each loop turn still carries at most one slice of admin work.

JSON is written in slices too (``json_response``): serializing a megabyte at once is a stall
of its own.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from sievemq.admin_api.errors import ApiError

T = TypeVar("T")

SLICE_S = 0.004  # at most this much admin work between two loop turns
BUDGET_S = 30.0  # a request still unanswered after this is ended with 503
JSON_ITEMS = 64  # items serialized between two checks of the clock


class Slicer:
    """Yields to the loop every ``slice_s`` of work; 503 after ``budget_s``."""

    def __init__(self, budget_s: float | None = None, slice_s: float | None = None) -> None:
        self.started = time.perf_counter()
        self.last = self.started
        self.budget_s = BUDGET_S if budget_s is None else budget_s
        self.slice_s = SLICE_S if slice_s is None else slice_s
        self.turns = 0

    async def step(self) -> None:
        """A point where the work may pause: returns at once unless the slice is used up."""
        now = time.perf_counter()
        if now - self.last < self.slice_s:
            return
        if now - self.started > self.budget_s:
            raise ApiError(
                503,
                "timeout",
                f"the answer took longer than the admin request budget of {self.budget_s:g} s",
            )
        await asyncio.sleep(0)
        self.turns += 1
        self.last = time.perf_counter()

    async def collect(self, items: Iterable[T]) -> list[T]:
        """``list(items)``, pausing between items as needed."""
        out: list[T] = []
        for item in items:
            out.append(item)
            await self.step()
        return out

    async def dumps(self, value: Any) -> bytes:
        """``json.dumps(value)`` of a list (or a dict holding an ``items`` list), in slices."""
        if isinstance(value, dict) and isinstance(value.get("items"), list):
            head = {k: v for k, v in value.items() if k != "items"}
            items = await self.dumps(value["items"])
            inner = json.dumps(head, separators=(",", ":")).encode()
            return inner[:-1] + (b',"items":' if head else b'"items":') + items + b"}"
        if not isinstance(value, list):
            return json.dumps(value, separators=(",", ":")).encode()
        parts: list[str] = []
        for start in range(0, len(value), JSON_ITEMS):
            chunk = json.dumps(value[start : start + JSON_ITEMS], separators=(",", ":"))
            parts.append(chunk[1:-1])
            await self.step()
        return ("[" + ",".join(p for p in parts if p) + "]").encode()

    async def json_response(self, value: Any, status_code: int = 200) -> Response:
        return Response(await self.dumps(value), status_code, media_type="application/json")


async def heavy(request: Request) -> AsyncIterator[Slicer]:
    """FastAPI dependency for a big answer: waits its turn (one at a time), then a Slicer."""
    lock: asyncio.Lock = request.app.state.heavy
    slicer = Slicer()
    async with lock:
        slicer.last = time.perf_counter()
        yield slicer
