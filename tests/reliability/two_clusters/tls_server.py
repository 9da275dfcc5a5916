"""A TLS listener with a throwaway self-signed certificate, for "bad CA" error paths.

The HTTP fronts speak plain HTTP; to see what the controller prints when the management
cluster's certificate is not signed by the CA it was given, a client only needs to get as far
as the handshake, so this server does the handshake and nothing else.

(Module name unique on purpose: test directories share one module namespace.)
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import socket
import ssl
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(common_name: str) -> tuple[bytes, bytes]:
    """``(certificate PEM, key PEM)`` of a CA-capable self-signed certificate for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def ca_data(pem: bytes) -> str:
    """``certificate-authority-data`` as a kubeconfig (or ``--management-ca-data``) holds it."""
    return base64.b64encode(pem).decode()


class HandshakeOnlyServer:
    """Accepts TLS connections on 127.0.0.1 with its own certificate, then hangs up."""

    def __init__(self) -> None:
        cert, key = self_signed("karpenter-capi-test-apiserver")
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "cert.pem").write_bytes(cert)
            (Path(tmp) / "key.pem").write_bytes(key)
            self._context.load_cert_chain(Path(tmp) / "cert.pem", Path(tmp) / "key.pem")
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tls-handshake", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                with self._context.wrap_socket(conn, server_side=True):
                    pass

    def __enter__(self) -> HandshakeOnlyServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
