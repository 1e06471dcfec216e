"""A self-signed certificate for a TLS gateway under test (``--tls-cert``/``--tls-key``).

Made with the ``openssl`` command line tool, for 127.0.0.1 and localhost, so that a client
can verify it fully (chain and host name) with ``CertFiles.client_context()``.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertFiles", "make_cert", "tls_args"]


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        """What a careful client does: verify the chain and the host name against our cert."""
        context = ssl.create_default_context(cafile=str(self.cert))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise RuntimeError("making a test certificate needs the `openssl` command line tool")
    return path


def make_cert(directory: Path) -> CertFiles:
    """A self-signed RSA certificate for 127.0.0.1/localhost and its unencrypted key."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            _openssl(),
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return CertFiles(cert, key)


def tls_args(files: CertFiles) -> tuple[str, ...]:
    """``sievemq serve`` arguments for an AMQPS listener on a free port with ``files``."""
    return ("--tls-cert", str(files.cert), "--tls-key", str(files.key), "--amqps-port", "0")
