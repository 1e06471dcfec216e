"""`sievemq tail`: print a stream's messages as they arrive, optionally filtered by the
server (``x-stream-filter``, ``x-stream-match-unfiltered``, ``x-stream-filter-sql``), from
an offset spec (first, last, next, an offset, an ISO time); stops after ``--count``
messages, or at Ctrl-C / SIGTERM (exit 0)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import signal
import sys
from typing import Any, TextIO

import aiormq
import aiormq.abc
import aiormq.exceptions

from sievemq.client.common import (
    ClientError,
    check_stream,
    connected,
    reply_text,
)


def offset_spec(start: str) -> Any:
    """x-stream-offset for --from: a keyword, an integer offset, or a timestamp."""
    if start in ("first", "last", "next"):
        return start
    try:
        return int(start)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(start)
    except ValueError:
        raise ClientError(
            f"--from {start!r}: expected first, last, next, an offset or an ISO time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when


def consume_arguments(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"x-stream-offset": offset_spec(args.start)}
    if args.filter:
        values = [v for v in args.filter.split(",") if v]
        out["x-stream-filter"] = values[0] if len(values) == 1 else values
    if args.match_unfiltered:
        if not args.filter:
            raise ClientError("--match-unfiltered needs --filter")
        out["x-stream-match-unfiltered"] = True
    if args.sql:
        out["x-stream-filter-sql"] = args.sql
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def render(message: aiormq.abc.DeliveredMessage, fmt: str) -> str:
    """One line: ``offset<TAB>filter value<TAB>body`` (text), or a JSON object."""
    props = message.header.properties
    headers = dict(props.headers or {})
    offset = headers.pop("x-stream-offset", None)
    filter_value = headers.get("x-stream-filter-value")
    try:
        text: str | None = message.body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if fmt == "json":
        delivery = message.delivery
        record = {
            "offset": offset,
            "routing_key": getattr(delivery, "routing_key", None),
            "filter_value": _jsonable(filter_value),
            "timestamp": _jsonable(props.timestamp),
            "headers": _jsonable(headers),
            "body": text if text is not None else base64.b64encode(message.body).decode(),
            "body_encoding": "utf-8" if text is not None else "base64",
        }
        return json.dumps(record, ensure_ascii=False)
    shown = text if text is not None else "base64:" + base64.b64encode(message.body).decode()
    fv = "-" if filter_value is None else str(_jsonable(filter_value))
    return f"{offset!s}\t{fv}\t{shown}"


async def tail(args: argparse.Namespace, out: TextIO) -> int:
    if args.count is not None and args.count <= 0:
        raise ClientError("--count must be at least 1")
    arguments = consume_arguments(args)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    printed = 0
    async with connected(args.uri) as connection:
        channel = await connection.channel()
        await check_stream(channel, args.stream, args.uri)
        await channel.basic_qos(prefetch_count=max(1, args.prefetch))

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            nonlocal printed
            if done.is_set():
                return  # past --count: deliveries already on their way are not shown
            out.write(render(message, args.format) + "\n")
            out.flush()
            printed += 1
            if args.count is not None and printed >= args.count:
                done.set()
            tag = getattr(message.delivery, "delivery_tag", None)
            if tag is not None:
                await message.channel.basic_ack(tag)

        try:
            await channel.basic_consume(args.stream, on_message, arguments=arguments)
        except aiormq.exceptions.AMQPError as error:
            raise ClientError(f"cannot consume from '{args.stream}': {reply_text(error)}") from None
        closing = asyncio.ensure_future(channel.closing)
        waiting = asyncio.ensure_future(done.wait())
        await asyncio.wait({closing, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not done.is_set():  # the server closed the channel or the connection
            why = closing.exception() if closing.done() and not closing.cancelled() else None
            text = reply_text(why) if why is not None else "closed by the server"
            raise ClientError(f"stream '{args.stream}': {text}")
        closing.cancel()
    return 0


def run_tail(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        return asyncio.run(tail(args, out))
    except ClientError as error:
        print(f"sievemq tail: {error}", file=err)
        return 1
