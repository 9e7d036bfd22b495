"""A certificate authority for tests: server certificates for test names and loopback addresses.

Made fresh for each test session (keys never leave the temporary folder), with
``cryptography``. A certificate names its hosts as DNS names and its
addresses as IP subject alternative names, so clients that verify (``ssl``
with :meth:`TestCA.client_context`) accept it exactly as they would a real
site's. Scrapy itself does not verify certificates by default; the CA is
still real so that tests of verifying clients (and of the crawler, once told
to verify) mean something.

>>> ca = TestCA(tmp_path)
>>> cert, key = ca.issue(["a.test", "www.a.test"], ["127.0.0.2", "::1"])
>>> ctx = ca.server_context(["a.test"], ["127.0.0.2"])   # for an ssl server socket
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=2)


class TestCA:
    """A root CA in ``folder``; issues leaf certificates signed by it."""

    __test__ = False  # not a pytest test class

    def __init__(self, folder: Path, name: str = "broadcrawl test CA") -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = self.folder / "ca.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._issued = 0

    def issue(self, names: Sequence[str], addresses: Sequence[str] = (), client: bool = False
              ) -> tuple[Path, Path]:
        """A server certificate for ``names`` and ``addresses``: (cert PEM, key PEM) paths.

        The certificate file holds the leaf and the CA, as a server sends them.
        ``client``: it may also authenticate a client (a Redis node dialling
        another over the cluster bus presents its own certificate).
        """
        if not names and not addresses:
            raise ValueError("a certificate needs a name or an address")
        alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        alt += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        usages = [ExtendedKeyUsageOID.SERVER_AUTH]
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        return self._leaf("leaf", names[0] if names else addresses[0], usages, alt)

    def issue_client(self, name: str) -> tuple[Path, Path]:
        """A client certificate for ``name`` (extended key usage CLIENT_AUTH only, as
        servers that verify clients require): (cert PEM, key PEM) paths."""
        return self._leaf("client", name, [ExtendedKeyUsageOID.CLIENT_AUTH])

    def _leaf(self, kind: str, common: str, usages: list[x509.ObjectIdentifier],
              alt: list[x509.GeneralName] | None = None) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        self._issued += 1
        cert_path = self.folder / f"{kind}{self._issued}.pem"
        key_path = self.folder / f"{kind}{self._issued}.key"
        chain = cert.public_bytes(serialization.Encoding.PEM)
        if kind == "leaf":
            chain += self.cert.public_bytes(serialization.Encoding.PEM)
        cert_path.write_bytes(chain)
        key_path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        return cert_path, key_path

    def server_context(self, names: Sequence[str], addresses: Sequence[str] = ()
                       ) -> ssl.SSLContext:
        """An ``ssl`` server context with a fresh certificate for ``names``/``addresses``."""
        cert_path, key_path = self.issue(names, addresses)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        """An ``ssl`` client context that trusts this CA only (and verifies names)."""
        return ssl.create_default_context(cafile=str(self.cert_path))
