"""Connection and channel state machines of the server side, as data.

Every transition is an entry in the tables below (h11's rule: nothing hides in code), so the
tables are the documentation and tests can walk them. ``ConnectionState`` and
``ChannelState`` only look rows up, advance, and raise the ``errors`` class the spec names:
503 COMMAND_INVALID for a method the phase does not accept, 505 UNEXPECTED_FRAME for a frame
of the wrong kind (content where a method belongs, a method in the middle of content), 504
CHANNEL_ERROR for a frame on a channel that is not open, 540 NOT_IMPLEMENTED for a method the
protocol does not define. Methods are (class_id, method_id) pairs; nothing here decodes bytes.

Once the server has sent a Close, the spec says to discard everything but Close and Close-Ok:
the tables mark that with the ``Next.DISCARD`` outcome.
"""

from __future__ import annotations

import enum
from typing import Final

from pamqp import commands

from sievemq.amqp import errors
from sievemq.amqp.frames import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD

Method = tuple[int, int]


class Next(enum.Enum):
    """What the caller does with a frame that passed its state check."""

    DISPATCH = "dispatch"  # handle the method now
    DISCARD = "discard"  # drop it silently (a Close is in flight)
    EXPECT_CONTENT = "expect_content"  # content method: keep it until its content is complete
    CONTINUE = "continue"  # content frame taken, more to come
    COMPLETE = "complete"  # last content frame: handle the content method now


# --- methods, by name --------------------------------------------------------------------------

CONNECTION_START_OK: Final = (10, 11)
CONNECTION_SECURE_OK: Final = (10, 21)
CONNECTION_TUNE_OK: Final = (10, 31)
CONNECTION_OPEN: Final = (10, 40)
CONNECTION_CLOSE: Final = (10, 50)
CONNECTION_CLOSE_OK: Final = (10, 51)
CONNECTION_UPDATE_SECRET: Final = (10, 70)

CHANNEL_OPEN: Final = (20, 10)
CHANNEL_FLOW: Final = (20, 20)
CHANNEL_FLOW_OK: Final = (20, 21)
CHANNEL_CLOSE: Final = (20, 40)
CHANNEL_CLOSE_OK: Final = (20, 41)

BASIC_PUBLISH: Final = (60, 40)
CLASS_CONNECTION: Final = 10

# every (class, method) the protocol defines (pamqp's generated index)
KNOWN_METHODS: Final[frozenset[Method]] = frozenset(
    (index >> 16, index & 0xFFFF) for index in commands.INDEX_MAPPING
)

# methods a client may send on an open channel (the server-to-client ones are 503)
CLIENT_CHANNEL_METHODS: Final[frozenset[Method]] = frozenset(
    {
        CHANNEL_FLOW,
        CHANNEL_FLOW_OK,
        CHANNEL_CLOSE,
        (40, 10),  # exchange.declare
        (40, 20),  # exchange.delete
        (40, 30),  # exchange.bind
        (40, 40),  # exchange.unbind
        (50, 10),  # queue.declare
        (50, 20),  # queue.bind
        (50, 30),  # queue.purge
        (50, 40),  # queue.delete
        (50, 50),  # queue.unbind
        (60, 10),  # basic.qos
        (60, 20),  # basic.consume
        (60, 30),  # basic.cancel
        (60, 31),  # basic.cancel-ok (answer to a server-sent cancel)
        BASIC_PUBLISH,
        (60, 70),  # basic.get
        (60, 80),  # basic.ack
        (60, 90),  # basic.reject
        (60, 100),  # basic.recover-async
        (60, 110),  # basic.recover
        (60, 120),  # basic.nack
        (85, 10),  # confirm.select
        (90, 10),  # tx.select
        (90, 20),  # tx.commit
        (90, 30),  # tx.rollback
    }
)

# methods followed by a content header and body frames, with the content class they expect
CONTENT_METHODS: Final[dict[Method, int]] = {BASIC_PUBLISH: 60}


# --- connection --------------------------------------------------------------------------------


class ConnectionPhase(enum.Enum):
    """Server view of a connection after the protocol header (Start already sent)."""

    AWAIT_START_OK = "await_start_ok"
    AWAIT_TUNE_OK = "await_tune_ok"
    AWAIT_OPEN = "await_open"
    OPEN = "open"
    CLOSING = "closing"  # we sent connection.close, waiting for close-ok
    CLOSED = "closed"


CP = ConnectionPhase

# phase -> {method on channel 0 -> next phase}; anything else on channel 0 is 503
CONNECTION_TRANSITIONS: Final[dict[ConnectionPhase, dict[Method, ConnectionPhase]]] = {
    CP.AWAIT_START_OK: {CONNECTION_START_OK: CP.AWAIT_TUNE_OK, CONNECTION_CLOSE: CP.CLOSED},
    CP.AWAIT_TUNE_OK: {CONNECTION_TUNE_OK: CP.AWAIT_OPEN, CONNECTION_CLOSE: CP.CLOSED},
    CP.AWAIT_OPEN: {CONNECTION_OPEN: CP.OPEN, CONNECTION_CLOSE: CP.CLOSED},
    CP.OPEN: {
        CONNECTION_CLOSE: CP.CLOSED,
        CONNECTION_UPDATE_SECRET: CP.OPEN,
    },
    CP.CLOSING: {CONNECTION_CLOSE: CP.CLOSED, CONNECTION_CLOSE_OK: CP.CLOSED},
    CP.CLOSED: {},
}

# phases where frames on channels other than 0 may flow (only OPEN) or are dropped (CLOSING)
CHANNEL_FRAMES_ALLOWED: Final = frozenset({CP.OPEN})
DISCARD_PHASES: Final = frozenset({CP.CLOSING})


class ConnectionState:
    """Phase of one connection; feed it every frame's (type, channel) and channel-0 methods."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = ConnectionPhase.AWAIT_START_OK

    def receive_frame(self, frame_type: int, channel: int) -> Next:
        """Check a frame's kind and channel against the phase (before any decoding).

        Returns DISPATCH (go on), or DISCARD while our Close waits for its Close-Ok.
        Channel-0 methods must then go through ``receive_method``.
        """
        phase = self.phase
        if frame_type == FRAME_HEARTBEAT:
            return Next.DISPATCH
        if phase in DISCARD_PHASES:
            return Next.DISPATCH if channel == 0 and frame_type == FRAME_METHOD else Next.DISCARD
        if phase is CP.CLOSED:
            raise errors.UnexpectedFrame("frame after connection.close")
        if channel == 0:
            if frame_type != FRAME_METHOD:
                raise errors.UnexpectedFrame(f"content frame of type {frame_type} on channel 0")
            return Next.DISPATCH
        if phase not in CHANNEL_FRAMES_ALLOWED:
            raise errors.UnexpectedFrame(
                f"frame on channel {channel} before the connection is open"
            )
        return Next.DISPATCH

    def receive_method(self, method: Method) -> Next:
        """Advance on a channel-0 method, or raise 503/540 (DISCARD while closing)."""
        phase = self.phase
        target = CONNECTION_TRANSITIONS[phase].get(method)
        if target is None:
            if phase in DISCARD_PHASES:
                return Next.DISCARD
            if method not in KNOWN_METHODS:
                raise errors.NotImplemented_(f"unknown method {method[0]}.{method[1]}", *method)
            if method[0] != CLASS_CONNECTION:
                raise errors.CommandInvalid(f"method {method[0]}.{method[1]} on channel 0", *method)
            raise errors.CommandInvalid(
                f"method {method[0]}.{method[1]} not expected in connection state {phase.value}",
                *method,
            )
        self.phase = target
        return Next.DISPATCH

    def send_close(self) -> None:
        """We sent connection.close: from now on only close/close-ok count."""
        if self.phase is not CP.CLOSED:
            self.phase = CP.CLOSING


# --- channel -----------------------------------------------------------------------------------


class ChannelPhase(enum.Enum):
    """Server view of one channel."""

    CLOSED = "closed"  # never opened, or closed: only channel.open
    OPEN = "open"
    AWAIT_HEADER = "await_header"  # after a content method
    AWAIT_BODY = "await_body"  # after its header, until body_size bytes arrived
    CLOSING = "closing"  # we sent channel.close, waiting for close-ok


CH = ChannelPhase

# phase -> {method -> next phase}, for the phases where methods are allowed at all
CHANNEL_TRANSITIONS: Final[dict[ChannelPhase, dict[Method, ChannelPhase]]] = {
    CH.CLOSED: {CHANNEL_OPEN: CH.OPEN},
    CH.OPEN: {
        **{m: CH.OPEN for m in CLIENT_CHANNEL_METHODS},
        **{m: CH.AWAIT_HEADER for m in CONTENT_METHODS},
        CHANNEL_CLOSE: CH.CLOSED,
    },
    CH.CLOSING: {CHANNEL_CLOSE: CH.CLOSED, CHANNEL_CLOSE_OK: CH.CLOSED},
}

# frame type each phase expects next (None: any method, per CHANNEL_TRANSITIONS)
CONTENT_EXPECTED: Final[dict[ChannelPhase, int]] = {
    CH.AWAIT_HEADER: FRAME_HEADER,
    CH.AWAIT_BODY: FRAME_BODY,
}
_FRAME_NAMES: Final = {FRAME_METHOD: "method", FRAME_HEADER: "content header", FRAME_BODY: "body"}


class ChannelState:
    """Phase of one channel, including the content-frame sequence of a publish.

    ``max_body_size`` (optional) turns an oversized content header into 406, as RabbitMQ's
    ``max_message_size`` does.
    """

    __slots__ = ("_content_class", "channel", "max_body_size", "phase", "remaining")

    def __init__(self, channel: int, max_body_size: int | None = None) -> None:
        self.channel = channel
        self.max_body_size = max_body_size
        self.phase = ChannelPhase.CLOSED
        self.remaining = 0  # body bytes still expected in AWAIT_BODY
        self._content_class = 0

    def receive_method(self, method: Method) -> Next:
        """Advance on a method frame: DISPATCH, EXPECT_CONTENT or DISCARD; else raise."""
        phase = self.phase
        expected = CONTENT_EXPECTED.get(phase)
        if expected is not None:
            raise errors.UnexpectedFrame(
                f"expected {_FRAME_NAMES[expected]} frame on channel {self.channel}, "
                "got method frame",
                *method,
            )
        target = CHANNEL_TRANSITIONS[phase].get(method)
        if target is None:
            if phase is CH.CLOSING:
                return Next.DISCARD
            if phase is CH.CLOSED:
                raise errors.ChannelErrorHard(
                    f"expected 'channel.open' on channel {self.channel}", *method
                )
            if method not in KNOWN_METHODS:
                raise errors.NotImplemented_(f"unknown method {method[0]}.{method[1]}", *method)
            if method == CHANNEL_OPEN:
                raise errors.ChannelErrorHard(f"channel {self.channel} already open", *method)
            raise errors.CommandInvalid(
                f"method {method[0]}.{method[1]} not allowed on an open channel", *method
            )
        self.phase = target
        if target is CH.AWAIT_HEADER:
            self._content_class = CONTENT_METHODS[method]
            return Next.EXPECT_CONTENT
        return Next.DISPATCH

    def receive_header(self, class_id: int, body_size: int) -> Next:
        """Content header: CONTINUE (body frames follow) or COMPLETE (empty body)."""
        phase = self.phase
        if phase is CH.CLOSING:
            return Next.DISCARD
        if phase is not CH.AWAIT_HEADER:
            self._unexpected(FRAME_HEADER)
        if class_id != self._content_class:
            raise errors.UnexpectedFrame(
                f"expected content header for class {self._content_class}, "
                f"got one for class {class_id} instead"
            )
        if self.max_body_size is not None and body_size > self.max_body_size:
            raise errors.PreconditionFailed(
                f"message size {body_size} is larger than configured max size {self.max_body_size}",
                *BASIC_PUBLISH,
            )
        if body_size == 0:
            self.phase = CH.OPEN
            return Next.COMPLETE
        self.remaining = body_size
        self.phase = CH.AWAIT_BODY
        return Next.CONTINUE

    def receive_body(self, size: int) -> Next:
        """Body frame of ``size`` bytes: CONTINUE, or COMPLETE once body_size is reached."""
        phase = self.phase
        if phase is CH.CLOSING:
            return Next.DISCARD
        if phase is not CH.AWAIT_BODY:
            self._unexpected(FRAME_BODY)
        remaining = self.remaining - size
        if remaining < 0:
            raise errors.UnexpectedFrame(
                f"body frames on channel {self.channel} exceed the declared body size"
            )
        self.remaining = remaining
        if remaining:
            return Next.CONTINUE
        self.phase = CH.OPEN
        return Next.COMPLETE

    def send_close(self) -> None:
        """We sent channel.close: discard everything but close/close-ok from now on."""
        if self.phase is not CH.CLOSED:
            self.phase = CH.CLOSING
            self.remaining = 0

    def _unexpected(self, got: int) -> None:
        expected = CONTENT_EXPECTED.get(self.phase)
        if self.phase is CH.CLOSED:
            raise errors.ChannelErrorHard(f"expected 'channel.open' on channel {self.channel}")
        if expected is None:
            raise errors.UnexpectedFrame(
                f"{_FRAME_NAMES[got]} frame on channel {self.channel} without a content method"
            )
        raise errors.UnexpectedFrame(
            f"expected {_FRAME_NAMES[expected]} frame on channel {self.channel}, "
            f"got {_FRAME_NAMES[got]} frame"
        )
