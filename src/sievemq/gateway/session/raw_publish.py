"""Raw forwarding: a client channel whose publishes all go to queues one other node leads.

A cluster node forwards a publish routed to another node's queue (``cluster/forwarding.py``)
after running the client's whole publish path here: the property list checked, the
message routed, then framed again for the link (once per remote queue). For a channel
whose publishes of one (exchange, routing key) route only to queues one other node leads
(``remote_targets``: one, or several), that is work the leader does again or need not be
done at all. Once an ordinary publish on a client channel was routed
so (``enter``), the channel's later publishes with the same basic.publish method bytes, one
content header and one body frame each, go to the leader as they came
(``RawRoute.forward``): no property check, no routing, no message tuple here; the leader
checks each property list, as for its own clients, and stores the message
(``cluster.forwarding.RawForward``, a link channel of the client channel's own): into
the one queue, or routed by its own bindings to its queues (``session.peer.RoutedChannel``,
which nacks a publish it does not route to as many queues as this node found).

Who answers what (docs/cluster.md "Publishing through any node"):

- a malformed property list, filter value or publisher id: the leader, with the reply it
  gives its own clients; the client's channel closes with that code and text
  (``raw_refused``), nothing else does;
- frame structure, an unexpected frame, a body larger than ``max_message_size``, a missing
  or internal exchange, write permission, ``immediate``: this node, as before (those
  publishes never take the raw path: it takes only method bytes an ordinary publish already
  passed, and whole, well-sized messages);
- confirms: the leader's, one run per batch, mapped back to the client's sequence numbers;
  a nack from the leader or a lost link nacks, as for any forwarded publish.

Routing can change (a binding removed, the queue deleted or declared here, its leader moved
by a failover): the route is checked again, once, whenever the connection may have seen a
change since the last check (``Connection.route_stamp``: every read and every cold method
moves it; nothing else runs while a read is handled). When the publish no longer routes to
the same queues alone, the raw route ends and the publish takes the ordinary path, which
routes it anew (and may start a raw route to the new leader). A headers exchange routes by each
message's headers: its publishes take the raw path only when every queue the exchange may
reach is led by one other node, which routes each by its headers (and drops what routes
nowhere: not for ``mandatory`` publishes). A channel in a transaction never takes it.
"""

from __future__ import annotations

import struct
from typing import Any, Final, Protocol

from sievemq.amqp import errors, frames
from sievemq.amqp.frames import Frame
from sievemq.amqp.hotcodec import BASIC_CONTENT_CLASS, CONTENT_HEADER_FIELDS
from sievemq.amqp.methods import BASIC_PUBLISH
from sievemq.amqp.states import ChannelPhase, ChannelState
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.remote import RawPublisher, RemoteQueue
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.vhost import RemoteLookup
from sievemq.gateway.runtime.direct_replies import PSEUDO_BYTES as _REPLY_TO_PSEUDO
from sievemq.gateway.session.confirms import ConfirmTracker
from sievemq.gateway.session.ports import ChannelHost
from sievemq.gateway.session.remote import RelayedError

# a content header's class (60) and weight (0) as clients send it: the weight is the mark a
# forwarding node may set for the leader (``publish_cache.MARK_*``), 0 is "check it"
_CLIENT_CLASS_WEIGHT: Final = BASIC_CONTENT_CLASS + b"\x00\x00"
_MIN_HEADER: Final = CONTENT_HEADER_FIELDS + 2  # + the first property flag word
_BODY_SIZE = struct.Struct(">Q").unpack_from
_FRAME_HEAD = struct.Struct(">BHI").pack  # type, channel, size
_FRAME_METHOD: Final = frames.FRAME_METHOD
_FRAME_HEADER: Final = frames.FRAME_HEADER
_FRAME_BODY: Final = frames.FRAME_BODY
_END: Final = frames.FRAME_END_BYTE
_OPEN: Final = ChannelPhase.OPEN

Publish = tuple[str, str, bool]  # exchange, routing key, mandatory
RAW_TRIES: Final = 8  # ordinary publishes a channel routes again to see if they may go raw


class RawHost(Protocol):
    """The client channel a raw route serves (``session.channel.Channel``)."""

    connection: ChannelHost
    state: ChannelState
    confirm: ConfirmTracker | None
    tx: Any
    raw_route: RawRoute | None
    raw_tried: bytes

    @property
    def id(self) -> int: ...
    @property
    def closing(self) -> bool: ...
    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...
    def close_by_server(self, error: errors.AMQPError) -> None: ...


class RawRoute:
    """A client channel's publishes of one basic.publish (``method``: its bytes) that route
    to one remote queue: passed to its leader as they came (see the module docstring)."""

    __slots__ = (
        "_channel",
        "_connection",
        "_max_size",
        "_queues",
        "_remote",
        "method",
        "pub",
        "publisher",
        "stamp",
    )

    publisher: RawPublisher  # set by ``enter`` once the queue made it (this is its sink)

    def __init__(
        self,
        channel: RawHost,
        method: bytes,
        pub: Publish,
        queues: tuple[RemoteQueue, ...],
        remote: RemoteLookup,
    ) -> None:
        self._channel = channel
        self._connection = channel.connection
        self._max_size = channel.connection.node.limits.max_message_size
        self.method = method
        self.pub = pub
        self._queues = queues
        self._remote = remote
        self.stamp = channel.connection.route_stamp  # the connection's, when last checked

    def forward_run(self, got: list[Frame], i: int, n: int) -> int:
        """HOT PATH: pass on the run of publishes of this route that starts at ``got[i]``
        (a basic.publish with this route's bytes), each a publish, one content header and
        one body frame on the channel, up to the first frame that is anything else; the
        number of publishes taken (0: the ordinary path takes the publish: the route
        changed, a reply-to it rewrites, a body larger than allowed or than one of the
        link's frames, a header the client did not send as clients do)."""
        channel = self._channel
        if channel.state.phase is not _OPEN or (
            self.stamp != self._connection.route_stamp and not self._still_routes()
        ):
            return 0
        method, number, body_max = self.publisher.framing()
        body_max = min(body_max, self._max_size)
        chid = channel.id
        own = self.method
        out: list[bytes] = []
        add = out.extend
        head = _FRAME_HEAD
        size_at = _BODY_SIZE
        count = 0
        while i + 2 < n:
            ftype, mchannel, payload = got[i]
            if ftype != _FRAME_METHOD or mchannel != chid or payload != own:
                break
            htype, hchannel, header = got[i + 1]
            btype, bchannel, body = got[i + 2]
            size = len(body)
            if (
                htype != _FRAME_HEADER
                or btype != _FRAME_BODY
                or hchannel != chid
                or bchannel != chid
                or size > body_max
                or len(header) < _MIN_HEADER
                or header[:4] != _CLIENT_CLASS_WEIGHT
                or size_at(header, 4)[0] != size
                or _REPLY_TO_PSEUDO in header
            ):
                break
            add(
                (
                    method,
                    head(_FRAME_HEADER, number, len(header)),
                    header,
                    _END,
                    head(_FRAME_BODY, number, size),
                    body,
                    _END,
                )
            )
            count += 1
            i += 3
        if count:
            confirm = channel.confirm
            if confirm is None:
                self.publisher.send_run(out, count, False, 0)
            else:
                first = confirm.next_seq
                confirm.next_seq = first + count
                self.publisher.send_run(out, count, True, first)
        return count

    def _still_routes(self) -> bool:
        """The connection may have seen a routing change: does the publish still route to
        the same queues, and only to them? (Else the raw route ends.)"""
        channel = self._channel
        vhost = self._connection.vhost
        if channel.tx is None and not channel.closing and vhost is not None:
            exchange, routing_key, mandatory = self.pub
            targets = remote_targets(vhost, exchange, routing_key, self._remote, mandatory)
            if targets is not None and targets[0] == self._queues:
                self.stamp = self._connection.route_stamp
                return True
        self.end()
        return False

    # ----------------------------------------------------------------- the leader's answers

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        self._channel.settle_confirms(seqs, ok)

    def raw_refused(self, code: int, text: str) -> None:
        """The leader refused a publish: the client's channel closes with its reply (its
        connection, for a connection-level code), as a single node would close it."""
        channel = self._channel
        self.end()
        if channel.closing:
            return
        error = RelayedError(code, text, *BASIC_PUBLISH)
        connection = channel.connection
        if error.closes_connection:
            connection.close(error)
        else:
            channel.close_by_server(error)
        connection.flush()

    def end(self) -> None:
        """No more raw publishes (route changed, channel closed): the link channel closes
        once what went is answered; the channel's next publish routes as usual."""
        channel = self._channel
        if channel.raw_route is self:
            channel.raw_route = None
            channel.raw_tried = b""
        self.method = b""
        self.publisher.retire()


def enter(channel: RawHost, method: bytes, pub: Publish, remote: RemoteLookup) -> RawRoute | None:
    """After an ordinary publish of ``method`` on ``channel``: a raw route for its next ones
    when it routes only to queues one other node leads (None: it does not)."""
    vhost = channel.connection.vhost
    if channel.tx is not None or channel.closing or vhost is None:
        return None
    exchange, routing_key, mandatory = pub
    targets = remote_targets(vhost, exchange, routing_key, remote, mandatory)
    if targets is None:
        return None
    queues, count = targets
    route = RawRoute(channel, method, pub, queues, remote)
    publisher = queues[0].open_raw(route, exchange, routing_key, count)
    if publisher is None:
        return None
    route.publisher = publisher
    return route


class _ByHeaders(Exception):
    """The route asked for the message's headers: it depends on each message."""


def _no_headers() -> dict[str, Any]:
    raise _ByHeaders


def remote_targets(
    vhost: Any, exchange: str, routing_key: str, remote: RemoteLookup, mandatory: bool = False
) -> tuple[tuple[RemoteQueue, ...], int] | None:
    """The queues (exchange, routing key) routes to, whatever the message, when every one of
    them is led by the same other node, and how many (the leader checks it routes to as
    many); None when it routes to a queue here too, to queues of several other nodes, or
    nowhere. A headers exchange routes each message by its headers: when every queue it
    may reach is led by one other node, those queues and 0 (the leader routes each
    message, and drops what routes nowhere, as a single node does: so not ``mandatory``
    publishes, which would need the leader's basic.return)."""
    try:
        queues = vhost.route(exchange, routing_key, _no_headers, remote)
        count = len(queues)
    except _ByHeaders:
        if mandatory:
            return None
        queues = _reachable(vhost, exchange, remote)
        count = 0
    except errors.AMQPError:
        return None
    if not queues:
        return None
    leader = None
    for queue in queues:
        if isinstance(queue, StreamQueue | ClassicQueue):
            return None
        if leader is None:
            leader = queue.leader
        elif queue.leader != leader:
            return None
    return tuple(queues), count


def _reachable(vhost: Any, exchange: str, remote: RemoteLookup) -> list[Any]:
    """Every queue, here or led elsewhere, that a publish to ``exchange`` may reach (names
    that are nowhere are left out: the leader leaves them out too)."""
    out: list[Any] = []
    for name in sorted(vhost.reachable_queues(exchange)):
        queue = vhost.queues.get(name) or vhost.classic.queues.get(name) or remote(name)
        if queue is not None:
            out.append(queue)
    return out
