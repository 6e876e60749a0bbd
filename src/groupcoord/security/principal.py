"""Kafka principals: "Type:name" strings ("User:alice"), and the principal of an SSL client
certificate under Kafka's default mapping: "User:" + the subject as Java's
X500Principal.getName() prints it (RFC 2253).

RFC 2253 as Java prints it (checked against Java 17 on certificates made by OpenSSL):
  - RDNs most specific first (the reverse of the certificate's order): CN=..,OU=..,O=..,C=..
  - a multi-valued RDN's attributes joined with "+" in the certificate's order
  - keywords only for CN, C, L, ST, O, OU, STREET, DC, UID; every other attribute is its OID
    with "#" + the lowercase hex of the value's DER encoding
  - in a value, each of , = + < > # ; " \\ is escaped with "\\" (Java escapes "=" and every
    "#" too, which RFC 2253 allows), and so is each leading and trailing space (or CR).
Python's ssl.SSLSocket.getpeercert() gives the decoded text, not the DER string type, so
for the OID form the type is the one the standard (and OpenSSL's default string mask)
uses: IA5String for emailAddress, PrintableString for serialNumber, dnQualifier and
jurisdictionCountryName, UTF8String for the rest. A certificate that stores such an attribute
as another string type (BMPString, TeletexString) prints differently from Java; the keyword
attributes print the same whatever their string type. An attribute Python names but this
table does not know is printed as name=value (Java would print its OID).
"""
from __future__ import annotations

from typing import Optional

__all__ = ["ANONYMOUS", "USER_TYPE", "parse_principal", "user_principal", "ssl_principal",
           "rfc2253_name"]

USER_TYPE = "User"
ANONYMOUS = "User:ANONYMOUS"

_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_UTF8, _PRINTABLE, _IA5 = 0x0C, 0x13, 0x16
# OpenSSL's long name (what getpeercert() shows) -> (OID, DER string tag) for the OID form.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5),
    "unstructuredName": ("1.2.840.113549.1.9.2", _UTF8),
    "surname": ("2.5.4.4", _UTF8),
    "serialNumber": ("2.5.4.5", _PRINTABLE),
    "title": ("2.5.4.12", _UTF8),
    "description": ("2.5.4.13", _UTF8),
    "businessCategory": ("2.5.4.15", _UTF8),
    "postalCode": ("2.5.4.17", _UTF8),
    "name": ("2.5.4.41", _UTF8),
    "givenName": ("2.5.4.42", _UTF8),
    "initials": ("2.5.4.43", _UTF8),
    "generationQualifier": ("2.5.4.44", _UTF8),
    "dnQualifier": ("2.5.4.46", _PRINTABLE),
    "pseudonym": ("2.5.4.65", _UTF8),
    "organizationIdentifier": ("2.5.4.97", _UTF8),
    "jurisdictionLocalityName": ("1.3.6.1.4.1.311.60.2.1.1", _UTF8),
    "jurisdictionStateOrProvinceName": ("1.3.6.1.4.1.311.60.2.1.2", _UTF8),
    "jurisdictionCountryName": ("1.3.6.1.4.1.311.60.2.1.3", _PRINTABLE),
}
_SPECIAL = frozenset(',=+<>#;"\\')
_EDGE_SPACE = (" ", "\r")


def parse_principal(text: str) -> tuple[str, str]:
    """("Type", "name") of "Type:name", split at the first ":" as Kafka's
    SecurityUtils.parseKafkaPrincipal does (either part may be empty). ValueError when there
    is no ":"."""
    if not isinstance(text, str) or ":" not in text:
        raise ValueError("expected a string in format principalType:principalName but got %r"
                         % (text,))
    kind, _, name = text.partition(":")
    return kind, name


def user_principal(name: str) -> str:
    return "%s:%s" % (USER_TYPE, name)


def _escape(value: str) -> str:
    n = len(value)
    lead = 0
    while lead < n and value[lead] in _EDGE_SPACE:
        lead += 1
    trail = n - 1
    while trail >= 0 and value[trail] in _EDGE_SPACE:
        trail -= 1
    return "".join("\\" + c if (c in _SPECIAL or i < lead or i > trail) else c
                   for i, c in enumerate(value))


def _der_hex(tag: int, value: str) -> str:
    body = value.encode("utf-8")
    n = len(body)
    if n < 0x80:
        length = bytes([n])
    else:
        octets = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return (bytes([tag]) + length + body).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return "%s=%s" % (keyword, _escape(value))
    oid_tag = _OIDS.get(name)
    if oid_tag is not None:
        return "%s=#%s" % (oid_tag[0], _der_hex(oid_tag[1], value))
    if name[:1].isdigit():          # OpenSSL does not know it: Python shows the dotted OID
        return "%s=#%s" % (name, _der_hex(_UTF8, value))
    return "%s=%s" % (name, _escape(value))


def rfc2253_name(subject) -> str:
    """The RFC 2253 distinguished name, as Java's X500Principal.getName() prints it, of a
    subject in getpeercert()'s form: a sequence of RDNs, each a sequence of (name, value)."""
    return ",".join("+".join(_attribute(name, value) for name, value in rdn)
                    for rdn in reversed(tuple(subject)))


def ssl_principal(peercert: Optional[dict]) -> str:
    """The principal of an SSL client: "User:" + its certificate's subject DN, or ANONYMOUS
    when there is no (verified) certificate, as Kafka's default principal builder has it.
    ``peercert``: ssl.SSLSocket.getpeercert() (None without a certificate, {} when the
    certificate was not verified)."""
    if not peercert or "subject" not in peercert:
        return ANONYMOUS
    return user_principal(rfc2253_name(peercert["subject"]))
