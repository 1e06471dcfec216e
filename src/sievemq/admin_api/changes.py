"""One admin change to the definitions, answered once it is on disk.

Every admin change goes the same way: it is made in memory and written to the definitions log
on the event loop, with its fdatasync left to a worker thread (``unsynced``), and the answer
waits for that sync (``synced``). A change that may alter which policy applies where puts the
vhost's policies to work on its queues and exchanges first, in slices between loop turns
(thousands of queues take longer than one slice).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Response

from sievemq.admin_api.slicing import Slicer
from sievemq.gateway.admin.facade import BrokerFacade


async def apply_policies(f: BrokerFacade, vhost: str, slicer: Slicer) -> None:
    """Put the vhost's policies to work, handing the event loop back every few milliseconds."""
    for _ in f.policy_steps(vhost):
        await slicer.step()


async def saved(
    f: BrokerFacade,
    change: Callable[[], bool | None],
    *,
    policies_of: tuple[str, Slicer] | None = None,
) -> Response:
    """Make ``change`` and answer 201 if it says it created something (``True``), else 204,
    once it is on disk. ``policies_of=(vhost, slicer)`` applies that vhost's policies
    after the change and before the answer."""
    with f.unsynced():
        created = change()
    if policies_of is not None:
        await apply_policies(f, *policies_of)
    await f.synced()
    return Response(status_code=201 if created else 204)
