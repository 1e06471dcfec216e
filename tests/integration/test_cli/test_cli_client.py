"""`sievemq publish` and `sievemq tail` (built on aiormq) run as real subprocesses against a
real server: what they print, what the stream then holds, filters, following new messages,
stopping, and one-line errors with exit status 1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client
from sievemq.testing.pika_client import connect

TIMEOUT = 60


def sievemq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sievemq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture
def stream(server: ServerProcess, qname: str) -> str:
    conn = connect(server)
    conn.channel().queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    return qname


def _messages(server: ServerProcess, stream: str) -> int:
    with client(server) as http:
        return int(http.get(f"/api/queues/%2F/{stream}").json()["messages"])


def _publish_sample(server: ServerProcess, stream: str) -> None:
    base = ("publish", "--uri", server.url, "--stream", stream)
    red = sievemq(*base, "--filter-value", "red", "--header", "k=v", "hello")
    assert (red.returncode, red.stdout) == (
        0,
        f"published 1 message(s) to stream '{stream}', all confirmed\n",
    )
    blue = sievemq(*base, "--filter-value", "blue", "--count", "3", "b")
    assert blue.returncode == 0, blue.stderr
    lines = sievemq(*base, stdin="line one\nline two\n")
    assert lines.returncode == 0, lines.stderr
    assert "published 2 message(s)" in lines.stdout


def test_publish_then_tail_everything(server: ServerProcess, stream: str) -> None:
    _publish_sample(server, stream)
    assert _messages(server, stream) == 6
    tail = sievemq(
        "tail", "--uri", server.url, "--stream", stream, "--from", "first", "--count", "6"
    )
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == [
        "0\tred\thello",
        "1\tblue\tb",
        "2\tblue\tb",
        "3\tblue\tb",
        "4\t-\tline one",
        "5\t-\tline two",
    ]
    # --count stops early even though more messages are there
    two = sievemq("tail", "--uri", server.url, "--stream", stream, "--from", "2", "--count", "2")
    assert two.stdout.splitlines() == ["2\tblue\tb", "3\tblue\tb"]


def test_tail_filters_on_the_server(server: ServerProcess, stream: str) -> None:
    _publish_sample(server, stream)
    base = ("tail", "--uri", server.url, "--stream", stream, "--from", "first")
    red = sievemq(*base, "--filter", "red", "--count", "1", "--format", "json")
    assert red.returncode == 0, red.stderr
    (record,) = [json.loads(line) for line in red.stdout.splitlines()]
    assert record["offset"] == 0 and record["filter_value"] == "red"
    assert record["body"] == "hello" and record["headers"]["k"] == "v"
    assert record["body_encoding"] == "utf-8"
    # blue or unfiltered: 3 blue then the 2 lines published without a filter value
    either = sievemq(*base, "--filter", "blue", "--match-unfiltered", "--count", "5")
    assert [line.split("\t")[0] for line in either.stdout.splitlines()] == ["1", "2", "3", "4", "5"]
    sql = sievemq(*base, "--sql", "k = 'v'", "--count", "1")
    assert sql.stdout.splitlines() == ["0\tred\thello"]


def test_tail_follows_new_messages(server: ServerProcess, stream: str) -> None:
    tail = subprocess.Popen(
        [sys.executable, "-m", "sievemq", "tail", "--uri", server.url, "--stream", stream,
         "--count", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_for_consumer(server, stream)
        pub = sievemq("publish", "--uri", server.url, "--stream", stream, "--count", "2", "new")
        assert pub.returncode == 0, pub.stderr
        out, err = tail.communicate(timeout=TIMEOUT)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert out.splitlines() == ["0\t-\tnew", "1\t-\tnew"]


def test_tail_stops_on_sigterm(server: ServerProcess, stream: str) -> None:
    tail = subprocess.Popen(
        [sys.executable, "-m", "sievemq", "tail", "--uri", server.url, "--stream", stream],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_consumer(server, stream)
        tail.send_signal(signal.SIGTERM)
        _out, err = tail.communicate(timeout=TIMEOUT)
    finally:
        tail.kill()
    assert tail.returncode == 0, err


def _wait_for_consumer(server: ServerProcess, stream: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    with client(server) as http:
        while time.monotonic() < deadline:
            if http.get(f"/api/queues/%2F/{stream}").json()["consumers"] == 1:
                return
            time.sleep(0.1)
    raise AssertionError("the tail never subscribed")


def test_unknown_stream_is_named_and_exits_1(server: ServerProcess, qname: str) -> None:
    for command in (("tail",), ("publish", "body")):
        done = sievemq(*command, "--uri", server.url, "--stream", qname + "-none")
        assert done.returncode == 1
        assert done.stderr == f"sievemq {command[0]}: no stream '{qname}-none' in vhost '/'\n"
        assert done.stdout == ""


def test_bad_input_gets_one_line_and_exits_1(server: ServerProcess, stream: str) -> None:
    base = ("tail", "--uri", server.url, "--stream", stream)
    cases = {
        ("--from", "yesterday"): "--from 'yesterday': expected first, last, next",
        ("--match-unfiltered",): "--match-unfiltered needs --filter",
        ("--sql", "((( x"): "cannot consume from",
    }
    for extra, text in cases.items():
        done = sievemq(*base, *extra)
        assert done.returncode == 1, (extra, done.stderr)
        assert text in done.stderr and done.stderr.count("\n") == 1, done.stderr
    sql = sievemq(*base, "--sql", "((( x")
    assert "x-stream-filter-sql" in sql.stderr
    header = sievemq("publish", "--uri", server.url, "--stream", stream, "--header", "nokey", "b")
    assert header.returncode == 1 and "expected KEY=VALUE" in header.stderr
    bad_login = server.url.replace("guest:guest", "guest:wrong-secret")
    login = sievemq("tail", "--uri", bad_login, "--stream", stream)
    assert login.returncode == 1
    assert "wrong user or password" in login.stderr and "wrong-secret" not in login.stderr
    nothing = sievemq("tail", "--uri", "amqp://guest:guest@127.0.0.1:1/", "--stream", stream)
    assert nothing.returncode == 1 and "cannot connect to" in nothing.stderr
    assert nothing.stderr.count("\n") == 1, nothing.stderr


def test_http_sees_what_the_cli_published(server: ServerProcess, stream: str) -> None:
    """Cross-check with another client: the admin API's browser reads the same record."""
    done = sievemq("publish", "--uri", server.url, "--stream", stream, "--filter-value", "x", "hi")
    assert done.returncode == 0
    with client(server) as http:
        page = http.get(f"/api/streams/%2F/{stream}/messages", params={"offset": 0}).json()
    (message,) = page["messages"]
    assert (message["offset"], message["payload"], message["filter_values"]) == (0, "hi", ["x"])
    assert message["properties"]["delivery_mode"] == 2
