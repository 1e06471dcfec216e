"""The only module that talks to etcd: key-value reads, transactions, leases and watches.

An asyncio client over etcd's v3 JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``,
``/v3/lease/*``, ``/v3/watch``) on httpx, as LavinMQ does: etcd serves the gateway itself
since 3.4, so there is no protobuf or grpcio to pin (docs/architecture.md says why).
Keys and values travel base64-encoded; 64-bit integers arrive as JSON strings; fields equal to
their zero value are left out of the answers.

Several endpoints (``URL,URL,...``) are tried in turn: a request that cannot reach one moves
on to the next, and ``EtcdUnavailable`` says none answered. Every request asks for a member
with a leader (the gRPC metadata ``hasleader``, sent through the gateway as a
``Grpc-Metadata-`` header): a member cut from its peers answers 503 ``no leader`` at once
instead of holding the request for etcd's 7 s, and that too moves on to the next endpoint
(a watch on it is ended by etcd when it loses its leader). etcd's leases are not locks
(Jepsen, etcd 3.4.3): every decision that can race is a compare-and-swap on a revision.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

log = logging.getLogger("sievemq.cluster")

# how long one request may take before the endpoint counts as unreachable
REQUEST_TIMEOUT_S = 2.0
# how often a silent watch checks whether its endpoint failed another request meanwhile
WATCH_CHECK_S = 0.5
# gRPC metadata through etcd's gateway: refuse at once on a member without a leader
REQUIRE_LEADER = {"Grpc-Metadata-hasleader": "true"}
# a watch with no answer for this long is reconnected (resuming from its revision): a
# half-open connection to a vanished etcd never ends by itself
WATCH_IDLE_S = 30.0
# requests (not watches) a client has in flight at once; the others wait their turn here:
# past the pool's connections, httpx walks every queued request on each start and end (a
# node that lost the leader of a hundred streams spent its loop there, its requests timed
# out in the pool and its healthy watches were dropped: bench/etcd_pool_contention.py)
MAX_REQUESTS = 32


class EtcdError(Exception):
    """etcd answered, with an error (a lease not found, a request too large...)."""


class EtcdUnavailable(Exception):
    """No endpoint answered."""


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: str) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix`` (its
    UTF-8 bytes with the last one below 0xFF incremented; etcd compares keys as bytes)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return b"\0"  # every key


@dataclass(frozen=True)
class KeyValue:
    """One stored key: its value and the revisions a compare-and-swap checks."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    def json(self) -> Any:
        return json.loads(self.value)

    @classmethod
    def from_wire(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(
            key=_unb64(kv.get("key")).decode(),
            value=_unb64(kv.get("value")),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            version=int(kv.get("version", 0)),
            lease=int(kv.get("lease", 0)),
        )


@dataclass(frozen=True)
class Event:
    """A key put or deleted, as a watch reports it."""

    kind: Literal["put", "delete"]
    kv: KeyValue


@dataclass(frozen=True)
class WatchBatch:
    """What a watch yields: events in revision order, or (``reset``) the whole prefix anew
    as puts, when the history between the last revision seen and now is gone (compacted, or
    etcd restarted without its data): the reader replaces its state."""

    events: list[Event]
    revision: int
    reset: bool = False


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    responses: list[dict[str, Any]] = field(default_factory=list)

    def ranges(self) -> list[KeyValue]:
        """The keys the branch that ran read (its ``range`` operations)."""
        out: list[KeyValue] = []
        for response in self.responses:
            found = response.get("response_range")
            if found is not None:
                out.extend(KeyValue.from_wire(kv) for kv in found.get("kvs", []))
        return out


# ---------------------------------------------------------------- transaction building blocks


def key_missing(key: str) -> dict[str, Any]:
    """Compare: the key does not exist (its create revision is 0)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def mod_revision_is(key: str, revision: int) -> dict[str, Any]:
    """Compare: the key was last written at ``revision`` (0: it does not exist)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def lease_is(key: str, lease: int) -> dict[str, Any]:
    """Compare: the key is held under ``lease``."""
    return {"key": _b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def put_op(key: str, value: bytes | str, lease: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def range_op(key: str) -> dict[str, Any]:
    return {"request_range": {"key": _b64(key)}}


def delete_op(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


class EtcdClient:
    """One connection pool over the endpoints; every method may raise ``EtcdUnavailable``
    (no endpoint answered) or ``EtcdError`` (etcd refused the request)."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._current = 0
        self._failed_at: dict[str, float] = {}  # endpoint -> when a request to it last failed
        self._timeout = timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=REQUIRE_LEADER)
        self._in_flight = asyncio.Semaphore(MAX_REQUESTS)  # (watches have the rest of the pool)
        # when the request that got the last answer was sent (the loop's clock): a member
        # that held an earlier try for a while does not make the answer look older
        self.answered_sent_at = 0.0

    async def close(self) -> None:
        await self._http.aclose()

    @property
    def endpoint(self) -> str:
        """The endpoint the next request tries first (the last one that answered)."""
        return self.endpoints[self._current]

    async def _post(
        self, path: str, body: dict[str, Any], hurry_s: float | None = None
    ) -> dict[str, Any]:
        """POST to the current endpoint, then to each other in turn. ``hurry_s``: how long
        to wait for an endpoint while another remains to be tried (the last one gets the
        whole timeout). At most ``MAX_REQUESTS`` at once; the wait for a turn has a timeout
        of its own."""
        try:
            await asyncio.wait_for(self._in_flight.acquire(), self._timeout)
        except TimeoutError:
            raise EtcdUnavailable(
                f"this node's etcd requests are all busy ({MAX_REQUESTS} in flight for "
                f"{self._timeout:g} s)"
            ) from None
        try:
            return await self._post_in_turn(path, body, hurry_s)
        finally:
            self._in_flight.release()

    async def _post_in_turn(
        self, path: str, body: dict[str, Any], hurry_s: float | None
    ) -> dict[str, Any]:
        problems: list[str] = []
        count = len(self.endpoints)
        first = self._current
        for step in range(count):
            index = (first + step) % count
            url = self.endpoints[index] + path
            timeout = self._timeout
            if hurry_s is not None and step < count - 1:
                timeout = min(timeout, hurry_s)
            sent = asyncio.get_running_loop().time()
            try:
                response = await self._http.post(url, json=body, timeout=timeout)
                answer: Any = response.json() if response.content else {}
            except httpx.PoolTimeout:  # this node's own connections busy: no endpoint's fault
                raise EtcdUnavailable(
                    "no connection to etcd free on this node within "
                    f"{timeout:g} s (too many requests at once)"
                ) from None
            except Exception as error:  # (a cancellation is no Exception)
                # no answer, or one that is not etcd's JSON (a torn reply, a proxy's page),
                # or httpx failing inside on a connection that closed under it (a chaos run
                # saw ``AttributeError: 'NoneType' object has no attribute 'getpeername'``):
                # that endpoint is unusable now; an unexpected error here would end the
                # caller's loop for good (a lease keeper that dies renews nothing)
                problems.append(f"{self.endpoints[index]}: {type(error).__name__} {error}")
                self._failed(index)
                if index == first and isinstance(error, httpx.TimeoutException):
                    # it held the request (a member just cut off, not aware of it yet):
                    # the next request starts with the next member, not with it again
                    # (after a try that failed everywhere, a lease keeper's next renewal
                    # waited on it once more, and a chaos run's node fenced its queues)
                    self._current = (index + 1) % count
                continue
            if not isinstance(answer, dict):
                problems.append(f"{self.endpoints[index]}: not a JSON object: {answer!r:.80}")
                self._failed(index)
                continue
            if response.status_code == 503:  # no leader there (cut from its peers): next
                problems.append(f"{self.endpoints[index]}: {_message(answer, response)}")
                self._failed(index)
                continue
            self._current = index
            self.answered_sent_at = sent
            if response.status_code != 200:
                raise EtcdError(_message(answer, response))
            return answer
        raise EtcdUnavailable("no etcd endpoint answered: " + "; ".join(problems))

    def _failed(self, index: int) -> None:
        self._failed_at[self.endpoints[index]] = asyncio.get_running_loop().time()

    def companion(self) -> EtcdClient:
        """A client of the same endpoints with a connection pool of its own, for another
        thread's loop (the lease keeper's). The endpoints it finds failing count for this
        client's watches too (one dict; both loops' clocks are ``time.monotonic``)."""
        other = EtcdClient(self.endpoints, self._timeout)
        other._failed_at = self._failed_at
        other._current = self._current
        return other

    # ---------------------------------------------------------------- key-value

    async def get(self, key: str) -> KeyValue | None:
        answer = await self._post("/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs", [])
        return KeyValue.from_wire(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` and the store's revision they were read at."""
        answer = await self._post(
            "/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        )
        revision = int(answer.get("header", {}).get("revision", 0))
        return [KeyValue.from_wire(kv) for kv in answer.get("kvs", [])], revision

    async def put(self, key: str, value: bytes | str, lease: int = 0) -> int:
        """Write ``key``; returns the revision of the write."""
        body = put_op(key, value, lease)["request_put"]
        answer = await self._post("/v3/kv/put", body)
        return int(answer.get("header", {}).get("revision", 0))

    async def delete(self, key: str) -> None:
        await self._post("/v3/kv/deleterange", {"key": _b64(key)})

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        """All of ``compare`` true: run ``success``, else ``failure``, atomically."""
        answer = await self._post(
            "/v3/kv/txn", {"compare": compare, "success": success, "failure": failure or []}
        )
        return TxnResult(
            succeeded=bool(answer.get("succeeded", False)),
            revision=int(answer.get("header", {}).get("revision", 0)),
            responses=answer.get("responses", []),
        )

    async def create(self, key: str, value: bytes | str, lease: int = 0) -> KeyValue | None:
        """Write ``key`` only if it does not exist: None when written, else what is there."""
        result = await self.txn([key_missing(key)], [put_op(key, value, lease)], [range_op(key)])
        if result.succeeded:
            return None
        found = result.ranges()
        if not found:  # deleted between the compare and the read: cannot happen in one txn
            raise EtcdError(f"{key}: neither created nor found")
        return found[0]

    async def compare_and_swap(
        self, key: str, expected_mod_revision: int, value: bytes | str, lease: int = 0
    ) -> bool:
        """Write ``key`` only if nobody wrote it since ``expected_mod_revision`` (0: only if
        absent); False when somebody did."""
        result = await self.txn(
            [mod_revision_is(key, expected_mod_revision)], [put_op(key, value, lease)]
        )
        return result.succeeded

    # ---------------------------------------------------------------- leases

    async def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; returns its id."""
        answer = await self._post("/v3/lease/grant", {"TTL": str(ttl_s)})
        if answer.get("error"):
            raise EtcdError(str(answer["error"]))
        return int(answer["ID"])

    async def keep_alive(self, lease: int, hurry_s: float | None = None) -> int:
        """Renew ``lease``; returns its TTL afresh, 0 when etcd no longer has it.
        ``hurry_s``: move on to the next endpoint after that long (``_post``)."""
        answer = await self._post("/v3/lease/keepalive", {"ID": str(lease)}, hurry_s)
        return int(answer.get("result", answer).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now: every key under it is deleted."""
        with contextlib.suppress(EtcdError):  # already expired: nothing to do
            await self._post("/v3/lease/revoke", {"ID": str(lease)})

    # ---------------------------------------------------------------- watches

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchBatch]:
        """Every change under ``prefix`` from ``start_revision`` on, for ever.

        A dropped connection is reopened (on the next endpoint when one is down) from the
        revision after the last one seen, so no change is missed or repeated. When that
        history is gone (compacted, or etcd came back without its data: its revision is
        behind ours) the whole prefix is read again and yielded as a ``reset`` batch.
        """
        next_revision = start_revision
        seen = start_revision - 1
        while True:
            try:
                current, revision = await self.get_prefix(prefix)
                if revision < seen:
                    log.warning(
                        "etcd at %s is at revision %d, behind %d: it lost its data; "
                        "reading %s anew",
                        self.endpoint,
                        revision,
                        seen,
                        prefix,
                    )
                    yield WatchBatch([Event("put", kv) for kv in current], revision, reset=True)
                    seen, next_revision = revision, revision + 1
                async for batch in self._watch_once(prefix, next_revision):
                    if batch.reset:
                        current, revision = await self.get_prefix(prefix)
                        batch = WatchBatch(
                            [Event("put", kv) for kv in current], revision, reset=True
                        )
                    seen = max(seen, batch.revision)
                    next_revision = seen + 1
                    yield batch
            # a bad answer (not JSON, a broken stream) counts as a dropped connection: the
            # watch is the cluster's view, it must not end while the node runs
            except (EtcdUnavailable, EtcdError, httpx.HTTPError, ValueError) as error:
                log.debug("watch of %s dropped (%s); resuming from %d", prefix, error, seen + 1)
                await asyncio.sleep(0.2)
            else:
                await asyncio.sleep(0.05)  # the server ended the stream: reopen it

    async def _watch_once(self, prefix: str, start_revision: int) -> AsyncIterator[WatchBatch]:
        """One watch stream on the current endpoint, until it ends or goes idle."""
        create = {
            "key": _b64(prefix),
            "range_end": _b64(prefix_end(prefix)),
            "start_revision": str(start_revision),
        }
        timeout = httpx.Timeout(self._timeout, read=WATCH_IDLE_S)
        endpoint = self.endpoint
        url = endpoint + "/v3/watch"
        try:
            async with self._http.stream(
                "POST", url, json={"create_request": create}, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    raise EtcdError(f"watch refused: HTTP {response.status_code}")
                if len(self.endpoints) > 1:  # another member to watch on when this one fails
                    lines = self._lines_while_healthy(response, endpoint)
                else:
                    lines = _json_lines(response.aiter_text())
                async for line in lines:
                    result = line.get("result", {})
                    if "error" in line:
                        raise EtcdError(str(line["error"]))
                    if int(result.get("compact_revision", 0)) > 0:
                        yield WatchBatch([], 0, reset=True)
                        return
                    events = result.get("events", [])
                    if not events:
                        continue  # created, progress
                    out = [
                        Event(
                            "delete" if e.get("type") == "DELETE" else "put",
                            KeyValue.from_wire(e.get("kv", {})),
                        )
                        for e in events
                    ]
                    yield WatchBatch(out, max(ev.kv.mod_revision for ev in out))
        except httpx.TransportError:
            self._current = (self._current + 1) % len(self.endpoints)
            raise

    async def _lines_while_healthy(
        self, response: httpx.Response, endpoint: str
    ) -> AsyncIterator[dict[str, Any]]:
        """The watch's lines, until a request to the same endpoint fails meanwhile (timed
        out, or 503: no leader there). A member cut off from this node (its packets
        dropped) or from its peers would leave the watch silent until ``WATCH_IDLE_S``: the
        keep-alives, every TTL/3, notice first, and the watch moves on with them."""
        opened = asyncio.get_running_loop().time()
        lines: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for line in _json_lines(response.aiter_text()):
                    await lines.put(line)
                await lines.put(None)
            except Exception as error:  # handed to the reader below
                await lines.put(error)

        pumping = asyncio.ensure_future(pump())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(lines.get(), WATCH_CHECK_S)
                except TimeoutError:
                    if self._failed_at.get(endpoint, -1.0) > opened:
                        if self.endpoint == endpoint:
                            self._current = (self._current + 1) % len(self.endpoints)
                        raise EtcdUnavailable(
                            f"{endpoint} failed a request: watching elsewhere"
                        ) from None
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping


def _message(answer: dict[str, Any], response: httpx.Response) -> str:
    error = answer.get("error")
    if isinstance(error, dict):  # the lease gateway nests it
        error = error.get("message")
    return str(answer.get("message") or error or response.text)


async def _json_lines(chunks: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The gateway's stream: one JSON object per line."""
    buffer = ""
    async for chunk in chunks:
        buffer += chunk
        while "\n" in buffer:
            line, buffer = buffer.split("\n", 1)
            if line.strip():
                yield json.loads(line)


class Lease:
    """A lease kept alive every TTL/3; ``on_lost`` runs once, on the loop that made the
    lease, when it is gone (etcd said so, or no endpoint answered for a whole TTL), and the
    keeper stops.

    The keeper runs in a thread of its own, with an etcd client (and connections) of its
    own: a node's loop that lags (hundreds of elections at once after another node's loss,
    a long catch-up) or a connection pool full of their requests must not delay the
    renewal past the TTL. It did, in a 30-minute chaos run on a loaded machine: every node
    lost its lease again and again, each loss started more elections on the others, and the
    cluster never settled. A lease says the node is alive; whether its loop keeps up is
    what its clients see (and fencing is by epoch, not by lease)."""

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl_s: int,
        on_lost: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.id = lease_id
        self.ttl_s = ttl_s
        self._on_lost = on_lost
        self._clock = clock  # the loop's clock too (asyncio's is time.monotonic)
        self._home = asyncio.get_running_loop()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._keeper_loop: asyncio.AbstractEventLoop | None = None
        self._keeper: asyncio.Task[None] | None = None
        self.lost = False
        self._stopped = False  # stop() was called: a loss told late is nobody's news
        # when the last keep-alive etcd answered was sent: etcd cannot have let the lease
        # expire before this + the TTL (``cluster.failover`` fences so)
        self.renewed_at = self._clock()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"etcd-lease-{self.id:x}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._keeper_loop = loop
        self._keeper = loop.create_task(self._keep())
        self._started.set()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._keeper)
        finally:
            loop.close()

    async def _keep(self) -> None:
        client = self.client.companion()
        try:
            await self._renew(client)
        finally:
            await client.close()

    async def _renew(self, client: EtcdClient) -> None:
        last_ok = due = self._clock()
        while True:
            # every TTL/3 from the last try's start, not its end: a try that waited on a
            # member cut off must not push the next one (and the lease's age) further out
            due = max(due + self.ttl_s / 3, self._clock())
            await asyncio.sleep(due - self._clock())
            try:
                # an endpoint that holds the keep-alive longer than TTL/3 (a member just cut
                # from its peers, not yet aware) must not cost the lease: try the next
                ttl = await client.keep_alive(self.id, hurry_s=self.ttl_s / 3)
            except Exception as error:  # whatever fails, the keeper goes on until the TTL
                if not isinstance(error, (EtcdUnavailable, EtcdError)):
                    log.warning("renewing etcd lease %x failed: %r", self.id, error)
                if self._clock() - last_ok >= self.ttl_s:
                    self._lose(f"etcd unreachable for {self.ttl_s} s ({error})")
                    return
                continue
            if ttl <= 0:
                self._lose("etcd no longer has it (expired, or etcd lost its data)")
                return
            last_ok = self._clock()
            # sent to the member that answered: etcd renewed it at that send or later
            self.renewed_at = client.answered_sent_at

    def _lose(self, why: str) -> None:
        """In the keeper's thread: mark the lease lost, tell the node on its own loop."""
        self.lost = True
        with contextlib.suppress(RuntimeError):  # the node's loop closed: nobody to tell
            self._home.call_soon_threadsafe(self._tell, why)

    def _tell(self, why: str) -> None:
        if not self._stopped:
            self._on_lost(why)

    async def stop(self, revoke: bool = True) -> None:
        """Stop renewing; with ``revoke``, end it now so its keys vanish at once."""
        self._stopped = True
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(self._started.wait)
            loop, keeper = self._keeper_loop, self._keeper
            if loop is not None and keeper is not None:
                with contextlib.suppress(RuntimeError):  # the keeper ended (lease lost)
                    loop.call_soon_threadsafe(keeper.cancel)
            await asyncio.to_thread(thread.join)
        if revoke and not self.lost:
            with contextlib.suppress(EtcdUnavailable):
                await self.client.revoke(self.id)
