"""py4j's callback server accept loop with a listening socket numbered past FD_SETSIZE (1024):
``select.select`` cannot wait on it (the cause of a ``foreachBatch`` that hung in a process
holding many descriptors), ``poll_select`` can, and ``install`` puts it in py4j's place."""

from __future__ import annotations

import importlib
import os
import resource
import select
import socket
from collections.abc import Iterator

import pytest

from sievemq.spark.callback_server import install, poll_select

FD_SETSIZE = 1024


@pytest.fixture
def high_socket() -> Iterator[socket.socket]:
    """A listening socket whose descriptor is numbered 1024 or more, as in a process holding
    about a thousand descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FD_SETSIZE + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held: list[int] = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < FD_SETSIZE:
            held.append(fd)
        os.close(fd)
        server = socket.create_server(("127.0.0.1", 0))
        assert server.fileno() >= FD_SETSIZE
        yield server
        server.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_select_cannot_wait_on_it_poll_select_can(high_socket: socket.socket) -> None:
    with pytest.raises(ValueError, match="filedescriptor out of range"):
        select.select([high_socket], [], [], 0)
    assert poll_select([high_socket], [], [], 0) == ([], [], [])
    with socket.create_connection(high_socket.getsockname()):
        assert poll_select([high_socket], [], [], 10) == ([high_socket], [], [])
        conn, _ = high_socket.accept()
        with conn:
            assert poll_select([], [conn], [], 10) == ([], [conn], [])


def test_install_gives_py4j_the_poll_select() -> None:
    java_gateway = importlib.import_module("py4j.java_gateway")
    install()
    install()  # (idempotent)
    assert java_gateway.select.select is poll_select
    assert java_gateway.select.POLLIN == select.POLLIN  # the rest of the module is there
