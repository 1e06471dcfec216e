"""One stream-protocol connection: handshake, commands, publishers, subscriptions.

Driven by ``gateway.net.stream_protocol`` (frames in, bytes out through ``transport``).
Errors in a command become its response code; a frame that cannot be parsed closes the
connection with Close(13); nothing a client sends raises out of ``on_frames``.
Cleanup (publishers, subscriptions, listeners) runs on TCP EOF as well as after Close:
rstream never sends Close.
The super-stream commands are ``super_stream_commands``; which node leads a stream and
which hold its replicas (Metadata, code 6, Delete through the leader) is ``cluster``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sievemq.amqp.errors import AccessRefused, AMQPError, NotAllowed
from sievemq.gateway.model.directory import place_elsewhere
from sievemq.gateway.model.stream import super_streams
from sievemq.gateway.model.users import CLUSTER_USER_PREFIX, Permission, User, cluster_user
from sievemq.gateway.runtime import descriptors
from sievemq.gateway.runtime.definitions_sync import failure_text, when_synced
from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.gateway.session import access
from sievemq.gateway.streamproto_session import cluster, super_stream_commands
from sievemq.gateway.streamproto_session.node import SERVER_PROPERTIES, StreamNode
from sievemq.gateway.streamproto_session.publisher import StreamPublisher
from sievemq.gateway.streamproto_session.subscription import Subscription, WholeChunks, seek
from sievemq.gateway.streamproto_session.tracking import SideFileShipping
from sievemq.storage import FilterSpec, StorageError
from sievemq.streamproto import osiris, wire
from sievemq.streamproto.wire import Cursor, FrameError

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue
    from sievemq.gateway.model.vhost import VirtualHost

log = logging.getLogger(__name__)

# RabbitMQ's publisher flow control (rabbit_stream_reader ``initial_credits``,
# ``credits_required_for_unblocking``): each published message takes a credit, each confirm
# (or error) gives it back once it has left for the socket; at 0 the socket is no longer
# read, until more than 12,500 are back
PUBLISH_CREDITS = 50_000
CREDITS_TO_UNBLOCK = 12_500
DRAIN_POLL_S = 0.005  # how often parked credits look whether the write buffer emptied
MAX_REFERENCE_BYTES = 255

# Create arguments -> queue arguments (RabbitMQ's rabbit_stream_manager); others are ignored
_CREATE_ARGUMENTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "max-length-bytes": ("x-max-length-bytes", int),
    "max-age": ("x-max-age", str),
    "stream-max-segment-size-bytes": ("x-stream-max-segment-size-bytes", int),
    "stream-filter-size-bytes": ("x-stream-filter-size-bytes", int),
    "initial-cluster-size": ("x-initial-cluster-size", int),
    "queue-leader-locator": ("x-queue-leader-locator", str),
}

_PRE_OPEN = {
    wire.PEER_PROPERTIES,
    wire.SASL_HANDSHAKE,
    wire.SASL_AUTHENTICATE,
    wire.TUNE,
    wire.OPEN,
    wire.HEARTBEAT,
    wire.CLOSE,
    wire.CLOSE | wire.RESPONSE,
    wire.TUNE | wire.RESPONSE,
}


class StreamConnection:
    """The state of one client connection."""

    def __init__(self, snode: StreamNode, tls: bool = False) -> None:
        self.snode = snode
        self._held: list[bytes] | None = None
        # Open and Metadata advertise the listener this client came through
        self.tls = tls
        self.node = snode.node
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.peer_port = 0
        self.alive = False
        self.writing_paused = False
        self.user: User | None = None
        self.trusted = False  # another cluster node's replica (``cluster_user``)
        self.vhost: VirtualHost | None = None
        self.client_properties: dict[str, str] = {}
        self.frame_max = snode.frame_max
        self.heartbeat = snode.heartbeat
        self.max_chunk_bytes = self._chunk_budget(self.frame_max)
        self.deliver_version = 1
        self.publishers: dict[int, StreamPublisher] = {}
        self.subscriptions: dict[int, Subscription] = {}
        self._watched: dict[int, StreamQueue] = {}
        self._received = False
        self._sent = False
        # frames received while a command waits for a load (``_await_sequences``), else None
        self._waiting: list[wire.Frame] | None = None
        self._current = wire.Frame(0, 0, b"")  # the command being handled
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._missed = 0
        self.read_control: Any = None  # the protocol: stop_reading(), hold_reading()
        self.id = 0
        self.connected_at = 0.0
        self._admitted = False
        self.blocked = False  # a resource alarm holds this publishing connection
        self.publish_credits = PUBLISH_CREDITS
        self.credit_blocked = False  # out of publish credit: the socket is not read
        self._parked_credits = 0  # confirms still in the write buffer
        self._drain_handle: asyncio.TimerHandle | None = None

    @staticmethod
    def _chunk_budget(frame_max: int) -> int:
        if frame_max <= 0:
            return 8 * 1024 * 1024
        return max(1, frame_max - osiris.FRAME_OVERHEAD_V2 - osiris.HEADER_SIZE)

    # ------------------------------------------------------------------ transport events

    def on_open(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        if not self.node.admit():
            # over max_connections (AMQP and stream connections count together), or
            # shutting down: the peer sees the socket close before any frame
            transport.abort()
            return
        self._admitted = True
        peer = transport.get_extra_info("peername")
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.peer_port = int(peer[1]) if isinstance(peer, tuple) and len(peer) > 1 else 0
        self.id = self.node.next_id()
        self.connected_at = time.time()
        self.alive = True
        self.snode.connections.add(self)

    def on_lost(self) -> None:
        """TCP EOF or reset: drop every publisher and subscription (no Close needed)."""
        self.alive = False
        self.node.note_gone(self)
        if self._admitted:
            self._admitted = False
            self.node.release()
        self.snode.connections.discard(self)
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        if self._drain_handle is not None:
            self._drain_handle.cancel()
            self._drain_handle = None
        for sub in list(self.subscriptions.values()):
            sub.stop()
        self.subscriptions.clear()
        self.publishers.clear()
        for queue in self._watched.values():
            queue.remove_delete_listener(self._queue_deleted)
        self._watched.clear()

    def on_pause_writing(self) -> None:
        self.writing_paused = True

    def on_resume_writing(self) -> None:
        self.writing_paused = False
        for sub in list(self.subscriptions.values()):
            sub.wake()

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)  # a definitions change's response waits for its sync
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)
            self._sent = True

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Write these buffers in order (a turn's Deliver frames: heads and stored chunk
        data): the protocol sends them without joining them first where it can."""
        control = self.read_control
        if self._held is not None or control is None:
            self.write(b"".join(parts))
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            control.write_parts(parts)
            self._sent = True

    def close(self, code: int, reason: str) -> None:
        """Server-initiated Close; the transport closes after the client's answer or EOF."""
        if not self.alive:
            return
        self.write(wire.close_request(0, code, reason))
        self.alive = False
        if self.transport is not None:
            self.node.loop.call_later(1.0, self._abort)

    def _abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def stop_reading(self) -> None:
        if self.read_control is not None:
            self.read_control.stop_reading()

    def abort(self) -> None:
        """Drop the TCP connection now (the admin API's close; clients see it broken)."""
        if self.transport is not None:
            self.transport.abort()

    def apply_alarms(self, reasons: tuple[str, ...]) -> None:
        """A memory or disk alarm: like RabbitMQ's stream reader, stop reading the socket of
        a connection that has publishers (its Publish frames wait in TCP) until it clears."""
        blocked = bool(reasons) and bool(self.publishers)
        if blocked != self.blocked:
            self.blocked = blocked
            if self.read_control is not None:
                self.read_control.hold_reading(blocked)

    def take_publish_credits(self, n: int) -> None:
        """``n`` messages went to the appender: at 0 credits stop reading the socket (the
        frames already read are still handled, so the count may go below 0, as RabbitMQ's)."""
        self.publish_credits -= n
        if self.publish_credits <= 0 and not self.credit_blocked:
            self.credit_blocked = True
            if self.read_control is not None:
                self.read_control.hold_for_credit(True)

    def return_publish_credits(self, n: int) -> None:
        """``n`` messages were confirmed (or failed) and their frame written. The credits
        come back once that frame has left the write buffer: RabbitMQ's reader sends its
        confirms synchronously, so a client that does not read them holds its publisher."""
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size() > 0:
            self._parked_credits += n
            if self._drain_handle is None:
                self._drain_handle = self.node.loop.call_later(DRAIN_POLL_S, self._drained)
            return
        self._give_back(n)

    def _drained(self) -> None:
        self._drain_handle = None
        transport = self.transport
        if not self.alive or transport is None:
            return
        if transport.get_write_buffer_size() > 0:
            self._drain_handle = self.node.loop.call_later(DRAIN_POLL_S, self._drained)
            return
        parked, self._parked_credits = self._parked_credits, 0
        self._give_back(parked)

    def _give_back(self, n: int) -> None:
        self.publish_credits += n
        if self.credit_blocked and self.publish_credits > CREDITS_TO_UNBLOCK:
            self.credit_blocked = False
            if self.read_control is not None:
                self.read_control.hold_for_credit(False)

    def on_frame_too_large(self, size: int) -> None:
        self.close(wire.FRAME_TOO_LARGE, f"frame of {size} bytes is larger than {self.frame_max}")

    # ------------------------------------------------------------------ dispatch

    def on_frames(self, frames: list[wire.Frame]) -> None:
        self._received = True
        if self._waiting is not None:  # a command waits for a load: the rest after it
            self._waiting.extend(frames)
            return
        for i, (key, version, body) in enumerate(frames):
            if not self.alive:
                return
            try:
                self._dispatch(key, version, body)
            except FrameError as error:
                self.close(wire.UNKNOWN_FRAME, f"unknown frame: {error}")
            except Exception as error:  # a bug must cost one connection, never the server
                if descriptors.is_exhausted(error):  # not a bug: logged without a traceback
                    log.warning("stream connection: %s", descriptors.exhausted_text(error))
                    descriptors.exhausted_error(error)  # gives idle storage descriptors back
                else:
                    log.exception("stream connection: command %d failed", key)
                self.close(wire.INTERNAL_ERROR, "internal error")
            if self._waiting is not None:
                self._waiting.extend(frames[i + 1 :])
                return

    def _await_sequences(self, queue: StreamQueue) -> bool:
        """False when the queue's publisher sequences are loaded. Else (a stream with no
        snapshot after a crash is scanned whole) they load in a worker thread, and the
        command being handled (DeclarePublisher, QueryPublisherSequence) is handled again
        once they are, then the frames this connection sent after it, in order: its
        reading stops meanwhile; other connections go on."""
        if queue.current_sequences() is not None:
            return False
        frame = self._current
        self._waiting = []
        control = self.read_control
        if control is not None:
            control.hold_for_load(True)

        def loaded(future: asyncio.Future[None]) -> None:
            waiting, self._waiting = self._waiting or [], None
            if control is not None:
                control.hold_for_load(False)
            if not self.alive:
                return
            error = future.exception()
            if error is not None and not queue.deleted:
                log.error("publisher sequences of %s failed to load: %s", queue.name, error)
                self.close(
                    wire.INTERNAL_ERROR,
                    f"cannot read the publisher sequences of stream {queue.name} "
                    f"({type(error).__name__}: {error})",
                )
                return
            self.on_frames([frame, *waiting])

        self.snode.load_sequences(queue).add_done_callback(loaded)
        return True

    def _dispatch(self, key: int, version: int, body: bytes) -> None:
        if key == wire.PUBLISH:
            self._publish(body, version)
            return
        if key == wire.CREDIT:
            self._credit(body)
            return
        if self.vhost is None and key not in _PRE_OPEN:
            self.close(wire.UNKNOWN_FRAME, f"command {key} before open")
            return
        handler = _HANDLERS.get(key)
        if handler is None:
            self.close(wire.UNKNOWN_FRAME, f"unknown frame: key {key} version {version}")
            return
        self._current = wire.Frame(key, version, body)  # (a handler that waits replays it)
        if key in _DEFINITION_CHANGES:
            self._durably(handler, Cursor(body))
            return
        handler(self, Cursor(body))

    def _durably(self, handler: Callable[[StreamConnection, Cursor], None], cur: Cursor) -> None:
        """Create/Delete (super) stream: the change is applied and its definitions.log line
        written at once, but the response waits until the fdatasync, run in a worker thread
        and shared with every change made meanwhile, has it on disk; the loop and this
        connection's other commands go on (responses carry their correlation id). A failed
        fdatasync closes the connection and never answers the change as done."""
        definitions = self.node.definitions_sync
        began = definitions.begin()
        held: list[bytes] = []
        self._held = held
        try:
            handler(self, cur)
        finally:
            self._held = None
            pending = definitions.end(began)
        if pending is None:
            for data in held:
                self.write(data)
            return

        def synced(error: BaseException | None) -> None:
            if error is not None:
                log.error("definitions.log fdatasync failed: %s", error)
                self.close(
                    wire.INTERNAL_ERROR,
                    failure_text(error),
                )
                return
            for data in held:
                self.write(data)

        when_synced(pending, synced)

    @property
    def _port(self) -> int:
        return self.snode.advertised_tls_port if self.tls else self.snode.advertised_port

    # ------------------------------------------------------------------ handshake

    def _peer_properties(self, cur: Cursor) -> None:
        corr = cur.u32()
        self.client_properties = cur.properties()
        self.write(wire.peer_properties_response(corr, SERVER_PROPERTIES))

    def _sasl_handshake(self, cur: Cursor) -> None:
        corr = cur.u32()
        self.write(wire.sasl_handshake_response(corr, ["PLAIN"]))

    def _sasl_authenticate(self, cur: Cursor) -> None:
        corr = cur.u32()
        mechanism = cur.string()
        data = cur.bytes_()
        if mechanism != "PLAIN":
            self.write(
                wire.response(wire.SASL_AUTHENTICATE, corr, wire.SASL_MECHANISM_NOT_SUPPORTED)
            )
            return
        parts = data.split(b"\x00")
        if len(parts) != 3:
            self.write(wire.response(wire.SASL_AUTHENTICATE, corr, wire.SASL_ERROR))
            return
        try:
            username, password = parts[1].decode(), parts[2].decode()
        except UnicodeDecodeError:
            self.write(wire.response(wire.SASL_AUTHENTICATE, corr, wire.SASL_ERROR))
            return
        user = cluster_user(username, password, self.snode.cluster_secret())
        trusted = user is not None and self.user is None
        if user is None:
            user = self.node.broker.authenticate(username, password)
        if user is None:
            self.write(wire.response(wire.SASL_AUTHENTICATE, corr, wire.AUTHENTICATION_FAILURE))
            self.close(wire.AUTHENTICATION_FAILURE, "authentication failure")
            return
        if not user.may_connect_from(self.peer_host):
            code = wire.AUTHENTICATION_FAILURE_LOOPBACK
            self.write(wire.response(wire.SASL_AUTHENTICATE, corr, code))
            self.close(code, f"user '{username}' can only connect via localhost")
            return
        if self.user is not None:  # re-authentication after open: same user only
            if user.name != self.user.name:
                self.write(wire.response(wire.SASL_AUTHENTICATE, corr, 21))
                return
            self.user = user
            self.write(wire.response(wire.SASL_AUTHENTICATE, corr, wire.OK))
            return
        self.user = user
        self.trusted = trusted
        self.write(wire.response(wire.SASL_AUTHENTICATE, corr, wire.OK))
        self.write(wire.tune(self.snode.frame_max, self.snode.heartbeat))

    def _tune(self, cur: Cursor) -> None:
        frame_max = cur.u32()
        heartbeat = cur.u32()
        server_max = self.snode.frame_max
        self.frame_max = min(frame_max, server_max) if frame_max else server_max
        self.max_chunk_bytes = self._chunk_budget(self.frame_max)
        self.heartbeat = heartbeat
        if heartbeat and self._heartbeat_handle is None:
            self._heartbeat_handle = self.node.loop.call_later(heartbeat, self._beat)

    def _open(self, cur: Cursor) -> None:
        corr = cur.u32()
        name = cur.string()
        if self.user is None:
            self.write(wire.open_response(corr, wire.VIRTUAL_HOST_ACCESS_FAILURE, {}))
            return
        if self.trusted:
            # another node's replica copies what etcd names it, in any vhost (as the link)
            self.user.permissions[name] = Permission()
        try:
            self.vhost = self.node.broker.open_vhost(self.user, name)
        except NotAllowed:
            self.write(wire.open_response(corr, wire.VIRTUAL_HOST_ACCESS_FAILURE, {}))
            self.close(wire.VIRTUAL_HOST_ACCESS_FAILURE, f"access to vhost '{name}' refused")
            return
        refusal = None if self.trusted else self.node.connection_refusal(self.vhost, self.user.name)
        if refusal is not None:
            # the vhost or user max-connections, counted over both protocols: refused as
            # RabbitMQ's stream plugin refuses an Open (12), with the AMQP refusal's text
            log.warning("stream connection from %s refused: %s", self.peer_host, refusal)
            self.vhost = None
            self.write(wire.open_response(corr, wire.VIRTUAL_HOST_ACCESS_FAILURE, {}))
            self.close(wire.VIRTUAL_HOST_ACCESS_FAILURE, refusal)
            return
        if not self.trusted:  # another node's replica counts against no limit
            self.node.note_opened(self, name, self.user.name)
        props = {
            "advertised_host": self.snode.advertised_host,
            "advertised_port": str(self._port),
        }
        self.write(wire.open_response(corr, wire.OK, props))

    def _heartbeat(self, cur: Cursor) -> None:
        return  # receiving anything counts (``_received``)

    def _close(self, cur: Cursor) -> None:
        corr = cur.u32()
        self.write(wire.response(wire.CLOSE, corr, wire.OK))
        self.alive = False
        if self.transport is not None:
            self.transport.close()

    def _close_ok(self, cur: Cursor) -> None:
        if self.transport is not None:
            self.transport.close()

    def _beat(self) -> None:
        """Every interval: a heartbeat when we were silent; drop a peer silent for two."""
        self._heartbeat_handle = None
        if not self.alive or self.transport is None:
            return
        if self._received or self.writing_paused or self.credit_blocked or self.blocked:
            self._received = False
            self._missed = 0
        else:
            self._missed += 1
            if self._missed >= 2:
                log.info("stream connection from %s: missed heartbeats, closing", self.peer_host)
                self.transport.abort()
                return
        if not self._sent:
            self.write(wire.heartbeat())
        self._sent = False
        self._heartbeat_handle = self.node.loop.call_later(self.heartbeat, self._beat)

    # ------------------------------------------------------------------ streams

    def may(self, kind: str, stream: str, resource: str = "queue") -> bool:
        """RabbitMQ's stream plugin rules (``rabbit_stream_utils:check_*_permitted``):
        Create and Delete need configure on the stream, DeclarePublisher and Publish write,
        Subscribe, QueryOffset, StoreOffset, QueryPublisherSequence and StreamStats read.
        A refusal answers 16 (access refused); StoreOffset has no answer."""
        assert self.vhost is not None and self.user is not None
        # the user's permissions now (an HTTP change reaches open connections, as
        # RabbitMQ's live lookup does); a deleted user may do nothing
        live = self.user if self.trusted else self.node.broker.users.get(self.user.name)
        try:
            access.check(live, self.vhost.name, kind, resource, stream)
        except AccessRefused:
            return False
        return True

    def _readable(
        self, name: str, answer: Callable[[int], bytes], replica: bool = False
    ) -> StreamQueue | None:
        """The stream a read-side query names, or None after answering ``answer(code)``:
        16 without read permission, 2 when there is no such stream (6 when another cluster
        node leads it; with ``replica``, this node's replica of it answers)."""
        if not self.may("read", name):
            self.write(answer(wire.ACCESS_REFUSED))
            return None
        queue = self._queue(name) or (self._replica(name) if replica else None)
        if queue is None:
            self.write(answer(self._missing_code(name)))
        return queue

    def _queue(self, name: str) -> StreamQueue | None:
        assert self.vhost is not None
        return self.vhost.queues.get(name)

    def _replica(self, name: str) -> StreamQueue | None:
        """This node's replica of stream ``name`` (``cluster.replica``)."""
        assert self.vhost is not None
        return cluster.replica(self.node.broker.directory, self.vhost.name, name)

    def _led_elsewhere(self, name: str) -> str | None:
        """The cluster node that leads stream ``name`` when it is another one, else None."""
        assert self.vhost is not None
        return cluster.led_elsewhere(self.node.broker.directory, self.vhost.name, name)

    def _missing_code(self, name: str) -> int:
        """6 when another cluster node leads the stream, else 2 (``cluster.missing_code``)."""
        assert self.vhost is not None
        return cluster.missing_code(self.node.broker.directory, self.vhost.name, name)

    def _watch(self, queue: StreamQueue) -> None:
        if id(queue) not in self._watched:
            self._watched[id(queue)] = queue
            queue.add_delete_listener(self._queue_deleted)

    def _queue_deleted(self, queue: StreamQueue) -> None:
        """Any connection (or the admin API) deleted a stream we use: MetadataUpdate(6)."""
        self._watched.pop(id(queue), None)
        lost = False
        for pid, pub in list(self.publishers.items()):
            if pub.queue is queue:
                del self.publishers[pid]
                lost = True
        for sid, sub in list(self.subscriptions.items()):
            if sub.queue is queue:
                sub.stop()
                del self.subscriptions[sid]
                lost = True
        if lost and self.alive:
            self.write(wire.metadata_update(wire.STREAM_NOT_AVAILABLE, queue.name))

    def _create(self, cur: Cursor) -> None:
        corr = cur.u32()
        name = cur.string()
        args = cur.properties()
        assert self.vhost is not None
        try:
            arguments = self.queue_arguments(args)
        except ValueError:
            self.write(wire.response(wire.CREATE, corr, wire.PRECONDITION_FAILED))
            return
        if not name or name.startswith("amq.") or len(name.encode()) > 255:
            self.write(wire.response(wire.CREATE, corr, wire.PRECONDITION_FAILED))
            return
        if not self.may("configure", name):
            self.write(wire.response(wire.CREATE, corr, wire.ACCESS_REFUSED))
            return
        existing = self.vhost.queues.get(name)
        directory = self.node.broker.directory
        refused = (
            cluster.create_refused(directory, self.vhost.name, name) if existing is None else None
        )
        if refused is not None:  # another cluster node leads it
            self.write(wire.response(wire.CREATE, corr, refused))
            return
        try:
            elsewhere = place_elsewhere(directory, self.vhost, name, True, False, arguments)
            if elsewhere is not None:  # another node makes it: the answer waits for it
                self.node.definitions_sync.also_wait(elsewhere)
                self.write(wire.response(wire.CREATE, corr, wire.OK))
                return
            self.vhost.declare_queue(name, durable=True, arguments=arguments)
        except AMQPError:
            self.write(wire.response(wire.CREATE, corr, wire.PRECONDITION_FAILED))
            return
        except (StorageError, OSError) as error:
            log.error("create stream %s failed: %s", name, error)
            self.write(wire.response(wire.CREATE, corr, wire.INTERNAL_ERROR))
            return
        code = wire.STREAM_ALREADY_EXISTS if existing is not None else wire.OK
        self.write(wire.response(wire.CREATE, corr, code))

    def _delete(self, cur: Cursor) -> None:
        corr = cur.u32()
        name = cur.string()
        assert self.vhost is not None
        if not self.may("configure", name):
            self.write(wire.response(wire.DELETE, corr, wire.ACCESS_REFUSED))
            return
        if name not in self.vhost.queues:
            if self._led_elsewhere(name) is not None:
                self._delete_elsewhere(corr, name)
                return
            self.write(wire.response(wire.DELETE, corr, wire.STREAM_DOES_NOT_EXIST))
            return
        try:
            self.vhost.delete_queue(name)
        except AMQPError:
            self.write(wire.response(wire.DELETE, corr, wire.ACCESS_REFUSED))
            return
        self.write(wire.response(wire.DELETE, corr, wire.OK))

    def _delete_elsewhere(self, corr: int, name: str) -> None:
        """Delete a stream another node leads (``cluster.delete_elsewhere``): the answer
        comes once its record is gone."""
        directory = self.node.broker.directory
        assert directory is not None and self.vhost is not None

        def answer(code: int) -> None:
            if self.alive:
                self.write(wire.response(wire.DELETE, corr, code))

        cluster.delete_elsewhere(directory, self.vhost.name, name, answer)

    def _metadata(self, cur: Cursor) -> None:
        """Each stream's leader and replicas, as RabbitMQ answers on any node of a cluster
        (``cluster.metadata``)."""
        corr = cur.u32()
        names = cur.strings()
        assert self.vhost is not None
        brokers, items = cluster.metadata(
            self.node.broker.directory,
            self.vhost.name,
            names,
            self.vhost.queues.__contains__,
            (self.snode.advertised_host, self._port),
            self.tls,
        )
        self.write(wire.metadata_response(corr, brokers, items))

    def _stream_stats(self, cur: Cursor) -> None:
        corr = cur.u32()
        name = cur.string()
        if not self.may("read", name):
            self.write(wire.stream_stats_response(corr, wire.ACCESS_REFUSED, {}))
            return
        queue = self._queue(name) or self._replica(name)
        if queue is None:
            self.write(wire.stream_stats_response(corr, wire.STREAM_DOES_NOT_EXIST, {}))
            return
        stream = queue.stream
        # what is committed (a replicated stream's leader: held by a majority)
        if stream.committed_offset <= stream.first_offset:
            stats = {
                "first_chunk_id": -1,
                "committed_chunk_id": -1,
                "last_chunk_id": -1,
                "committed_offset": -1,
            }
        else:
            reader = stream.reader()
            try:
                reader.seek_last()
                last_chunk = reader.position
                reader.seek_first()
                first_chunk = reader.position
            finally:
                reader.close()
            stats = {
                "first_chunk_id": first_chunk,
                "committed_chunk_id": last_chunk,
                "last_chunk_id": last_chunk,
                "committed_offset": stream.committed_offset - 1,
            }
        self.write(wire.stream_stats_response(corr, wire.OK, stats))

    def queue_arguments(self, args: dict[str, str]) -> dict[str, Any]:
        """Create arguments -> queue arguments (ValueError for a bad number)."""
        arguments: dict[str, Any] = {"x-queue-type": "stream"}
        for key, value in args.items():
            mapped = _CREATE_ARGUMENTS.get(key)
            if mapped is not None:
                arguments[mapped[0]] = mapped[1](value)
        return arguments

    def _exchange_command_versions(self, cur: Cursor) -> None:
        corr = cur.u32()
        client = wire.parse_command_versions(cur) if cur.remaining else []
        if any(key == wire.DELIVER and hi >= 2 for key, _, hi in client):
            self.deliver_version = 2  # RabbitMQ: Deliver v2 for clients that list it
        self.write(wire.exchange_command_versions_response(corr))

    def _resolve_offset_spec(self, cur: Cursor) -> None:
        """RabbitMQ 4.3's ResolveOffsetSpec: the offset a Subscribe with this specification
        would start at. The properties (filters) are read and do not change the answer."""
        corr = cur.u32()
        name = cur.string()
        offset = wire.parse_offset_spec(cur)
        cur.properties()
        queue = self._readable(
            name, lambda c: wire.resolve_offset_spec_response(corr, c, 0), replica=True
        )
        if queue is None:
            return
        try:
            reader = queue.stream.reader()
            try:
                seek(reader, offset)
                resolved = reader.position
            finally:
                reader.close()
        except (StorageError, OSError) as error:
            log.error("resolve offset spec on %s failed: %s", name, error)
            self.write(wire.resolve_offset_spec_response(corr, wire.NO_OFFSET, 0))
            return
        self.write(wire.resolve_offset_spec_response(corr, wire.OK, resolved))

    # ------------------------------------------------------------------ publishing

    def _declare_publisher(self, cur: Cursor) -> None:
        corr = cur.u32()
        pid = cur.u8()
        reference = cur.string()
        name = cur.string()
        if not self.may("write", name):
            self.write(wire.response(wire.DECLARE_PUBLISHER, corr, wire.ACCESS_REFUSED))
            return
        queue = self._queue(name)
        if queue is None:
            self.write(wire.response(wire.DECLARE_PUBLISHER, corr, self._missing_code(name)))
            return
        clash = pid in self.publishers or (
            reference != ""
            and any(p.reference == reference and p.queue is queue for p in self.publishers.values())
        )
        if clash or len(reference.encode()) > MAX_REFERENCE_BYTES:
            self.write(wire.response(wire.DECLARE_PUBLISHER, corr, wire.PRECONDITION_FAILED))
            return
        if reference and self._await_sequences(queue):
            return  # handled again once the sequences are loaded
        sequences = self.snode.sequences(queue) if reference else None
        appender = self.node.appender(queue)
        assert isinstance(appender, StreamAppender)  # vhost.queues holds stream queues only
        self.publishers[pid] = StreamPublisher(
            self, pid, reference, queue, appender, sequences, self.node.broker.counters
        )
        self._watch(queue)
        self.write(wire.response(wire.DECLARE_PUBLISHER, corr, wire.OK))
        if self.node.alarm_reasons:
            self.apply_alarms(self.node.alarm_reasons)  # a publisher now: held like the others

    def _publish(self, body: bytes, version: int) -> None:
        if self.vhost is None:
            self.close(wire.UNKNOWN_FRAME, "publish before open")
            return
        if version not in (1, 2):
            raise FrameError(f"Publish version {version}")
        if not body:
            raise FrameError("empty Publish frame")
        pub = self.publishers.get(body[0])
        if pub is None or not self.may("write", pub.queue.name):
            # permissions may change after declare
            pid, entries = wire.parse_publish(body, version)
            code = wire.PUBLISHER_DOES_NOT_EXIST if pub is None else wire.ACCESS_REFUSED
            if pub is not None:
                pub.errored += len(entries)
            self.write(wire.publish_error(pid, [(e.publishing_id, code) for e in entries]))
            return
        pub.publish_frame(body, version)

    def _query_publisher_sequence(self, cur: Cursor) -> None:
        corr = cur.u32()
        reference = cur.string()
        name = cur.string()
        queue = self._readable(
            name, lambda c: wire.query_publisher_sequence_response(corr, c, 0), replica=True
        )
        if queue is None:
            return
        if reference and self._await_sequences(queue):
            return  # handled again once the sequences are loaded
        stored = self.snode.sequences(queue).get(reference) if reference else None
        self.write(wire.query_publisher_sequence_response(corr, wire.OK, stored or 0))

    def _delete_publisher(self, cur: Cursor) -> None:
        corr = cur.u32()
        pid = cur.u8()
        code = wire.PUBLISHER_DOES_NOT_EXIST if self.publishers.pop(pid, None) is None else wire.OK
        self.write(wire.response(wire.DELETE_PUBLISHER, corr, code))

    # ------------------------------------------------------------------ consuming

    def _subscribe(self, cur: Cursor) -> None:
        corr = cur.u32()
        sid = cur.u8()
        name = cur.string()
        queue = self._queue(name) or self._replica(name)
        offset = wire.parse_offset_spec(cur)
        credit = cur.u16()
        props = cur.properties()
        if not self.may("read", name):
            self.write(wire.response(wire.SUBSCRIBE, corr, wire.ACCESS_REFUSED))
            return
        if queue is None:
            self.write(wire.response(wire.SUBSCRIBE, corr, self._missing_code(name)))
            return
        if sid in self.subscriptions:
            code = wire.SUBSCRIPTION_ID_ALREADY_EXISTS
            self.write(wire.response(wire.SUBSCRIBE, corr, code))
            return
        single_active = props.get("single-active-consumer") == "true"
        group_name = props.get("name", "")
        if single_active and (not group_name or len(group_name.encode()) > MAX_REFERENCE_BYTES):
            # RabbitMQ: a single active consumer needs a name of at most 255 bytes
            self.write(wire.response(wire.SUBSCRIBE, corr, wire.PRECONDITION_FAILED))
            return
        values = tuple(v for k, v in props.items() if k.startswith("filter."))
        stored = props.get("sievemq-stored-chunks") == "true"
        spec = None
        if values:
            unfiltered = props.get("match-unfiltered") == "true"
            whole = props.get("sievemq-whole-chunks") == "true" or stored
            spec = (WholeChunks if whole else FilterSpec)(values, match_unfiltered=unfiltered)
        # another node's replica (its cluster login only): chunks as stored, and what is not
        # committed yet (its acknowledgements are what commits it)
        verbatim = self.trusted and props.get("sievemq-replica") == "true"
        reader = queue.stream.reader(tail=verbatim)
        try:
            seek(reader, offset)
        except (StorageError, OSError) as error:
            reader.close()
            log.error("subscribe to %s failed: %s", queue.name, error)
            self.write(wire.response(wire.SUBSCRIBE, corr, wire.INTERNAL_ERROR))
            return
        sub = Subscription(self, sid, queue, reader, credit, spec, offset, stored, verbatim)
        sub.properties = props
        self.subscriptions[sid] = sub
        self._watch(queue)
        self.write(wire.response(wire.SUBSCRIBE, corr, wire.OK))
        if verbatim and self.trusted:  # another node's replica: the side files follow too
            sub.tracking = SideFileShipping(self, queue.stream)
        if single_active:
            assert self.vhost is not None
            super_stream = props.get("super-stream", "")
            index = (
                super_streams.partition_index(self.vhost, super_stream, queue.name)
                if super_stream
                else -1
            )
            # held until the group activates it (ConsumerUpdate answered)
            self.snode.sac.register(self, sub, (self.vhost.name, queue.name, group_name), index)
        sub.start()

    def _replica_holds(self, cur: Cursor) -> None:
        """A replica's acknowledgement of what its copy holds (``wire.REPLICA_HOLDS``): the
        cluster's commit by majority takes it. Only another cluster node may send it."""
        sid = cur.u8()
        epoch = cur.u64()
        offset = cur.u64()
        sub = self.subscriptions.get(sid)
        directory = self.node.broker.directory
        if not self.trusted or self.user is None or sub is None or not sub.verbatim:
            self.close(wire.UNKNOWN_FRAME, f"unknown frame: key {wire.REPLICA_HOLDS}")
            return
        if directory is not None and self.vhost is not None:
            node = self.user.name.removeprefix(CLUSTER_USER_PREFIX)
            directory.replica_holds(self.vhost.name, sub.queue.name, node, epoch, offset)

    def _consumer_update_reply(self, cur: Cursor) -> None:
        self.snode.sac.on_reply(self, wire.parse_consumer_update_reply(cur.data))

    def _credit(self, body: bytes) -> None:
        cur = Cursor(body)
        sid = cur.u8()
        credit = cur.i16()
        sub = self.subscriptions.get(sid)
        if sub is None:
            self.write(wire.credit_error(wire.SUBSCRIPTION_ID_DOES_NOT_EXIST, sid))
            return
        if credit > 0:
            sub.add_credit(credit)

    def _unsubscribe(self, cur: Cursor) -> None:
        corr = cur.u32()
        sid = cur.u8()
        sub = self.subscriptions.pop(sid, None)
        if sub is None:
            code = wire.SUBSCRIPTION_ID_DOES_NOT_EXIST
            self.write(wire.response(wire.UNSUBSCRIBE, corr, code))
            return
        sub.stop()
        self.write(wire.response(wire.UNSUBSCRIBE, corr, wire.OK))

    def drop_subscription(self, sub: Subscription, notify: bool) -> None:
        """A subscription that cannot go on (read error): stop it, tell the client."""
        sub.stop()
        if self.subscriptions.get(sub.subscription_id) is sub:
            del self.subscriptions[sub.subscription_id]
        if notify:
            self.write(wire.metadata_update(wire.STREAM_NOT_AVAILABLE, sub.queue.name))

    def _store_offset(self, cur: Cursor) -> None:
        reference = cur.string()
        name = cur.string()
        offset = cur.u64()
        queue = self._queue(name) or self._replica(name)
        if queue is None or not reference or len(reference.encode()) > MAX_REFERENCE_BYTES:
            return  # StoreOffset has no reply, even on error (as RabbitMQ)
        if not self.may("read", name):
            return
        if queue.leader_of_copy is not None:  # a replica: the leader stores it, ships it back
            if not queue.leader_of_copy.store_offset(reference, offset):
                log.info("store offset %s on %s: its leader is not reached", reference, name)
            return
        try:
            queue.stream.offsets.set(reference, offset)
        except (StorageError, OSError, ValueError) as error:
            log.error("store offset %s on %s failed: %s", reference, queue.name, error)

    def _query_offset(self, cur: Cursor) -> None:
        corr = cur.u32()
        reference = cur.string()
        name = cur.string()
        queue = self._readable(name, lambda c: wire.query_offset_response(corr, c, 0), replica=True)
        if queue is None:
            return
        stored = queue.stream.offsets.get(reference)
        if stored is None:
            self.write(wire.query_offset_response(corr, wire.NO_OFFSET, 0))
            return
        self.write(wire.query_offset_response(corr, wire.OK, stored))


_DEFINITION_CHANGES = frozenset(
    (wire.CREATE, wire.DELETE, wire.CREATE_SUPER_STREAM, wire.DELETE_SUPER_STREAM)
)
_HANDLERS: dict[int, Callable[[StreamConnection, Cursor], None]] = {
    wire.PEER_PROPERTIES: StreamConnection._peer_properties,
    wire.SASL_HANDSHAKE: StreamConnection._sasl_handshake,
    wire.SASL_AUTHENTICATE: StreamConnection._sasl_authenticate,
    wire.TUNE: StreamConnection._tune,
    wire.TUNE | wire.RESPONSE: StreamConnection._tune,
    wire.OPEN: StreamConnection._open,
    wire.HEARTBEAT: StreamConnection._heartbeat,
    wire.CLOSE: StreamConnection._close,
    wire.CLOSE | wire.RESPONSE: StreamConnection._close_ok,
    wire.CREATE: StreamConnection._create,
    wire.DELETE: StreamConnection._delete,
    wire.METADATA: StreamConnection._metadata,
    wire.STREAM_STATS: StreamConnection._stream_stats,
    wire.EXCHANGE_COMMAND_VERSIONS: StreamConnection._exchange_command_versions,
    wire.RESOLVE_OFFSET_SPEC: StreamConnection._resolve_offset_spec,
    wire.CREATE_SUPER_STREAM: super_stream_commands.create_super_stream,
    wire.DELETE_SUPER_STREAM: super_stream_commands.delete_super_stream,
    wire.ROUTE: super_stream_commands.route,
    wire.PARTITIONS: super_stream_commands.partitions,
    wire.DECLARE_PUBLISHER: StreamConnection._declare_publisher,
    wire.QUERY_PUBLISHER_SEQUENCE: StreamConnection._query_publisher_sequence,
    wire.DELETE_PUBLISHER: StreamConnection._delete_publisher,
    wire.SUBSCRIBE: StreamConnection._subscribe,
    wire.UNSUBSCRIBE: StreamConnection._unsubscribe,
    wire.CONSUMER_UPDATE | wire.RESPONSE: StreamConnection._consumer_update_reply,
    wire.STORE_OFFSET: StreamConnection._store_offset,
    wire.QUERY_OFFSET: StreamConnection._query_offset,
    wire.REPLICA_HOLDS: StreamConnection._replica_holds,
}
