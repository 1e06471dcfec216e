"""The server-side TLS context of the AMQPS listener (cold path: built once at start-up).

Loading fails early and plainly: a missing or unreadable certificate/key, or a key that does
not match the certificate, raises ``TLSConfigError`` with a one-line message naming the flags,
so `sievemq serve` exits 2 before it listens anywhere instead of printing a traceback.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class TLSConfigError(ValueError):
    """The certificate or key given with --tls-cert/--tls-key cannot be used."""


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for AMQPS: TLS 1.2 or newer, no client certificates asked for."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not path.is_file():
            raise TLSConfigError(f"{flag} {path}: no such file")
    try:
        # a passphrase-protected key fails here instead of prompting on the terminal
        context.load_cert_chain(certfile=str(cert), keyfile=str(key), password=_no_password)
    except ssl.SSLError as exc:
        raise TLSConfigError(
            f"cannot load --tls-cert {cert} with --tls-key {key}: not a PEM certificate and its "
            f"matching unencrypted private key ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise TLSConfigError(
            f"cannot read --tls-cert {cert} or --tls-key {key}: {exc.strerror or exc}"
        ) from None
    return context


def _no_password() -> bytes:
    return b""
