"""Adding and removing a stream's replicas (``rabbitmq-streams add_replica / delete_replica``).

A stream's replicas are the ``replicas`` of its etcd record (``cluster/placement.py``). Any
node may change them: it reads the record, checks the request against it and against the
live nodes, and writes the new list by compare-and-swap on the record's revision (a record
changed meanwhile is read again and the request checked anew). Every node's watch then
acts on it: the added node starts a follower that copies the stream from its first chunk
(``cluster/replication.py``), the removed one stops its follower and removes its copy, and
``/api/queues`` shows the new ``members`` at once on the node that wrote it, within the
watch's delay on the others. The leader cannot be removed (there is no moving a stream's
writer yet), so a stream keeps at least one member.

Quorum queues' members change the same way (``kinds``: ``QUORUM``), over HTTP and the
command line (``rabbitmq-queues add_member / delete_member``, ``admin_api/quorum_members.py``)
and by the reconciliation (``cluster/reconcile.py``): a quorum replica named in the record
copies the queue's log from its first id (``cluster/quorum_replication.py``) and then follows
the leader; a removed one stops and its copy goes. The refusals name the kind asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sievemq.amqp.errors import InternalError
from sievemq.cluster.coordination import (
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    mod_revision_is,
    put_op,
)
from sievemq.cluster.placement import CREATING, READY, Placement, queue_key
from sievemq.gateway.admin.views import BadRequest, Conflict, NotFound

# the queue types whose replicas the operations change by default, and a quorum queue's
# members (``rabbitmq-queues add_member``)
STREAMS: tuple[str, ...] = ("stream",)
QUORUM: tuple[str, ...] = ("quorum",)
ATTEMPTS = 5  # compare-and-swap rounds lost to concurrent changes before giving up


class ReplicaOps:
    """Changes to a stream's replica list, through etcd."""

    def __init__(
        self,
        client: EtcdClient,
        placement: Placement,
        live: Callable[[], dict[str, dict[str, Any]]],
        members: Callable[[], set[str]],
    ) -> None:
        self.client = client
        self.placement = placement
        self._live = live  # the running nodes' records, by name
        self._members = members  # every node that ever joined (running or not)

    async def add(self, vhost: str, name: str, node: str, kinds: tuple[str, ...] = STREAMS) -> bool:
        """Make ``node`` a replica of the stream (or of a queue of ``kinds``); False when
        it already is a member."""
        if node not in self._members() | set(self._live()) | {self.placement.me}:
            raise NotFound(f"no cluster node '{node}'")
        if node not in self._live() and node != self.placement.me:
            held = "replica" if kinds == STREAMS else "member"
            raise Conflict(
                f"cluster node '{node}' is not running: a {held} is added on a running node"
            )

        def change(record: dict[str, Any]) -> list[str] | None:
            replicas = [str(n) for n in record.get("replicas", ())]
            if node == record.get("leader") or node in replicas:
                return None
            return [*replicas, node]

        return await self._change(vhost, name, change, kinds)

    async def delete(
        self, vhost: str, name: str, node: str, kinds: tuple[str, ...] = STREAMS
    ) -> None:
        """Stop ``node``'s replica of the stream (or of a queue of ``kinds``) and remove its
        copy (never the leader's: a stream or queue keeps at least one member)."""
        what = _noun(kinds)

        def change(record: dict[str, Any]) -> list[str] | None:
            replicas = [str(n) for n in record.get("replicas", ())]
            leader = str(record.get("leader"))
            if node == leader:
                raise Conflict(
                    f"cluster node '{node}' leads {what} '{name}' in vhost '{vhost}': "
                    f"the leader cannot be removed (delete the {what} instead)"
                )
            if node not in replicas:
                held = "replica" if kinds == STREAMS else "member"
                raise NotFound(
                    f"cluster node '{node}' holds no {held} of {what} '{name}' in vhost '{vhost}'"
                )
            return [n for n in replicas if n != node]

        await self._change(vhost, name, change, kinds)

    async def replace(
        self,
        vhost: str,
        name: str,
        gone: str,
        instead: str | None,
        kinds: tuple[str, ...] = STREAMS,
    ) -> bool:
        """Put ``instead`` (a running node, or nobody) in the place of replica ``gone``
        (a forgotten node: ``cluster/reconcile.py``); False when ``gone`` is no replica."""

        def change(record: dict[str, Any]) -> list[str] | None:
            replicas = [str(n) for n in record.get("replicas", ())]
            if gone not in replicas:
                return None
            if instead is None or instead in replicas or instead == record.get("leader"):
                return [n for n in replicas if n != gone]
            return [instead if n == gone else n for n in replicas]

        return await self._change(vhost, name, change, kinds)

    async def _change(
        self,
        vhost: str,
        name: str,
        change: Callable[[dict[str, Any]], list[str] | None],
        kinds: tuple[str, ...] = STREAMS,
    ) -> bool:
        """Read the record, let ``change`` check it and give the new replica list (None:
        nothing to do), write it by compare-and-swap; True when written."""
        key = queue_key(vhost, name)
        for _ in range(ATTEMPTS):
            try:
                found = await self.client.get(key)
            except (EtcdUnavailable, EtcdError) as error:
                raise InternalError(f"etcd did not answer for stream '{name}': {error}") from error
            record = _stream_record(found.value if found else None, vhost, name, kinds)
            replicas = change(record)
            if replicas is None:
                return False
            updated = {**record, "replicas": replicas}
            try:
                result = await self.client.txn(
                    [mod_revision_is(key, found.mod_revision if found else 0)],
                    [put_op(key, json.dumps(updated))],
                )
            except (EtcdUnavailable, EtcdError) as error:
                raise InternalError(
                    f"etcd did not record the replicas of stream '{name}': {error}"
                ) from error
            if result.succeeded:
                # this node shows the change at once; the watch brings the same record
                self.placement.records[(vhost, name)] = {**updated, "mod_revision": result.revision}
                return True
        raise InternalError(
            f"the record of stream '{name}' in vhost '{vhost}' kept changing: try again"
        )


def _stream_record(
    raw: bytes | None, vhost: str, name: str, kinds: tuple[str, ...] = STREAMS
) -> dict[str, Any]:
    """The record of a stream (a queue of ``kinds``) that exists and is settled; the
    refusals name what is wrong."""
    try:
        record = json.loads(raw) if raw is not None else None
    except ValueError:
        record = None
    what = _noun(kinds)
    if not isinstance(record, dict):
        missing = "stream" if what == "stream" else "queue"
        raise NotFound(f"no {missing} '{name}' in vhost '{vhost}'")
    kind = str(record.get("type", "stream"))
    if kind not in kinds:
        raise BadRequest(not_of_kind(vhost, name, kind, kinds))
    if record.get("delete"):
        raise Conflict(f"{what} '{name}' in vhost '{vhost}' is being deleted")
    if record.get("state", READY) == CREATING:
        raise Conflict(f"{what} '{name}' in vhost '{vhost}' is still being created")
    return {k: v for k, v in record.items() if k != "mod_revision"}


def _noun(kinds: tuple[str, ...]) -> str:
    """What the refusals call a queue of ``kinds``."""
    nouns: dict[tuple[str, ...], str] = {STREAMS: "stream", QUORUM: "quorum queue"}
    return nouns.get(kinds, "queue")


def not_of_kind(vhost: str, name: str, kind: str, kinds: tuple[str, ...]) -> str:
    """The refusal of a change asked for a queue of another type than ``kinds``."""
    of = "a stream" if kind == "stream" else f"a {kind} queue"
    if kinds == QUORUM:
        return f"queue '{name}' in vhost '{vhost}' is {of}: only quorum queues have members"
    hint = " (a quorum queue's members: sievemq queues add_member / delete_member)"
    tail = hint if kind == "quorum" else ""
    return f"queue '{name}' in vhost '{vhost}' is {of}: only streams have replicas{tail}"
