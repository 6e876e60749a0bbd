"""A throw-away PKI for the TLS tests (tests/test_security_e2e.py), made with `cryptography`.

    pki = Pki(tmp_dir)                       # a self-signed CA: pki.ca_pem
    srv = pki.server()                       # CN=localhost, SAN IP 127.0.0.1 + DNS localhost
    cli = pki.client("alice")                # subject O=groupcoord-tests, CN=alice
    srv.cert, srv.key                        # PEM file paths (key: unencrypted PKCS#8)
    cli.principal                            # "User:CN=alice,O=groupcoord-tests"

Every file is written under the given directory. EC P-256 keys (fast to make, accepted by
OpenSSL, librdkafka and Python's ssl). The extensions are the ones strict verifiers ask for
(Python 3.13's default context sets VERIFY_X509_STRICT): a critical basicConstraints and
keyUsage on the CA, authority and subject key identifiers, extendedKeyUsage on the leaves.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from typing import NamedTuple, Optional, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORG = "groupcoord-tests"


class Issued(NamedTuple):
    cert: str            # PEM certificate path
    key: str             # PEM private key path
    subject: x509.Name

    @property
    def principal(self) -> str:
        """Kafka's default SSL principal: User: + the subject as an RFC 2253 string (most
        specific attribute first: CN=...,O=...)."""
        return "User:" + self.subject.rfc4514_string()


def _name(cn: str, org: Optional[str] = ORG, ou: Optional[str] = None) -> x509.Name:
    # Least specific first in the DER (O, OU, CN): RFC 2253 prints it reversed, CN first.
    attrs = []
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write_key(path: str, key) -> None:
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(path: str, cert: x509.Certificate) -> None:
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


class Pki:
    def __init__(self, directory, ca_name: str = "groupcoord test CA", days: int = 30):
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.days = days
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca_subject = _name(ca_name)
        now = datetime.datetime.now(datetime.timezone.utc)
        ski = x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key())
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(self.ca_subject).issuer_name(self.ca_subject)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                           critical=False)
            .sign(self._ca_key, hashes.SHA256()))
        self.ca_pem = os.path.join(self.dir, "ca.pem")
        _write_cert(self.ca_pem, self._ca_cert)
        self._n = 0

    def _issue(self, stem: str, subject: x509.Name, eku, san: Sequence = ()) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder()
             .subject_name(subject).issuer_name(self.ca_subject)
             .public_key(key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=self.days))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                          key_encipherment=False, data_encipherment=False,
                                          key_agreement=True, key_cert_sign=False,
                                          crl_sign=False, encipher_only=False,
                                          decipher_only=False), critical=True)
             .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                            critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 self._ca_key.public_key()), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(list(san)), critical=False)
        cert = b.sign(self._ca_key, hashes.SHA256())
        self._n += 1
        base = os.path.join(self.dir, "%s-%d" % (stem, self._n))
        issued = Issued(base + ".pem", base + ".key", subject)
        _write_cert(issued.cert, cert)
        _write_key(issued.key, key)
        return issued

    def server(self, ips: Sequence[str] = ("127.0.0.1",),
               dns: Sequence[str] = ("localhost",)) -> Issued:
        san = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        san += [x509.DNSName(d) for d in dns]
        return self._issue("server", _name(dns[0] if dns else ips[0]),
                           ExtendedKeyUsageOID.SERVER_AUTH, san)

    def client(self, cn: str, org: Optional[str] = ORG, ou: Optional[str] = None) -> Issued:
        return self._issue("client-" + "".join(c if c.isalnum() else "_" for c in cn),
                           _name(cn, org, ou), ExtendedKeyUsageOID.CLIENT_AUTH)
