"""The only module that talks to etcd: key-value reads, transactions, leases and watches.

An asyncio client over etcd's v3 JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``,
``/v3/lease/*``, ``/v3/watch``) on httpx, as LavinMQ does: etcd serves the gateway itself
since 3.4, so there is no protobuf or grpcio to pin (docs/architecture.md says why).
Keys and values travel base64-encoded; 64-bit integers arrive as JSON strings; fields equal to
their zero value are left out of the answers.

Several endpoints (``URL,URL,...``) are tried in turn: a request that cannot reach one moves
on to the next, and ``EtcdUnavailable`` says none answered. etcd's leases are not locks
(Jepsen, etcd 3.4.3): every decision that can race is a compare-and-swap on a revision.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

log = logging.getLogger("sievemq.cluster")

# how long one request may take before the endpoint counts as unreachable
REQUEST_TIMEOUT_S = 2.0
# a watch with no answer for this long is reconnected (resuming from its revision): a
# half-open connection to a vanished etcd never ends by itself
WATCH_IDLE_S = 30.0


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
        self._timeout = timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s)

    async def close(self) -> None:
        await self._http.aclose()

    @property
    def endpoint(self) -> str:
        """The endpoint the next request tries first (the last one that answered)."""
        return self.endpoints[self._current]

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the current endpoint, then to each other in turn."""
        problems: list[str] = []
        for step in range(len(self.endpoints)):
            index = (self._current + step) % len(self.endpoints)
            url = self.endpoints[index] + path
            try:
                response = await self._http.post(url, json=body)
                answer: Any = response.json() if response.content else {}
            except (httpx.HTTPError, ValueError) as error:
                # no answer, or one that is not etcd's JSON (a torn reply, a proxy's page):
                # that endpoint is unusable now; an unexpected error here would end the
                # caller's loop for good (a lease keeper that dies renews nothing)
                problems.append(f"{self.endpoints[index]}: {type(error).__name__} {error}")
                continue
            if not isinstance(answer, dict):
                problems.append(f"{self.endpoints[index]}: not a JSON object: {answer!r:.80}")
                continue
            self._current = index
            if response.status_code != 200:
                raise EtcdError(answer.get("message") or answer.get("error") or response.text)
            return answer
        raise EtcdUnavailable("no etcd endpoint answered: " + "; ".join(problems))

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

    async def keep_alive(self, lease: int) -> int:
        """Renew ``lease``; returns its TTL afresh, 0 when etcd no longer has it."""
        answer = await self._post("/v3/lease/keepalive", {"ID": str(lease)})
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
        url = self.endpoint + "/v3/watch"
        try:
            async with self._http.stream(
                "POST", url, json={"create_request": create}, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    raise EtcdError(f"watch refused: HTTP {response.status_code}")
                async for line in _json_lines(response.aiter_text()):
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
    """A lease kept alive every TTL/3; ``on_lost`` runs once when it is gone (etcd said so,
    or no endpoint answered for a whole TTL), and the keeper stops."""

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl_s: int,
        on_lost: Callable[[str], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.id = lease_id
        self.ttl_s = ttl_s
        self._on_lost = on_lost
        self._clock = clock or asyncio.get_running_loop().time
        self._task: asyncio.Task[None] | None = None
        self.lost = False
        # when the last keep-alive etcd answered was sent (the loop's clock): etcd cannot
        # have let the lease expire before this + the TTL (``cluster.failover`` fences so)
        self.renewed_at = self._clock()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        last_ok = self._clock()
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            sent = self._clock()
            try:
                ttl = await self.client.keep_alive(self.id)
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
            self.renewed_at = sent

    def _lose(self, why: str) -> None:
        self.lost = True
        self._on_lost(why)

    async def stop(self, revoke: bool = True) -> None:
        """Stop renewing; with ``revoke``, end it now so its keys vanish at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if revoke and not self.lost:
            with contextlib.suppress(EtcdUnavailable):
                await self.client.revoke(self.id)
