"""The AMQPS (TLS) listener: a real server started with --tls-cert/--tls-key.

The certificate is self-signed, generated per module with the `openssl` CLI, and names
127.0.0.1 so clients verify it fully (hostname included) against a context that trusts it.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected
from sievemq.testing.tls import CertFiles, make_cert, tls_args

pytestmark = pytest.mark.timeout(60)

N = 50
FIRST = {"x-stream-offset": "first"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    return make_cert(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certs: CertFiles
) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("tls") / "data", tls_args(certs)).start()
    yield proc
    assert proc.running, f"server died during the module\nstderr:\n{proc.stderr()}"
    code = proc.stop()
    assert code == 0, f"exit status {code} after SIGTERM\nstderr:\n{proc.stderr()}"


def pika_tls_params(server: ServerProcess, certs: CertFiles) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host=server.host,
        port=server.amqps_port,
        ssl_options=pika.SSLOptions(certs.client_context(), server_hostname=server.host),
        connection_attempts=1,
        blocked_connection_timeout=10,
    )


def pika_roundtrip(params: pika.ConnectionParameters, queue: str) -> list[bytes]:
    """Declare a stream, publish N with confirms, read them all back from `first`."""
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(N):
            ch.basic_publish("", queue, f"m{i}".encode(), mandatory=True)  # raises if nacked
        ch.basic_qos(prefetch_count=20)
        return [body for _, _, body in consume_expected(ch, queue, N, FIRST)]
    finally:
        if conn.is_open:
            conn.close()


def expected() -> list[bytes]:
    return [f"m{i}".encode() for i in range(N)]


def test_ready_line_names_the_tls_port_between_amqp_and_admin(tls_server: ServerProcess) -> None:
    line = next(x for x in tls_server.stdout_lines if x.startswith("sievemq ready"))
    assert re.fullmatch(
        r"sievemq ready amqp=\S+:\d+ amqps=\S+:\d+ stream=\S+:\d+ streams=\S+:\d+"
        r" admin=http://\S+:\d+",
        line,
    )
    assert tls_server.amqps_port not in (0, tls_server.amqp_port)


def test_pika_over_tls_publishes_with_confirms_and_consumes_from_first(
    tls_server: ServerProcess, certs: CertFiles, qname: str
) -> None:
    assert pika_roundtrip(pika_tls_params(tls_server, certs), qname) == expected()


def test_spark_sink_publisher_over_amqps_verifies_the_certificate(
    tls_server: ServerProcess, certs: CertFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Spark sink's publisher on amqps:// checks the chain and host name against the
    system trust store: refused without our cert in it, publishing once it is there."""
    from sievemq.spark.sink import SinkOptions, publish_rows
    from sievemq.storage.layout import stream_directory
    from sievemq.storage.reader import disk_end

    url = f"amqps://guest:guest@{tls_server.host}:{tls_server.amqps_port}/%2F"
    rows = [(f"m{i}".encode(), "tls-sink", (), ()) for i in range(N)]
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.cert.parent / "missing.pem"))
    with pytest.raises(RuntimeError, match="CERTIFICATE_VERIFY_FAILED"):
        publish_rows(SinkOptions(url, "tls-sink"), rows, "spark:tls:0", 0)
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.cert))
    assert publish_rows(SinkOptions(url, "tls-sink"), rows, "spark:tls:0", 0) == N
    assert publish_rows(SinkOptions(url, "tls-sink"), rows, "spark:tls:0", 0) == N  # replay
    assert disk_end(stream_directory(tls_server.data_dir, "/", "tls-sink")) == N


def test_the_plain_listener_keeps_serving_alongside_tls(
    tls_server: ServerProcess, qname: str
) -> None:
    params = pika.URLParameters(tls_server.url)
    assert pika_roundtrip(params, qname) == expected()


async def test_aio_pika_over_amqps_url(
    tls_server: ServerProcess, certs: CertFiles, qname: str
) -> None:
    url = f"amqps://guest:guest@{tls_server.host}:{tls_server.amqps_port}/"
    conn = await aio_pika.connect(url, ssl_context=certs.client_context(), timeout=10)
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=20)
        queue = await ch.declare_queue(qname, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(N):
            await ch.default_exchange.publish(aio_pika.Message(f"m{i}".encode()), qname)
        got: list[bytes] = []
        async with queue.iterator(arguments={"x-stream-offset": "first"}) as messages:
            async for message in messages:
                got.append(message.body)
                await message.ack()
                if len(got) == N:
                    break
    assert got == expected()


def test_plain_text_client_on_tls_port_is_dropped_tls_client_unaffected(
    tls_server: ServerProcess, certs: CertFiles, qname: str
) -> None:
    conn = pika.BlockingConnection(pika_tls_params(tls_server, certs))
    try:
        ch = conn.channel()
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        ch.basic_publish("", qname, b"before")
        # an AMQP client that forgot TLS: its protocol header is not a TLS ClientHello
        with socket.create_connection((tls_server.host, tls_server.amqps_port), timeout=10) as raw:
            raw.sendall(b"AMQP\x00\x00\x09\x01")
            received = b""
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    chunk = raw.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += chunk
            else:
                pytest.fail("the server kept a plain-text connection open on the TLS port")
        assert b"AMQP" not in received  # never spoke AMQP in clear text
        ch.basic_publish("", qname, b"after")  # the TLS connection opened before still works
        ch.basic_qos(prefetch_count=10)
        got = [body for _, _, body in consume_expected(ch, qname, 2, FIRST)]
        assert got == [b"before", b"after"]
    finally:
        if conn.is_open:
            conn.close()
    # and a new TLS client is served too
    assert pika_roundtrip(pika_tls_params(tls_server, certs), qname + "-new") == expected()


def test_sigterm_closes_tls_connections_with_320(tmp_path: Path, certs: CertFiles) -> None:
    srv = ServerProcess(tmp_path / "data", tls_args(certs)).start()
    try:
        conn = pika.BlockingConnection(pika_tls_params(srv, certs))
        conn.channel()
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.2)
        assert closed.value.reply_code == 320
        assert srv.proc.wait(15) == 0, srv.stderr()
    finally:
        if srv.running:
            srv.stop()


def run_serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "sievemq", "serve", "--data-dir", str(data_dir)),
            *("--amqp-port", "0", "--admin-port", "0", "--amqps-port", "0"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cert_without_key_exits_2_naming_both_flags(tmp_path: Path, certs: CertFiles) -> None:
    done = run_serve(tmp_path, "--tls-cert", str(certs.cert))
    assert done.returncode == 2
    assert "--tls-cert and --tls-key must be given together" in done.stderr
    assert "Traceback" not in done.stderr
    assert "sievemq ready" not in done.stdout


def test_missing_key_file_exits_2_with_a_clear_message(tmp_path: Path, certs: CertFiles) -> None:
    missing = tmp_path / "nope.pem"
    done = run_serve(tmp_path, "--tls-cert", str(certs.cert), "--tls-key", str(missing))
    assert done.returncode == 2
    assert f"--tls-key {missing}: no such file" in done.stderr
    assert "Traceback" not in done.stderr
    assert "sievemq ready" not in done.stdout


def test_key_of_another_certificate_exits_2(tmp_path: Path, certs: CertFiles) -> None:
    other = make_cert(tmp_path)
    done = run_serve(tmp_path / "d", "--tls-cert", str(certs.cert), "--tls-key", str(other.key))
    assert done.returncode == 2
    assert "cannot load --tls-cert" in done.stderr and "matching" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_a_cert_there_is_no_tls_listener(server: ServerProcess) -> None:
    line = next(x for x in server.stdout_lines if x.startswith("sievemq ready"))
    assert "amqps=" not in line and server.amqps_port == 0


async def test_handshake_negotiates_tls_1_2_or_newer(
    tls_server: ServerProcess, certs: CertFiles
) -> None:
    _reader, writer = await asyncio.open_connection(
        tls_server.host,
        tls_server.amqps_port,
        ssl=certs.client_context(),
        server_hostname=tls_server.host,
    )
    try:
        assert writer.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
    finally:
        writer.close()
        await writer.wait_closed()
