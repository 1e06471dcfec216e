"""The admin plane never holds the AMQP event loop for long (docs/admin-api.md).

- Big listings and scrapes are built in slices: while one is answered over real HTTP, a
  timer on the gateway's loop keeps firing (measured in-process with ``running_gateway``).
- A request over its time budget is ended with 503 and RabbitMQ's error shape.
- User, permission and vhost changes over HTTP are fdatasync'ed in a worker thread, and
  answered only after that sync: a SIGKILL right after the answer loses nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import httpx
import pika
import pytest

from sievemq.admin_api import slicing
from sievemq.gateway.model import definitions
from sievemq.testing import ServerProcess, running_gateway

pytestmark = pytest.mark.timeout(120)

STREAMS = 400


async def _declare_streams(gw_broker: object, n: int) -> None:
    v = gw_broker.vhost("/")  # type: ignore[attr-defined]
    for i in range(n):
        v.declare_queue(f"s{i:04d}", arguments={"x-queue-type": "stream"})


async def test_big_listing_yields_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """While /api/queues, /api/streams, /api/overview and both scrapes of 400 streams are
    answered, the loop turns many times (another task keeps running in between), and every
    answer is complete.

    The slice is set to 0 so the assertion does not depend on how fast this machine is: on a
    fast one, 400 streams fit in one 4 ms slice. What is checked is that every answer is built
    with pause points between its items, which is what bounds the stall on a big node, and that
    another task ran between the answer's first and last pause (counted per loop turn, not by a
    timer, so a fast machine that builds the answer within 1 ms passes too)."""
    monkeypatch.setattr(slicing, "SLICE_S", 0.0)
    async with running_gateway() as gw:
        await _declare_streams(gw.broker, STREAMS)
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0)  # one loop turn
                ticks += 1

        task = asyncio.ensure_future(ticker())
        turns: list[int] = []  # the ticker's count at each pause of the answer
        real_step = slicing.Slicer.step

        async def counting_step(self: slicing.Slicer) -> None:
            before = self.turns
            await real_step(self)
            if self.turns != before:
                turns.append(ticks)

        slicing.Slicer.step = counting_step  # type: ignore[method-assign]
        try:
            async with httpx.AsyncClient(
                base_url=gw.admin_url, auth=("guest", "guest"), timeout=60
            ) as http:
                for path in (
                    "/api/queues",
                    "/api/streams",
                    "/api/overview",
                    "/metrics",
                    "/metrics/per-object",
                ):
                    turns.clear()
                    r = await http.get(path)
                    assert r.status_code == 200, (path, r.text[:200])
                    if path in ("/api/queues", "/api/streams"):
                        assert len(r.json()) == STREAMS
                    if path == "/metrics/per-object":
                        assert r.text.count("rabbitmq_queue_messages{") == STREAMS
                    # the answer took several slices, and the other task ran in between
                    assert len(turns) >= 2, path
                    assert turns[-1] > turns[0], (path, turns[:3], turns[-3:])
        finally:
            slicing.Slicer.step = real_step  # type: ignore[method-assign]
            stop = True
            await task


async def test_request_over_budget_is_503(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_gateway() as gw:
        await _declare_streams(gw.broker, 200)
        monkeypatch.setattr(slicing, "BUDGET_S", 0.0)
        monkeypatch.setattr(slicing, "SLICE_S", 0.0)
        async with httpx.AsyncClient(
            base_url=gw.admin_url, auth=("guest", "guest"), timeout=60
        ) as http:
            r = await http.get("/api/queues")
            assert r.status_code == 503
            assert r.json()["error"] == "timeout"
            assert "budget" in r.json()["reason"]
            monkeypatch.setattr(slicing, "BUDGET_S", 30.0)
            assert (await http.get("/api/queues")).status_code == 200


async def test_definition_fsync_runs_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """PUT user / permission / vhost / policy / parameter: the definitions log's fdatasync
    runs in another thread than the event loop's, and before the answer."""
    synced_in: list[int] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        synced_in.append(threading.get_ident())
        real(fd)

    async with running_gateway() as gw:
        monkeypatch.setattr(definitions.os, "fdatasync", recording)
        loop_thread = threading.get_ident()
        async with httpx.AsyncClient(
            base_url=gw.admin_url, auth=("guest", "guest"), timeout=60
        ) as http:
            for method, path, body in (
                ("PUT", "/api/users/alice", {"password": "pw", "tags": ""}),
                ("PUT", "/api/vhosts/v1", None),
                ("PUT", "/api/permissions/v1/alice", {"configure": ".*", "write": "", "read": ""}),
                ("DELETE", "/api/permissions/v1/alice", None),
                ("DELETE", "/api/users/alice", None),
                ("PUT", "/api/policies/v1/p", {"pattern": ".*", "definition": {"max-length": 1}}),
                (
                    "PUT",
                    "/api/operator-policies/v1/o",
                    {"pattern": ".", "definition": {"expires": 9}},
                ),
                ("PUT", "/api/global-parameters/g", {"value": 1}),
                ("DELETE", "/api/policies/v1/p", None),
                ("DELETE", "/api/operator-policies/v1/o", None),
                ("DELETE", "/api/global-parameters/g", None),
                ("DELETE", "/api/vhosts/v1", None),
            ):
                synced_in.clear()
                r = await http.request(method, path, json=body)
                assert r.status_code in (201, 204), (path, r.text)
                assert synced_in, f"{method} {path} answered without an fdatasync"
                assert loop_thread not in synced_in, f"{method} {path} synced on the loop"


def test_user_change_survives_sigkill_after_the_answer(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", extra_args=("--fsync", "always")) as server:
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as h:
            assert (
                h.put("/api/users/carol", json={"password": "s3cret", "tags": ""}).status_code
                == 201
            )
            assert (
                h.put(
                    "/api/permissions/%2F/carol",
                    json={"configure": "^carol-", "write": ".*", "read": ".*"},
                ).status_code
                == 201
            )
        server.kill()
        server.start()
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as h:
            perm = h.get("/api/permissions/%2F/carol").json()
        assert perm["configure"] == "^carol-"
        conn = pika.BlockingConnection(
            pika.URLParameters(f"amqp://carol:s3cret@{server.host}:{server.amqp_port}/%2F")
        )
        ch = conn.channel()
        ch.queue_declare("carol-q", durable=True, arguments={"x-queue-type": "stream"})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_declare("bob-q", durable=True)
        assert refused.value.reply_code == 403
        conn.close()


def test_policy_survives_sigkill_after_the_answer(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", extra_args=("--fsync", "always")) as server:
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as h:
            body = {"pattern": "^capped", "definition": {"max-length": 2}}
            assert h.put("/api/policies/%2F/cap", json=body).status_code == 201
        server.kill()
        server.start()
        conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("capped", durable=True)
        for i in range(5):
            ch.basic_publish("", "capped", str(i).encode())
        count = ch.queue_declare("capped", passive=True).method.message_count
        conn.close()
        assert count == 2


async def test_policy_change_on_many_queues_yields_to_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PUT and DELETE of a policy matching 2,000 queues: applied in slices (the loop turns in
    between), and every queue has it (or none) when the answer comes."""
    monkeypatch.setattr(slicing, "SLICE_S", 0.0)  # a pause point per queue, on any machine
    async with running_gateway() as gw:
        v = gw.broker.vhost("/")
        for i in range(2000):
            v.declare_queue(f"many{i:04d}", durable=False)
        turns: list[int] = []
        real_step = slicing.Slicer.step

        async def counting_step(self: slicing.Slicer) -> None:
            before = self.turns
            await real_step(self)
            if self.turns != before:
                turns.append(1)

        monkeypatch.setattr(slicing.Slicer, "step", counting_step)
        async with httpx.AsyncClient(
            base_url=gw.admin_url, auth=("guest", "guest"), timeout=60
        ) as http:
            body = {"pattern": "^many", "definition": {"max-length": 3}}
            r = await http.put("/api/policies/%2F/many", json=body)
            assert r.status_code == 201
            assert len(turns) >= 2
            queues = list(v.classic.queues.values())
            assert all(q.policy == "many" and q.arguments.max_length == 3 for q in queues)
            turns.clear()
            assert (await http.delete("/api/policies/%2F/many")).status_code == 204
            assert len(turns) >= 2
            assert all(q.policy is None and q.arguments.max_length is None for q in queues)
