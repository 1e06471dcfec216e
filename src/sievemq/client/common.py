"""What `sievemq publish` and `sievemq tail` share: the connection, the stream check and
the error texts (one line naming the problem, exit status 1)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from urllib.parse import unquote, urlsplit, urlunsplit

import aiormq
import aiormq.exceptions


class ClientError(Exception):
    """A problem to report in one line; the command exits 1."""


def redacted(uri: str) -> str:
    """The URI without its password, for messages."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def vhost_of(uri: str) -> str:
    path = urlsplit(uri).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def reply_text(error: BaseException) -> str:
    """The server's reply text of an aiormq error (``404 NOT_FOUND - ...``), else its repr."""
    for arg in error.args:
        frame = arg
        reply = getattr(frame, "reply_text", None)
        if reply:
            code = getattr(frame, "reply_code", None)
            return f"{code} {reply}" if code else str(reply)
    text = " ".join(str(a) for a in error.args if isinstance(a, str))
    return text or type(error).__name__


def quiet_library_logs() -> None:
    """aiormq logs connection failures itself; the command reports them in one line."""
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)


@contextlib.asynccontextmanager
async def connected(uri: str) -> AsyncIterator[aiormq.abc.AbstractConnection]:
    """An open connection; a refused socket or a failed login is a ClientError."""
    quiet_library_logs()
    try:
        connection = await aiormq.connect(uri)
    except aiormq.exceptions.ProbableAuthenticationError:
        raise ClientError(f"cannot log in to {redacted(uri)}: wrong user or password") from None
    except aiormq.exceptions.AMQPError as error:
        if error.args and isinstance(error.args[0], int):  # (errno, text): no socket
            raise ClientError(f"cannot connect to {redacted(uri)}: {error.args[-1]}") from None
        raise ClientError(f"cannot open {redacted(uri)}: {reply_text(error)}") from None
    except OSError as error:
        raise ClientError(f"cannot connect to {redacted(uri)}: {error}") from None
    try:
        yield connection
    finally:
        with contextlib.suppress(Exception):
            await connection.close()


async def check_stream(channel: aiormq.abc.AbstractChannel, stream: str, uri: str) -> None:
    """A passive declare: an unknown stream is a ClientError naming it."""
    try:
        await channel.queue_declare(stream, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        raise ClientError(f"no stream '{stream}' in vhost '{vhost_of(uri)}'") from None
    except aiormq.exceptions.AMQPError as error:
        raise ClientError(f"stream '{stream}': {reply_text(error)}") from None
