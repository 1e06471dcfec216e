"""TLS settings and the server context, without a server: pairing rule, env, loading errors."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from sievemq.gateway.net.tls import TLSConfigError, server_ssl_context
from sievemq.serve import ready_line
from sievemq.settings import Settings


def test_tls_is_off_by_default_and_amqps_port_is_5671() -> None:
    settings = Settings()
    assert not settings.tls_enabled
    assert settings.amqps_port == 5671


@pytest.mark.parametrize("given", [{"tls_cert": Path("c.pem")}, {"tls_key": Path("k.pem")}])
def test_cert_and_key_come_together(given: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match="--tls-cert and --tls-key must be given together"):
        Settings(**given)


def test_env_sets_the_tls_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIEVEMQ_AMQPS_PORT", "0")
    monkeypatch.setenv("SIEVEMQ_TLS_CERT", "/x/cert.pem")
    monkeypatch.setenv("SIEVEMQ_TLS_KEY", "/x/key.pem")
    settings = Settings()
    assert settings.amqps_port == 0 and settings.tls_enabled
    assert settings.tls_key == Path("/x/key.pem")


def test_ready_line_field_order() -> None:
    assert ready_line("h:1", "http://h:3") == "sievemq ready amqp=h:1 admin=http://h:3"
    assert (
        ready_line("h:1", "http://h:3", "h:2")
        == "sievemq ready amqp=h:1 amqps=h:2 admin=http://h:3"
    )
    assert (
        ready_line("h:1", "http://h:3", "h:2", "h:4", "h:5")
        == "sievemq ready amqp=h:1 amqps=h:2 stream=h:4 streams=h:5 admin=http://h:3"
    )


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("these tests need the `openssl` command line tool on PATH")
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-subj", "/CN=t"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return d / "cert.pem", d / "key.pem"


def test_context_is_server_side_and_refuses_below_tls_1_2(pem: tuple[Path, Path]) -> None:
    context = server_ssl_context(*pem)
    assert context.protocol == ssl.PROTOCOL_TLS_SERVER
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE  # clients are not asked for a certificate


def test_missing_cert_names_the_flag(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    with pytest.raises(TLSConfigError, match=r"--tls-cert .*: no such file"):
        server_ssl_context(tmp_path / "absent.pem", pem[1])


def test_not_a_key_is_a_config_error(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    with pytest.raises(TLSConfigError, match="cannot load --tls-cert"):
        server_ssl_context(pem[0], junk)


def test_encrypted_key_fails_instead_of_prompting(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    openssl = shutil.which("openssl")
    assert openssl is not None
    locked = tmp_path / "locked.pem"
    subprocess.run(
        [
            *(openssl, "pkey", "-in", str(pem[1]), "-aes256", "-passout", "pass:secret"),
            *("-out", str(locked)),
        ],
        check=True,
        capture_output=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    with pytest.raises(TLSConfigError, match="unencrypted private key"):
        server_ssl_context(pem[0], locked)
