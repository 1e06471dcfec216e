"""The etcd client over several members: every request asks for a member with a leader, and
a member that answers 503 (``no leader``: cut from its peers) is passed over for the next,
as one that does not answer is (etcd's gateway answers as the fake below does)."""

from __future__ import annotations

import asyncio
import json

import httpx

from sievemq.cluster.coordination import MAX_REQUESTS, EtcdClient, EtcdUnavailable


def _client(answers: dict[str, httpx.Response], seen: list[httpx.Request]) -> EtcdClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[request.url.host]

    client = EtcdClient(["http://e1:2379", "http://e2:2379"])
    client._http = httpx.AsyncClient(
        transport=httpx.MockTransport(handler), headers=client._http.headers
    )
    return client


NO_LEADER = httpx.Response(
    503, json={"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader"}}
)
TTL = httpx.Response(200, json={"result": {"ID": "7", "TTL": "5"}})


async def test_a_member_without_a_leader_is_passed_over() -> None:
    seen: list[httpx.Request] = []
    client = _client({"e1": NO_LEADER, "e2": TTL}, seen)
    assert await client.keep_alive(7) == 5
    assert [r.url.host for r in seen] == ["e1", "e2"] and client.endpoint == "http://e2:2379"
    assert all(r.headers["grpc-metadata-hasleader"] == "true" for r in seen)
    await client.close()


async def test_no_member_with_a_leader_is_unavailable() -> None:
    seen: list[httpx.Request] = []
    client = _client({"e1": NO_LEADER, "e2": NO_LEADER}, seen)
    try:
        await client.keep_alive(7)
    except EtcdUnavailable as error:
        assert "no leader" in str(error) and "e1" in str(error) and "e2" in str(error)
    else:
        raise AssertionError("no member had a leader")
    assert json.loads(seen[0].content) == {"ID": "7"}
    await client.close()


async def test_a_failure_inside_httpx_makes_that_member_unusable_not_the_caller_fail() -> None:
    """A chaos run saw httpx raise ``AttributeError`` (a connection closed under it) on an
    election's delete: that is a member that did not answer, the next one is asked."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "e1":
            raise AttributeError("'NoneType' object has no attribute 'getpeername'")
        return TTL

    client = EtcdClient(["http://e1:2379", "http://e2:2379"])
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    assert await client.keep_alive(7) == 5
    assert [r.url.host for r in seen] == ["e1", "e2"] and client.endpoint == "http://e2:2379"
    client._current = 0
    client.endpoints = ["http://e1:2379"]
    try:
        await client.keep_alive(7)
    except EtcdUnavailable as error:
        assert "AttributeError" in str(error) and "getpeername" in str(error)
    else:
        raise AssertionError("the only member failed")
    await client.close()


async def test_a_full_connection_pool_is_this_nodes_congestion_not_the_members_fault() -> None:
    """Marked failed, a member whose requests wait in this node's own pool had its healthy
    watches dropped ("watching elsewhere") and the node's view went stale for minutes."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise httpx.PoolTimeout("no connection free")

    client = EtcdClient(["http://e1:2379", "http://e2:2379"])
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    try:
        await client.keep_alive(7)
    except EtcdUnavailable as error:
        assert "too many requests at once" in str(error)
    else:
        raise AssertionError("the pool was full")
    assert [r.url.host for r in seen] == ["e1"] and client._failed_at == {}
    await client.close()


async def test_requests_past_the_limit_wait_their_turn_here() -> None:
    in_flight = 0
    most = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return TTL

    client = EtcdClient(["http://e1:2379"])
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    ttls = await asyncio.gather(*(client.keep_alive(7) for _ in range(3 * MAX_REQUESTS)))
    assert ttls == [5] * (3 * MAX_REQUESTS) and most == MAX_REQUESTS
    await client.close()


async def test_after_a_member_held_a_request_the_next_one_starts_elsewhere() -> None:
    """e1 holds every request (cut off, not aware yet), e2 has no leader for a moment: the
    try fails everywhere, and the next starts with e2, which has its leader again, instead
    of waiting on e1 once more (a lease keeper's renewals, every TTL/3, cannot afford it)."""
    seen: list[str] = []
    e2_answers = [NO_LEADER, TTL]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url.host))
        if request.url.host == "e1":
            raise httpx.ReadTimeout("held", request=request)
        return e2_answers.pop(0)

    client = EtcdClient(["http://e1:2379", "http://e2:2379"])
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    try:
        await client.keep_alive(7, hurry_s=0.1)
    except EtcdUnavailable:
        pass
    else:
        raise AssertionError("no member answered")
    assert seen == ["e1", "e2"]
    assert await client.keep_alive(7, hurry_s=0.1) == 5
    assert seen == ["e1", "e2", "e2"]
    await client.close()
