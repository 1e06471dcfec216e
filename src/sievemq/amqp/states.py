"""Connection and channel state machines of the server side, as data.

Every transition is an entry in the tables below (h11's rule: nothing hides in code), so the
tables are the documentation and tests can walk them. ``ConnectionState`` and
``ChannelState`` only look rows up, advance, and raise the ``errors`` class the spec names:
503 COMMAND_INVALID for a method the phase does not accept, 505 UNEXPECTED_FRAME for a frame
of the wrong kind (content where a method belongs, a method in the middle of content), 504
CHANNEL_ERROR for a frame on a channel that is not open, 540 NOT_IMPLEMENTED for a method the
protocol does not define. Methods are (class_id, method_id) pairs; nothing here decodes bytes.
Where the spec leaves the code open, RabbitMQ's choice is taken: a channel-0 method the
connection phase does not accept is 504 "unexpected method in connection state ...".

Once the server has sent a Close, the spec says to discard everything but Close and Close-Ok:
the tables mark that with the ``Next.DISCARD`` outcome.

Cold path: the gateway (``gateway.session.connection``, ``gateway.session.channel``) asks
these tables about every frame outside the publish / ack hot path; the hot path performs the
table's content transitions inline, and
``tests/unit/test_gateway/test_session/test_state_tables.py`` checks both give the same
replies. ``markdown()`` renders the tables for docs/architecture.md.
"""

from __future__ import annotations

import enum
from typing import Final

from pamqp import base, commands

from sievemq.amqp import errors
from sievemq.amqp.frames import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD
from sievemq.amqp.methods import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_REJECT,
    CHANNEL_CLOSE,
    CHANNEL_CLOSE_OK,
    CHANNEL_FLOW,
    CHANNEL_FLOW_OK,
    CHANNEL_OPEN,
    CLASS_BASIC,
    CONNECTION_CLOSE,
    CONNECTION_CLOSE_OK,
    CONNECTION_OPEN,
    CONNECTION_START_OK,
    CONNECTION_TUNE_OK,
    CONNECTION_UPDATE_SECRET,
)

Method = tuple[int, int]


class Next(enum.Enum):
    """What the caller does with a frame that passed its state check."""

    DISPATCH = "dispatch"  # handle the method now
    DISCARD = "discard"  # drop it silently (a Close is in flight)
    EXPECT_CONTENT = "expect_content"  # content method: keep it until its content is complete
    CONTINUE = "continue"  # content frame taken, more to come
    COMPLETE = "complete"  # last content frame: handle the content method now


# --- methods, by name --------------------------------------------------------------------------

# the methods named here are defined once in ``methods``

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
        BASIC_ACK,
        BASIC_REJECT,
        (60, 100),  # basic.recover-async
        (60, 110),  # basic.recover
        BASIC_NACK,
        (85, 10),  # confirm.select
        (90, 10),  # tx.select
        (90, 20),  # tx.commit
        (90, 30),  # tx.rollback
    }
)

# methods followed by a content header and body frames, with the content class they expect
CONTENT_METHODS: Final[dict[Method, int]] = {BASIC_PUBLISH: CLASS_BASIC}


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

# phase -> {method on channel 0 -> next phase}; anything else on channel 0 is 504 (RabbitMQ)
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

# phases where frames on channels other than 0 may flow (only OPEN) or are dropped: after our
# Close until its Close-Ok, and after the connection ended (what is left of the last read)
CHANNEL_FRAMES_ALLOWED: Final = frozenset({CP.OPEN})
DISCARD_PHASES: Final = frozenset({CP.CLOSING, CP.CLOSED})


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
        """Advance on a channel-0 method, or raise 504/540 (DISCARD while closing or closed)."""
        phase = self.phase
        target = CONNECTION_TRANSITIONS[phase].get(method)
        if target is None:
            if phase in DISCARD_PHASES:
                return Next.DISCARD
            if method not in KNOWN_METHODS:
                raise errors.NotImplemented_(f"unknown method {method[0]}.{method[1]}", *method)
            raise errors.ChannelErrorHard(
                f"unexpected method {method[0]}.{method[1]} in connection state {phase.value}",
                *method,
            )
        self.phase = target
        return Next.DISPATCH

    def send_close(self) -> None:
        """We sent connection.close: from now on only close/close-ok count."""
        if self.phase is not CP.CLOSED:
            self.phase = CP.CLOSING

    def lost(self) -> None:
        """The socket is gone: whatever still arrives is discarded."""
        self.phase = CP.CLOSED


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
    ``max_message_size`` does. ``phase``, ``remaining`` and ``content_class`` are plain
    attributes so that a hot path may perform the content transitions inline (publish:
    AWAIT_HEADER with content_class 60; header: AWAIT_BODY with remaining = body size, or
    OPEN; last body frame: OPEN) and come back here for everything else.
    """

    __slots__ = ("channel", "content_class", "max_body_size", "phase", "remaining")

    def __init__(self, channel: int, max_body_size: int | None = None) -> None:
        self.channel = channel
        self.max_body_size = max_body_size
        self.phase = ChannelPhase.CLOSED
        self.remaining = 0  # body bytes still expected in AWAIT_BODY
        self.content_class = 0  # class of the content header expected in AWAIT_HEADER

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
            if phase is CH.CLOSED and method == CHANNEL_CLOSE_OK:
                # the close-ok of a close that crossed ours (both sides sent channel.close:
                # we answered the client's and freed the channel): late, harmless, dropped
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
            self.content_class = CONTENT_METHODS[method]
            return Next.EXPECT_CONTENT
        return Next.DISPATCH

    def receive_header(self, class_id: int, body_size: int) -> Next:
        """Content header: CONTINUE (body frames follow) or COMPLETE (empty body)."""
        if self.phase is not CH.AWAIT_HEADER:
            return self.out_of_phase(FRAME_HEADER)
        if class_id != self.content_class:
            raise errors.UnexpectedFrame(
                f"expected content header for class {self.content_class}, "
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
        if self.phase is not CH.AWAIT_BODY:
            return self.out_of_phase(FRAME_BODY)
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

    def out_of_phase(self, got: int) -> Next:
        """A content frame of type ``got`` outside its phase: DISCARD while closing, else raise."""
        if self.phase is CH.CLOSING:
            return Next.DISCARD
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


# --- documentation -----------------------------------------------------------------------------


def method_name(method: Method) -> str:
    """``Class.Method`` as pamqp names it, e.g. ``Connection.StartOk``."""
    cls: type[base.Frame] = commands.INDEX_MAPPING[method[0] << 16 | method[1]]
    return cls.name


def _rows(transitions: dict[Method, enum.Enum]) -> list[tuple[str, str]]:
    """(methods, next phase) per target phase, methods sorted, targets in table order."""
    grouped: dict[str, list[str]] = {}
    for method, target in transitions.items():
        grouped.setdefault(str(target.value), []).append(method_name(method))
    return [(", ".join(sorted(names)), target) for target, names in grouped.items()]


def markdown() -> str:
    """The connection and channel tables as markdown (docs/architecture.md embeds this)."""
    lines = [
        "Connection (server side, after it sent `Connection.Start`; methods on channel 0):",
        "",
        "| phase | accepts | next phase |",
        "|---|---|---|",
    ]
    for cphase, ctransitions in CONNECTION_TRANSITIONS.items():
        for methods, target in _rows(dict(ctransitions)) or [("nothing (socket closed)", "")]:
            lines.append(f"| {cphase.value} | {methods} | {target} |")
    lines += [
        "",
        "Frames on other channels flow only in "
        + ", ".join(f"`{p.value}`" for p in CP if p in CHANNEL_FRAMES_ALLOWED)
        + "; in "
        + ", ".join(f"`{p.value}`" for p in CP if p in DISCARD_PHASES)
        + " everything but the listed channel-0 methods is discarded. Otherwise: an unknown "
        "method is 540, a method the phase does not accept 504, a content frame on channel 0 "
        "or a channel frame before `open` 505. The server's own close moves any phase to "
        "`closing`.",
        "",
        "Channel:",
        "",
        "| phase | accepts | next phase |",
        "|---|---|---|",
    ]
    for phase, transitions in CHANNEL_TRANSITIONS.items():
        for methods, target in _rows(dict(transitions)):
            lines.append(f"| {phase.value} | {methods} | {target} |")
        if phase is CH.OPEN:
            lines.append(
                f"| {CH.AWAIT_HEADER.value} | content header of the method's class "
                f"| {CH.AWAIT_BODY.value} ({CH.OPEN.value} if the body is empty) |"
            )
            lines.append(
                f"| {CH.AWAIT_BODY.value} | body frame "
                f"| {CH.AWAIT_BODY.value} ({CH.OPEN.value} once the body is complete) |"
            )
    lines += [
        "",
        f"Otherwise: any frame on a `{CH.CLOSED.value}` channel but `Channel.Open` is 504; on "
        f"an `{CH.OPEN.value}` channel an unknown method is 540, `Channel.Open` 504, any other "
        "method (server-to-client, or another class's) 503, a content frame 505; in "
        f"`{CH.AWAIT_HEADER.value}` / `{CH.AWAIT_BODY.value}` any other frame, a header of "
        "another class or more body than declared is 505, a body above the size limit 406; "
        f"in `{CH.CLOSING.value}` (the server sent `Channel.Close`) everything else is "
        "discarded.",
    ]
    return "\n".join(lines) + "\n"
