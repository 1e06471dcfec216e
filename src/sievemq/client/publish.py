"""`sievemq publish`: publish to a stream with publisher confirms, one message (the body
argument, ``--count`` times) or one per line of standard input; a filter value and headers
may be given. Exits 0 once every message is confirmed, 1 when any was not."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import aiormq
import aiormq.exceptions
from pamqp.commands import Basic

from sievemq.client.common import (
    ClientError,
    check_stream,
    connected,
    reply_text,
)

WINDOW = 256  # messages in flight (published, not confirmed yet)


def headers_of(args: argparse.Namespace) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientError(f"--header {item!r}: expected KEY=VALUE")
        headers[key] = value
    if args.filter_value is not None:
        headers["x-stream-filter-value"] = args.filter_value
    return headers


def bodies(args: argparse.Namespace, stdin: TextIO) -> Iterator[bytes]:
    if args.body is not None:
        if args.count < 1:
            raise ClientError("--count must be at least 1")
        body = args.body.encode()
        for _ in range(args.count):
            yield body
        return
    if args.count != 1:
        raise ClientError("--count needs a body argument (stdin lines are published once each)")
    for line in stdin:
        yield line.rstrip("\n").encode()


async def publish(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    properties = Basic.Properties(delivery_mode=2, headers=headers_of(args) or None)
    messages = bodies(args, stdin)
    async with connected(args.uri) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await check_stream(channel, args.stream, args.uri)
        sent = confirmed = 0
        in_flight: set[asyncio.Future[Any]] = set()

        async def settle(wait_for: int) -> None:
            nonlocal confirmed
            while len(in_flight) > wait_for:
                finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    in_flight.discard(future)
                    if isinstance(future.result(), Basic.Ack):
                        confirmed += 1

        try:
            for body in messages:
                in_flight.add(
                    asyncio.ensure_future(
                        channel.basic_publish(
                            body,
                            routing_key=args.stream,
                            properties=properties,
                            mandatory=True,
                        )
                    )
                )
                sent += 1
                await settle(WINDOW - 1)
            await settle(0)
        except aiormq.exceptions.AMQPError as error:
            raise ClientError(
                f"publishing to '{args.stream}' failed after {confirmed} confirmed: "
                f"{reply_text(error)}"
            ) from None
    if confirmed != sent:
        raise ClientError(f"{sent - confirmed} of {sent} messages to '{args.stream}' were nacked")
    print(f"published {sent} message(s) to stream '{args.stream}', all confirmed", file=out)
    return 0


def run_publish(
    args: argparse.Namespace,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    try:
        return asyncio.run(publish(args, stdin, out))
    except ClientError as error:
        print(f"sievemq publish: {error}", file=err)
        return 1
