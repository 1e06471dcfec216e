"""Errors that name their AMQP reply code.

Raised deep in the code, mapped to connection.close or channel.close in one place (the
connection handler). Reply texts start with the code name, as RabbitMQ's do:
``PRECONDITION_FAILED - invalid arg 'x-max-age' ...``; the wire text is cut to 255 bytes.
"""

from __future__ import annotations


class AMQPError(Exception):
    """Base: an error that the peer is told about with a reply code and text."""

    reply_code: int = 541
    name: str = "INTERNAL_ERROR"
    closes_connection: bool = True

    def __init__(self, explanation: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(explanation)
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        """``NAME - explanation``, cut to the 255 bytes a shortstr can hold."""
        text = f"{self.name} - {self.explanation}"
        raw = text.encode("utf-8")
        if len(raw) <= 255:
            return text
        return raw[:255].decode("utf-8", errors="ignore")


class ChannelError(AMQPError):
    """Soft error: closes only the channel (403, 404, 405, 406)."""

    closes_connection = False


class ConnectionError_(AMQPError):
    """Hard error: closes the whole connection (5xx, and 320/402 from the server)."""

    closes_connection = True


class AccessRefused(ChannelError):
    reply_code, name = 403, "ACCESS_REFUSED"


class NotFound(ChannelError):
    reply_code, name = 404, "NOT_FOUND"


class ResourceLocked(ChannelError):
    reply_code, name = 405, "RESOURCE_LOCKED"


class PreconditionFailed(ChannelError):
    reply_code, name = 406, "PRECONDITION_FAILED"


class ConnectionForced(ConnectionError_):
    reply_code, name = 320, "CONNECTION_FORCED"


class InvalidPath(ConnectionError_):
    reply_code, name = 402, "INVALID_PATH"


class ConnectionAccessRefused(ConnectionError_):
    """403 at connection level: failed login or vhost access (connection.close)."""

    reply_code, name = 403, "ACCESS_REFUSED"


class FrameError(ConnectionError_):
    reply_code, name = 501, "FRAME_ERROR"


class SyntaxError_(ConnectionError_):
    reply_code, name = 502, "SYNTAX_ERROR"


class CommandInvalid(ConnectionError_):
    reply_code, name = 503, "COMMAND_INVALID"


class ChannelErrorHard(ConnectionError_):
    """504 CHANNEL_ERROR: a frame for a channel that is not open, or reopening one."""

    reply_code, name = 504, "CHANNEL_ERROR"


class UnexpectedFrame(ConnectionError_):
    reply_code, name = 505, "UNEXPECTED_FRAME"


class ResourceError(ConnectionError_):
    reply_code, name = 506, "RESOURCE_ERROR"


class ChannelResourceError(ChannelError):
    """506 on channel.close: one operation could not get a resource the node ran out of
    for a moment (file descriptors); the connection's other channels go on."""

    reply_code, name = 506, "RESOURCE_ERROR"


class NotAllowed(ConnectionError_):
    reply_code, name = 530, "NOT_ALLOWED"


class NotImplemented_(ConnectionError_):
    reply_code, name = 540, "NOT_IMPLEMENTED"


class InternalError(ConnectionError_):
    reply_code, name = 541, "INTERNAL_ERROR"
