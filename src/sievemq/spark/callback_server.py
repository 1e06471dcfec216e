"""py4j's callback server made safe in a process that holds many descriptors.

Spark runs a ``foreachBatch`` function (and every other Python callback of the driver, such
as a streaming query listener) through py4j's callback server: a thread of the driver process
that accepts the JVM's connections. Its accept loop waits with ``select.select()``, which
cannot watch a descriptor numbered 1024 (FD_SETSIZE) or more. The server's listening socket is
made when the first ``foreachBatch`` query starts, so in a process that already holds about
1,020 descriptors by then (a long-lived service; a test run that started and stopped hundreds
of gateways and clients first) the thread dies at once with ``ValueError: filedescriptor out of
range in select()``, logged only by py4j's logger, which is silent by default, and the JVM
waits forever for the answer to its first callback: the query hangs without an error.

``install()`` gives py4j's module a ``select`` whose ``select()`` waits with ``poll()``, which
has no such limit (py4j calls it in that accept loop only). It must run before the callback
server starts; ``register`` and ``foreach_batch`` call it, and it is idempotent.
"""

from __future__ import annotations

import importlib
import math
import select
import types
from collections.abc import Sequence
from typing import Any

_READ = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


def _fd(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select`` through ``poll()``: the same answer, for any descriptor number."""
    poller = select.poll()
    wanted: dict[int, int] = {}
    objects: dict[int, Any] = {}
    for objs, mask in ((rlist, select.POLLIN), (wlist, select.POLLOUT), (xlist, select.POLLPRI)):
        for obj in objs:
            fd = _fd(obj)
            objects[fd] = obj
            wanted[fd] = wanted.get(fd, 0) | mask
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    events = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
    readable: list[Any] = []
    writable: list[Any] = []
    exceptional: list[Any] = []
    for fd, event in events:
        mask = wanted[fd]
        if mask & select.POLLIN and event & _READ:
            readable.append(objects[fd])
        if mask & select.POLLOUT and event & _WRITE:
            writable.append(objects[fd])
        if mask & select.POLLPRI and event & select.POLLPRI:
            exceptional.append(objects[fd])
    return readable, writable, exceptional


def install() -> None:
    """Make py4j's callback server wait with ``poll_select`` (see the module docstring)."""
    java_gateway = importlib.import_module("py4j.java_gateway")  # (no type stubs)
    current = java_gateway.select
    if getattr(current, "select", None) is poll_select:
        return
    shim = types.SimpleNamespace(
        **{name: getattr(select, name) for name in dir(select) if not name.startswith("__")}
    )
    shim.select = poll_select
    setattr(java_gateway, "select", shim)  # noqa: B010 (a module without stubs)
