"""One AMQP connection: negotiation, heartbeats, channel table and THE error mapping.

Every ``sievemq.amqp.errors.AMQPError`` raised while handling a frame ends up in
``Connection._fail``: connection errors (5xx, 320, 402, login 403) send connection.close and
close the socket after close-ok; channel errors (403/404/405/406) close only that channel.
``except Exception`` appears only here, at the connection boundary (541 INTERNAL_ERROR).

HOT PATH: ``on_frames`` loops over the frames of one read and hands channel frames to their
channel without awaiting; replies produced meanwhile go out in one ``writelines``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import pamqp.commands as spec

from sievemq.amqp import codec, errors, frames, negotiation
from sievemq.gateway.channel import Channel
from sievemq.gateway.fastpath import PUBLISH_ID as _PUBLISH_ID

if TYPE_CHECKING:
    from sievemq.gateway.node import Node
    from sievemq.gateway.vhost import VirtualHost

log = logging.getLogger(__name__)

_CLOSE_OK_TIMEOUT_S = 1.0

# connection states: which connection-class method each accepts
_AWAIT_START_OK = "start-ok"
_AWAIT_TUNE_OK = "tune-ok"
_AWAIT_OPEN = "open"
_OPEN = "opened"
_CLOSING = "closing"  # we sent connection.close, waiting for close-ok
_CLOSED = "closed"

_EXPECTED: dict[str, type[Any]] = {
    _AWAIT_START_OK: spec.Connection.StartOk,
    _AWAIT_TUNE_OK: spec.Connection.TuneOk,
    _AWAIT_OPEN: spec.Connection.Open,
}


class Connection:
    """The frame handler of one client (driven by ``net.protocol.AMQPProtocol``)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.id = node.next_id()
        limits = node.limits
        self.channel_max = limits.channel_max
        self.frame_max = limits.frame_max
        self.heartbeat = limits.heartbeat
        self.transport: asyncio.Transport | None = None
        self.state = _AWAIT_START_OK
        self.channels: dict[int, Channel] = {}
        self.user: Any = None
        self.username = ""
        self.vhost: VirtualHost | None = None
        self.vhost_name = ""
        self.client_properties: dict[str, Any] = {}
        self.cancel_notify = False
        self.writing_paused = False
        self.peer = ""
        # body bytes of unfinished messages over all channels (max_pending_content_bytes)
        self.pending_content = 0
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._in_frames = False
        self._received = True
        self._missed = 0
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self.frame_reader: frames.FrameReader | None = None
        self._offer: Any = None

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

    def write_frames(self, data: list[bytes]) -> None:
        """Write a batch now (deliveries, confirms), after any queued replies."""
        if self._out:
            self.flush()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.writelines(data)

    # ----------------------------------------------------------------------- net callbacks

    def on_open(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.node.connections.add(self)
        start = negotiation.start()
        self.send_method(0, start)
        self.flush()
        self._close_timer = self.node.loop.call_later(
            self.node.limits.handshake_timeout_s, self._handshake_timeout
        )

    def on_frames(self, got: list[tuple[int, int, bytes]]) -> None:
        self._received = True
        self._in_frames = True
        channels = self.channels
        try:
            i = 0
            n = len(got)
            while i < n:
                ftype, chid, payload = got[i]
                i += 1
                if self.state is not _OPEN and self._drop_frame(ftype, chid, payload):
                    continue
                try:
                    if chid:
                        channel = channels.get(chid)
                        if channel is None:
                            self._channel_open(ftype, chid, payload)
                        elif (
                            ftype == 1
                            and i + 1 < n
                            and payload[:4] == _PUBLISH_ID
                            and channel.publish_fast(payload, got[i], got[i + 1])
                        ):
                            i += 2
                        else:
                            channel.on_frame(ftype, payload)
                    elif ftype == frames.FRAME_METHOD:
                        self._connection_method(codec.decode_method(payload))
                    elif ftype != frames.FRAME_HEARTBEAT:
                        raise errors.UnexpectedFrame(f"frame type {ftype} on channel 0")
                except errors.AMQPError as error:
                    self._fail(error, chid)
                except Exception as error:  # the connection boundary
                    log.exception("connection %s: internal error", self.id)
                    self._fail(errors.InternalError(f"{type(error).__name__}: {error}"), chid)
        finally:
            self._in_frames = False
            self.flush()

    def _drop_frame(self, ftype: int, chid: int, payload: bytes) -> bool:
        """Before open-ok and while closing, only connection methods on channel 0 count."""
        if self.state in (_CLOSING, _CLOSED):
            if chid == 0 and ftype == frames.FRAME_METHOD:
                cid, mid = codec.method_id(payload)
                if cid == 10 and mid in (50, 51):  # close / close-ok
                    return False
            return True
        if chid != 0 and ftype != frames.FRAME_HEARTBEAT:
            self._fail(errors.CommandInvalid("channel frame before connection.open-ok"), 0)
            return True
        return False

    def on_frame_error(self, error: errors.AMQPError) -> None:
        self._fail(error, 0)
        self.flush()

    def on_lost(self) -> None:
        self.state = _CLOSED
        self.node.connections.discard(self)
        for timer in (self._heartbeat_handle, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_handle = self._close_timer = None
        for channel in list(self.channels.values()):
            channel.teardown()
        self.channels.clear()
        self._out.clear()

    def on_pause_writing(self) -> None:
        self.writing_paused = True

    def on_resume_writing(self) -> None:
        self.writing_paused = False
        for channel in self.channels.values():
            channel.wake_consumers()

    # ----------------------------------------------------------------------- negotiation

    def _connection_method(self, method: Any) -> None:
        state = self.state
        if isinstance(method, spec.Connection.Close):
            self.send_method(0, spec.Connection.CloseOk())
            self.flush()
            self._teardown_channels()
            self.state = _CLOSED
            if self.transport is not None:
                self.transport.close()
            return
        if isinstance(method, spec.Connection.CloseOk):
            if state == _CLOSING:
                self.state = _CLOSED
                if self.transport is not None:
                    self.transport.close()
            return
        expected = _EXPECTED.get(state)
        if expected is not None and not isinstance(method, expected):
            raise errors.CommandInvalid(
                f"expected '{expected.name.lower()}', got '{method.name.lower()}'"
            )
        if state == _AWAIT_START_OK:
            self._start_ok(method)
        elif state == _AWAIT_TUNE_OK:
            self._tune_ok(method)
        elif state == _AWAIT_OPEN:
            self._open(method)
        elif isinstance(method, spec.Connection.Blocked | spec.Connection.Unblocked):
            return
        elif isinstance(method, spec.Connection.UpdateSecret):
            self.send_method(0, spec.Connection.UpdateSecretOk())
        else:
            raise errors.CommandInvalid(f"unexpected method '{method.name.lower()}'")

    def _start_ok(self, method: Any) -> None:
        self.client_properties = dict(method.client_properties or {})
        caps = self.client_properties.get("capabilities") or {}
        self.cancel_notify = bool(isinstance(caps, dict) and caps.get("consumer_cancel_notify"))
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
        self.state = _AWAIT_TUNE_OK
        self._offer = negotiation.tune(self.channel_max, self.frame_max, self.heartbeat)
        self.send_method(0, self._offer)

    def _tune_ok(self, method: Any) -> None:
        tuning = negotiation.negotiate(self._offer, method)
        self.channel_max = tuning.channel_max
        self.frame_max = tuning.frame_max
        if self.frame_reader is not None:
            self.frame_reader.frame_max = self.frame_max
        self.heartbeat = int(tuning.heartbeat or 0)
        self.state = _AWAIT_OPEN
        if self.heartbeat:
            self._heartbeat_handle = self.node.loop.call_later(self.heartbeat, self._beat)

    def _open(self, method: Any) -> None:
        name = method.virtual_host or "/"
        vhost = self.node.broker.open_vhost(self.user, name)
        self.vhost = vhost
        self.vhost_name = name
        self.state = _OPEN
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self.send_method(0, spec.Connection.OpenOk())

    def _handshake_timeout(self) -> None:
        self._close_timer = None
        if self.state != _OPEN and self.transport is not None:
            self.transport.abort()

    # ----------------------------------------------------------------------- heartbeats

    def _beat(self) -> None:
        """Every interval: send a heartbeat; drop a peer silent for two intervals."""
        self._heartbeat_handle = None
        if self.state == _CLOSED or self.transport is None:
            return
        if self._received or self.writing_paused:
            # while its output is backed up we do not read from the peer (backpressure):
            # silence then is ours, not a dead peer's
            self._received = False
            self._missed = 0
        else:
            self._missed += 1
            if self._missed >= 2:
                log.info("connection %s: missed heartbeats from %s, closing", self.id, self.peer)
                self.transport.abort()
                return
        if not self.writing_paused:
            self.transport.write(codec.encode_heartbeat())
        self._heartbeat_handle = self.node.loop.call_later(self.heartbeat, self._beat)

    # ----------------------------------------------------------------------- channels

    def _channel_open(self, ftype: int, chid: int, payload: bytes) -> None:
        if ftype != frames.FRAME_METHOD or codec.method_id(payload) != (20, 10):
            raise errors.ChannelErrorHard(f"expected 'channel.open' on channel {chid}")
        if chid > self.channel_max:
            raise errors.ChannelErrorHard(
                f"channel {chid} is above the negotiated channel_max {self.channel_max}"
            )
        channel = Channel(self, chid)
        self.channels[chid] = channel
        self.send_method(chid, spec.Channel.OpenOk())

    def channel_closed(self, channel: Channel) -> None:
        if self.channels.get(channel.id) is channel:
            del self.channels[channel.id]

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
        if self.state in (_CLOSING, _CLOSED):
            return
        log.info("connection %s: closing: %s", self.id, error.reply_text)
        self._teardown_channels()
        self.state = _CLOSING
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
