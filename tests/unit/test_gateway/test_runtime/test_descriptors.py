"""The descriptor budget: how the process's limit is split (docs/compatibility.md)."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest

from sievemq.amqp import errors
from sievemq.gateway.runtime import descriptors
from sievemq.storage import handles


@pytest.mark.parametrize(
    ("total", "internal", "sockets", "files"),
    [
        (256, 64, 96, 96),
        (1024, 64, 480, 480),
        (524_288, 64, 4096, 520_128),  # a typical hard limit: connections capped at 4096
        (64, 16, 24, 24),  # below 256 the internal share is a quarter
    ],
)
def test_the_limit_is_split_as_documented(
    total: int, internal: int, sockets: int, files: int
) -> None:
    budget = descriptors.plan(total, 4096)
    assert (budget.total, budget.internal, budget.sockets, budget.open_files) == (
        total,
        internal,
        sockets,
        files,
    )


def test_fewer_connections_leave_more_for_storage() -> None:
    budget = descriptors.plan(1024, max_connections=100)
    assert (budget.sockets, budget.open_files) == (100, 860)


def test_an_explicit_max_open_files_is_kept_when_smaller_and_lowered_when_larger() -> None:
    assert descriptors.plan(1024, 4096, max_open_files=100).open_files == 100
    assert descriptors.plan(1024, 4096, max_open_files=2048).open_files == 480


def test_the_soft_limit_is_what_the_process_may_open() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert descriptors.soft_limit() == soft
    assert 0 < descriptors.open_descriptors() <= soft


def test_running_out_is_a_506_on_the_channel_naming_the_limit() -> None:
    error = OSError(errno.EMFILE, "Too many open files")
    assert descriptors.is_exhausted(error)
    assert not descriptors.is_exhausted(OSError(errno.ENOENT, "gone"))
    reply = descriptors.exhausted_error(error)
    assert isinstance(reply, errors.ChannelError)
    assert reply.reply_code == 506
    assert f"this process may open {descriptors.soft_limit()}" in reply.reply_text
    assert reply.reply_text.startswith("RESOURCE_ERROR - out of file descriptors")


def test_retrying_gives_back_idle_descriptors_then_tries_once_more(tmp_path: Path) -> None:
    cached = handles.shared.file(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    cached.acquire()
    cached.release()
    assert cached.fd >= 0
    calls: list[int] = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return 7

    assert handles.retrying(flaky) == 7
    assert len(calls) == 2
    assert cached.fd == -1  # the idle descriptor was given back
