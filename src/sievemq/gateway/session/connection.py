"""One AMQP connection: negotiation, heartbeats, channel table and THE error mapping.

Every ``sievemq.amqp.errors.AMQPError`` raised while handling a frame ends up in
``Connection._fail``: connection errors (5xx, 320, 402, login 403) send connection.close and
close the socket after close-ok; channel errors (403/404/405/406) close only that channel.
``except Exception`` appears only here, at the connection boundary (541 INTERNAL_ERROR).

HOT PATH: ``on_frames`` loops over the frames of one read and hands channel frames to their
channel without awaiting; replies produced meanwhile go out in one ``writelines``. Everything
else (channel 0, frames before open-ok or after a close) is cold and goes through the
connection table of ``sievemq.amqp.states``, which decides the phase and the reply code.

Resource alarms (``gateway.runtime.alarms``) block a connection once it has published, as RabbitMQ
does: connection.blocked when the client asked for it, and no more reading until the alarm
clears (connection.unblocked). Consumer-only connections keep running. A connection is held
between messages when it can be: at the first read that leaves no message half received, or,
for a client whose channels always have one half received (interleaved large publishes), once
``max_pending_content_bytes`` more frame bytes were read under the alarm, mid-message. While an
alarm is on, one check per read (not per frame) catches a connection that starts publishing or
finishes its message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import pamqp.commands as spec

from sievemq.amqp import codec, errors, frames, hotcodec, methods, negotiation, states
from sievemq.amqp.states import (
    ChannelPhase,
    ChannelState,
    ConnectionPhase,
    ConnectionState,
    Next,
)
from sievemq.gateway.model.broker import MessageCounters
from sievemq.gateway.model.users import User
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.gateway.runtime import descriptors
from sievemq.gateway.runtime.alarms import blocked_reason
from sievemq.gateway.runtime.node import LinkFlow, Node
from sievemq.gateway.session.channel import Channel
from sievemq.gateway.session.ports import ClosedChannel, HeldChannel
from sievemq.gateway.session.publish_cache import PUBLISH_ID as _PUBLISH_ID

log = logging.getLogger(__name__)

_CLOSE_OK_TIMEOUT_S = 1.0
# frame bytes that channels waiting for a definitions fdatasync may hold (``Channel.backlog``)
# before the connection stops reading until they are handled
_BACKLOG_PAUSE_BYTES = 1024 * 1024

_OPEN = ConnectionPhase.OPEN
_CLOSING = ConnectionPhase.CLOSING
_CLOSED = ConnectionPhase.CLOSED
_MID_MESSAGE = (ChannelPhase.AWAIT_HEADER, ChannelPhase.AWAIT_BODY)


class ReadControl(Protocol):
    """The socket side of a connection (``net.protocol.AMQPProtocol``): hold reading."""

    def hold_reading(self, held: bool) -> None: ...
    def hold_for_backlog(self, held: bool) -> None: ...
    def hold_for_links(self, held: bool) -> None: ...
    def stop_reading(self) -> None: ...


class Connection:
    """The frame handler of one client (driven by ``net.protocol.AMQPProtocol``).

    Its channels see it as a ``ports.ChannelHost``; the node holds it as a
    ``runtime.node.ClientConnection`` (alarms, shutdown)."""

    # a cluster link from another node (``session.peer``): not a client, not listed
    internal = False

    def __init__(self, node: Node) -> None:
        self.node = node
        self.id = node.next_id()
        # where this connection's publishes and confirms are counted: the node's figures
        # (a cluster link's connection counts apart: its messages were counted where the
        # client published them, docs/cluster.md)
        self.counters: MessageCounters = node.broker.counters
        limits = node.limits
        self.channel_max = limits.channel_max
        self.frame_max = limits.frame_max
        self.heartbeat = limits.heartbeat
        self.transport: asyncio.Transport | None = None
        self.state = ConnectionState()  # the phase, advanced by the amqp.states table only
        self.channels: dict[int, Channel] = {}
        self.user: User | None = None  # set once authenticated (connection.start-ok)
        self.username = ""
        self.vhost: VirtualHost | None = None
        self.vhost_name = ""
        self.opened = False  # connection.open-ok was sent (the handshake is over)
        self.client_properties: dict[str, Any] = {}
        self.cancel_notify = False
        self.writing_paused = False
        # resource alarms: the client's connection.blocked capability, whether a channel that
        # is gone had published, whether we hold reading, and the reason last sent
        self.blocked_notify = False
        self.published = False
        self.blocked = False
        self.link_held = False  # not read while an inter-node link it wrote to drains
        self.blocked_reason = ""
        self.read_control: ReadControl | None = None
        self.peer = ""
        # body bytes of unfinished messages over all channels (max_pending_content_bytes)
        self.pending_content = 0
        # frame bytes read while an alarm is on and this connection is not held yet
        self.read_under_alarm = 0
        self._out: list[bytes] = []
        self._capturing = False  # a cold method runs: direct writes queue in _out too
        self.backlog_bytes = 0  # frame bytes in the backlogs of channels held for a sync
        self._backlog_paused = False
        self._flush_scheduled = False
        self._in_frames = False
        self._received = True
        self._missed = 0
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self.frame_reader: frames.FrameReader | None = None
        self._offer: Any = None
        # moved by every read and every cold channel method: a channel's raw route checks
        # its routing again when it moved (``session.raw_publish``)
        self.route_stamp = 0

    # ----------------------------------------------------------------------- output

    def send(self, data: bytes) -> None:
        """Queue one encoded frame; it goes out with the next flush (same loop tick)."""
        self._out.append(data)
        if not self._in_frames and not self._flush_scheduled:
            self._flush_scheduled = True
            self.node.loop.call_soon(self.flush)

    def send_method(self, channel: int, method: Any) -> None:
        self.send(codec.encode_method(channel, method))

    def flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out:
            self._out = []
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.writelines(out)

    def can_write(self) -> bool:
        transport = self.transport
        return transport is not None and not transport.is_closing()

    def write_frames(self, data: list[bytes]) -> None:
        """Write a batch of frames now (confirms, a basic.return), after any queued replies."""
        if self._capturing:
            self._out.extend(data)
            return
        if self._out:
            self.flush()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.writelines(data)

    def write_joined(self, data: bytes) -> None:
        """Write one buffer of frames now (a consumer's turn of deliveries, joined), after
        any queued replies. HOT PATH: once per delivery turn."""
        if self._capturing:
            self._out.append(data)
            return
        if self._out:
            self.flush()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def begin_capture(self) -> int:
        """A channel's cold method starts: what it writes, directly or not, is queued (in
        order) until ``end_capture``; returns the mark to give it."""
        self._capturing = True
        return len(self._out)

    def end_capture(self, mark: int, hold: bool) -> list[bytes]:
        """The cold method ended: with ``hold``, take what it wrote out of the queue (the
        channel sends it once its definitions change is on disk); else leave it queued."""
        self._capturing = False
        if not hold:
            return []
        held = self._out[mark:]
        del self._out[mark:]
        return held

    def resume_channel(
        self, channel: HeldChannel, held: list[bytes], backlog: list[tuple[int, bytes]]
    ) -> None:
        """A held channel's change is on disk: send its held replies, then handle the frames
        it received meanwhile, in order (a later change may hold it again)."""
        self.backlog_bytes -= sum(len(payload) for _, payload in backlog)
        if self.channels.get(channel.id) is not channel or self.state.phase is not _OPEN:
            return  # the channel or the connection went away meanwhile
        self._out.extend(held)
        chid = channel.id
        self.on_frames([(ftype, chid, payload) for ftype, payload in backlog])  # flushes
        if self.backlog_bytes <= _BACKLOG_PAUSE_BYTES:
            self._pause_for_backlog(False)

    def resume_held(
        self,
        channel: HeldChannel,
        work: Callable[[], None] | BaseException,
        backlog: list[tuple[int, bytes]],
    ) -> None:
        """A channel held for work in a worker thread may go on: run ``work`` (what waited)
        as ``on_frames`` would, mapping its errors the same way (an exception instead
        fails the channel with it), then handle the frames it received meanwhile."""
        chid = channel.id
        if self.channels.get(chid) is channel and self.state.phase is _OPEN:
            try:
                if isinstance(work, BaseException):
                    raise work
                work()
            except errors.AMQPError as error:
                self._fail(error, chid)
            except Exception as error:  # the connection boundary, as in on_frames
                self._fail(boundary_error(error, self.id), chid)
        self.resume_channel(channel, [], backlog)

    def _pause_for_backlog(self, paused: bool) -> None:
        if paused is not self._backlog_paused and self.read_control is not None:
            self._backlog_paused = paused
            self.read_control.hold_for_backlog(paused)

    def abort(self) -> None:
        """Drop the socket at once (shutdown, after the grace period)."""
        if self.transport is not None:
            self.transport.abort()

    # ----------------------------------------------------------------------- net callbacks

    def on_open(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.node.connections.add(self)
        start = negotiation.start()
        self.send_method(0, start)
        self.flush()

    def on_frames(self, got: list[tuple[int, int, bytes]]) -> None:
        self._received = True
        self.route_stamp += 1
        self._in_frames = True
        flow = self.node.link_flow
        if flow is not None and flow.pressed:  # not this read's: another's, or a timer's
            flow.unpress()
        channels = self.channels
        state = self.state
        fast = 0  # publishes taken whole by publish_fast (counted once per batch)
        try:
            i = 0
            n = len(got)
            while i < n:
                ftype, chid, payload = got[i]
                i += 1
                try:
                    if chid and state.phase is _OPEN:
                        channel = channels.get(chid)
                        if channel is None:
                            self._channel_open(ftype, chid, payload)
                        elif channel.backlog is not None:  # waits for a definitions sync
                            channel.backlog.append((ftype, payload))
                            self.backlog_bytes += len(payload)
                            if self.backlog_bytes > _BACKLOG_PAUSE_BYTES:
                                self._pause_for_backlog(True)
                        elif ftype == 1 and i + 1 < n and payload[:4] == _PUBLISH_ID:
                            raw = channel.raw_route  # (in a cluster: ``session.raw_publish``)
                            if raw is not None and payload == raw.method:
                                taken = raw.forward_run(got, i - 1, n)
                                if taken:
                                    i += 3 * taken - 1
                                    fast += taken
                                    continue
                            if channel.publish_fast(payload, got[i], got[i + 1]):
                                i += 2
                                fast += 1
                            else:
                                channel.on_frame(ftype, payload)
                        else:
                            channel.on_frame(ftype, payload)
                    else:
                        self._cold_frame(ftype, chid, payload)
                except errors.AMQPError as error:
                    self._fail(error, chid)
                except Exception as error:  # the connection boundary
                    self._fail(boundary_error(error, self.id), chid)
        finally:
            self._in_frames = False
            if fast:
                self.counters.received += fast
            if self.node.alarm_reasons and not self.blocked:
                # cold: only while an alarm is on
                self.read_under_alarm += sum(len(f[2]) for f in got)
                self.apply_alarms(self.node.alarm_reasons)
            if flow is not None and flow.pressed:  # cold: a link to a slow node is backed up
                self._hold_for_links(flow)
            self.flush()

    def _hold_for_links(self, flow: LinkFlow) -> None:
        """This read wrote to an inter-node link over its high-water mark: no more reading
        from this client until the link drained (RabbitMQ's credit flow, docs/cluster.md).
        A link connection from another node is never held: two nodes whose links to each
        other are backed up would then wait for each other."""
        if self.internal:
            flow.unpress()
        elif flow.hold(self._links_drained):
            self.link_held = True
            if self.read_control is not None:
                self.read_control.hold_for_links(True)

    def _links_drained(self) -> None:
        self.link_held = False
        if self.read_control is not None:
            self.read_control.hold_for_links(False)

    def _cold_frame(self, ftype: int, chid: int, payload: bytes) -> None:
        """Channel 0, and any frame before open-ok or after a close: the table decides."""
        state = self.state
        if state.receive_frame(ftype, chid) is Next.DISCARD or ftype != frames.FRAME_METHOD:
            return  # discarded, or a heartbeat (it counted as traffic in on_frames)
        method = hotcodec.method_id(payload)
        if state.receive_method(method) is Next.DISCARD:
            return
        handler = getattr(self, _CONNECTION_METHODS[method])  # a subclass may override it
        handler(codec.decode_method(payload, self.node.limits.tables))

    def on_frame_error(self, error: errors.AMQPError) -> None:
        self._fail(error, 0)
        self.flush()

    def on_lost(self) -> None:
        self.state.lost()
        self.node.connections.discard(self)
        self.node.note_gone(self)
        for timer in (self._heartbeat_handle, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_handle = self._close_timer = None
        for channel in list(self.channels.values()):
            channel.teardown()
        self.channels.clear()
        self._out.clear()
        if self.vhost is not None:
            self.vhost.classic.owner_gone(self)  # exclusive queues go with their connection

    def on_pause_writing(self) -> None:
        self.writing_paused = True

    def on_resume_writing(self) -> None:
        self.writing_paused = False
        for channel in self.channels.values():
            channel.wake_consumers()

    # ----------------------------------------------------------------------- negotiation

    # each runs after the table accepted its method (and moved to the next phase)

    def _close(self, method: Any) -> None:
        """The client closes (in any phase, or answering ours at the same time). After the
        close-ok the client closes the socket (it received the close-ok: the spec's "safe to
        close the socket"); RabbitMQ waits for that, and so do we, for at most
        ``_CLOSE_OK_TIMEOUT_S``. Closing first raced clients that read EOF before the close-ok
        (aiormq then loses the error its close was given)."""
        self.send_method(0, spec.Connection.CloseOk())
        self.flush()
        self._teardown_channels()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self._close_timer = self.node.loop.call_later(_CLOSE_OK_TIMEOUT_S, self._force_close)

    def _close_ok(self, method: Any) -> None:
        """The answer to our connection.close."""
        if self.transport is not None:
            self.transport.close()

    def _update_secret(self, method: Any) -> None:
        self.send_method(0, spec.Connection.UpdateSecretOk())

    def _start_ok(self, method: Any) -> None:
        self.client_properties = dict(method.client_properties or {})
        caps = self.client_properties.get("capabilities") or {}
        self.cancel_notify = bool(isinstance(caps, dict) and caps.get("consumer_cancel_notify"))
        self.blocked_notify = bool(isinstance(caps, dict) and caps.get("connection.blocked"))
        creds = negotiation.credentials(method)
        user = self.node.broker.users.authenticate(creds.username, creds.password)
        if user is None:
            raise errors.ConnectionAccessRefused(
                f"Login was refused using authentication mechanism {creds.mechanism}. "
                "For details see the broker logfile.",
                10,
                11,
            )
        host = self.peer.rsplit(":", 1)[0]
        if not user.may_connect_from(host):
            raise errors.ConnectionAccessRefused(
                f"user '{creds.username}' can only connect via localhost", 10, 11
            )
        self.user = user
        self.username = creds.username
        self._offer = negotiation.tune(self.channel_max, self.frame_max, self.heartbeat)
        self.send_method(0, self._offer)

    def _tune_ok(self, method: Any) -> None:
        tuning = negotiation.negotiate(self._offer, method)
        self.channel_max = tuning.channel_max
        self.frame_max = tuning.frame_max
        if self.frame_reader is not None:
            self.frame_reader.frame_max = self.frame_max
        self.heartbeat = int(tuning.heartbeat or 0)
        if self.heartbeat:
            self._heartbeat_handle = self.node.loop.call_later(self.heartbeat, self._beat)

    def _open(self, method: Any) -> None:
        name = method.virtual_host or "/"
        if self.user is None:  # the state machine lets open come only after start-ok
            raise errors.CommandInvalid("connection.open before authentication")
        vhost = self.node.broker.open_vhost(self.user, name)
        refusal = self.node.connection_refusal(vhost, self.username)
        if refusal is not None:  # RabbitMQ's vhost and user max-connections (530, its texts)
            raise errors.NotAllowed(refusal)
        self.vhost = vhost
        self.vhost_name = name
        self.opened = True
        self.node.note_opened(self, name, self.username)
        self.send_method(0, spec.Connection.OpenOk())

    def _peers(self) -> list[Connection]:
        """The other AMQP connections of this node past connection.open."""
        return [
            c
            for c in self.node.connections
            if isinstance(c, Connection) and c is not self and c.opened
        ]

    def _check_channel_limit(self) -> None:
        """The user's max-channels over all its connections (530, RabbitMQ's text)."""
        live = self.node.broker.users.get(self.username)
        limit = live.limits.get("max-channels", -1) if live is not None else -1
        if limit < 0:
            return
        used = len(self.channels) + sum(
            len(c.channels) for c in self._peers() if c.username == self.username
        )
        if used >= limit:
            raise errors.NotAllowed(
                f"number of channels opened for user '{self.username}' has reached the "
                f"maximum allowed user limit of ({limit})"
            )

    def on_handshake_timeout(self) -> None:
        """``handshake_timeout_s`` after the socket connected (the protocol's timer)."""
        if not self.opened and self.transport is not None:
            self.transport.abort()

    # ----------------------------------------------------------------------- heartbeats

    def _beat(self) -> None:
        """Every interval: send a heartbeat; drop a peer silent for two intervals."""
        self._heartbeat_handle = None
        if self.state.phase is _CLOSED or self.transport is None:
            return
        if self._received or self.writing_paused or self.blocked or self.link_held:
            # while its output is backed up (backpressure), an alarm blocks it or a link it
            # publishes to drains, we do not read from the peer: silence then is ours, not a
            # dead peer's
            self._received = False
            self._missed = 0
        else:
            self._missed += 1
            if self._missed >= 2:
                log.info("connection %s: missed heartbeats from %s, closing", self.id, self.peer)
                self.transport.abort()
                return
        if not self.writing_paused:
            self.transport.write(hotcodec.encode_heartbeat())
        self._heartbeat_handle = self.node.loop.call_later(self.heartbeat, self._beat)

    # ----------------------------------------------------------------------- channels

    def _channel_open(self, ftype: int, chid: int, payload: bytes) -> None:
        """A frame on a channel that is not open: the table accepts only channel.open.

        As in RabbitMQ, a connection with channel_max channels open gets 530 for the next
        one (whatever its number); a number above channel_max is also refused (504).
        """
        opened = len(self.channels)
        if opened >= self.channel_max:
            raise errors.NotAllowed(
                f"number of channels opened ({opened}) has reached the negotiated "
                f"channel_max ({self.channel_max})"
            )
        self._check_channel_limit()
        state = ChannelState(chid, self.node.limits.max_message_size)
        if ftype != frames.FRAME_METHOD:
            state.out_of_phase(ftype)  # raises 504
        if state.receive_method(hotcodec.method_id(payload)) is Next.DISCARD:
            return  # a late channel.close-ok (closes that crossed): nothing to open
        if chid > self.channel_max:
            raise errors.ChannelErrorHard(
                f"channel {chid} is above the negotiated channel_max {self.channel_max}", 20, 10
            )
        channel = self.new_channel(state, payload)
        self.channels[chid] = channel
        self.send_method(chid, spec.Channel.OpenOk())

    def new_channel(self, state: ChannelState, payload: bytes) -> Channel:
        """The channel a channel.open (``payload``) makes (a cluster link pins some)."""
        return Channel(self, state)

    def channel_closed(self, channel: ClosedChannel) -> None:
        if self.channels.get(channel.id) is channel:
            del self.channels[channel.id]
            if channel.has_published:
                self.published = True

    # ----------------------------------------------------------------------- resource alarms

    def has_published(self) -> bool:
        """True once any of its channels published (RabbitMQ blocks publishers only)."""
        return self.published or any(ch.has_published for ch in self.channels.values())

    def _blockable(self) -> bool:
        """A publisher with no message half received: holding it then pins no partial
        body and its last publish is complete (and confirmed) before it waits. One that
        always has a message half received is held anyway after a bounded read."""
        if self.state.phase is not _OPEN:
            return False
        channels = self.channels.values()
        if (
            any(ch.state.phase in _MID_MESSAGE for ch in channels)
            and self.read_under_alarm < self.node.limits.max_pending_content_bytes
        ):
            return False  # the next read that completes the message blocks it
        return self.published or any(ch.has_published for ch in channels)

    def stop_reading(self) -> None:
        """Shutdown: no frame is read from this client any more."""
        if self.read_control is not None:
            self.read_control.stop_reading()

    def apply_alarms(self, reasons: tuple[str, ...]) -> None:
        """The node's alarms changed (or this connection may have started publishing)."""
        if reasons:
            if not self.blocked and not self._blockable():
                return
            reason = blocked_reason(reasons)
            if not self.blocked:
                self.blocked = True
                self.read_under_alarm = 0
                if self.read_control is not None:
                    self.read_control.hold_reading(True)
                log.info("connection %s: blocked (%s)", self.id, reason)
            if self.blocked_notify and reason != self.blocked_reason and self.state.phase is _OPEN:
                self.send_method(0, spec.Connection.Blocked(reason=reason))
            self.blocked_reason = reason
            return
        self.read_under_alarm = 0
        if self.blocked:
            self.blocked = False
            self.blocked_reason = ""
            if self.blocked_notify and self.state.phase is _OPEN:
                self.send_method(0, spec.Connection.Unblocked())
            if self.read_control is not None:
                self.read_control.hold_reading(False)
            log.info("connection %s: unblocked", self.id)

    def _teardown_channels(self) -> None:
        for channel in list(self.channels.values()):
            channel.teardown()
        self.channels.clear()

    # ----------------------------------------------------------------------- errors

    def _fail(self, error: errors.AMQPError, chid: int) -> None:
        """THE mapping from a raised AMQPError to the wire."""
        if not error.closes_connection and chid:
            channel = self.channels.get(chid)
            if channel is not None:
                channel.close_by_server(error)
                return
        self.close(error)

    def close(self, error: errors.AMQPError) -> None:
        """Send connection.close with the error's reply and close the socket after close-ok."""
        phase = self.state.phase
        if phase is _CLOSING or phase is _CLOSED:
            return
        log.info("connection %s: closing: %s", self.id, error.reply_text)
        self._teardown_channels()
        self.state.send_close()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self.send_method(
            0,
            spec.Connection.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )
        self.flush()
        self._close_timer = self.node.loop.call_later(_CLOSE_OK_TIMEOUT_S, self._force_close)

    def _force_close(self) -> None:
        self._close_timer = None
        if self.transport is not None:
            self.transport.close()


# the handler of every method the connection table accepts (a test checks none is missing)
_CONNECTION_METHODS: dict[states.Method, str] = {
    methods.CONNECTION_START_OK: Connection._start_ok.__name__,
    methods.CONNECTION_TUNE_OK: Connection._tune_ok.__name__,
    methods.CONNECTION_OPEN: Connection._open.__name__,
    methods.CONNECTION_CLOSE: Connection._close.__name__,
    methods.CONNECTION_CLOSE_OK: Connection._close_ok.__name__,
    methods.CONNECTION_UPDATE_SECRET: Connection._update_secret.__name__,
}


def boundary_error(error: Exception, conn_id: int) -> errors.AMQPError:
    """What an unexpected exception costs at the connection boundary: a 506 on its channel
    when the process ran out of descriptors (a warning in the log; the node recovers as
    they free up), otherwise a 541 with the traceback in the log."""
    if descriptors.is_exhausted(error):
        log.warning("connection %s: %s", conn_id, descriptors.exhausted_text(error))
        return descriptors.exhausted_error(error)
    log.exception("connection %s: internal error", conn_id)
    return errors.InternalError(f"{type(error).__name__}: {error}")
