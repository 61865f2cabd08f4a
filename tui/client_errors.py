"""What a failed call to an agent means, in one sentence (the wording :class:`tui.client.AgentClient` uses)."""

from __future__ import annotations

import errno
import socket
import ssl
from typing import Optional

import httpx

__all__ = ["certificate_error", "network_message", "peer_certificate", "response_detail", "root_oserror"]


def response_detail(response: httpx.Response) -> str:
    """The agent's error detail from a failed response (FastAPI's ``detail``, else the start of the body)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:300]
    return str(body)[:200]


def root_oserror(exc: BaseException) -> Optional[OSError]:
    """The OSError under an httpx/httpcore exception chain (it carries the errno)."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 10:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def certificate_error(exc: BaseException) -> Optional[ssl.SSLCertVerificationError]:
    """The certificate verification failure under an httpx/httpcore exception chain, if that is what it is."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 10:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def peer_certificate(host: str, port: int, timeout: float) -> str:
    """The certificate ``host:port`` presents, named by subject, names and SHA-256 fingerprint (a TLS handshake
    with no verification and nothing sent after it: for the message about a certificate that did not verify)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    except OSError as error:
        return f"(unreadable: {error})"
    if not der:
        return "(none presented)"
    cert = x509.load_der_x509_certificate(der)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        alt = ", ".join(str(v) for v in names.get_values_for_type(x509.DNSName) + [str(a) for a in names.get_values_for_type(x509.IPAddress)])
    except x509.ExtensionNotFound:
        alt = "none"
    return f"'{cert.subject.rfc4514_string()}' (names: {alt}; SHA-256 {cert.fingerprint(hashes.SHA256()).hex(':').upper()})"


def network_message(exc: httpx.HTTPError, url: str, timeout: float) -> str:
    """One sentence for a call that got no HTTP answer: timed out, refused, no route, or what the OS said."""
    cert = certificate_error(exc)
    if cert is not None:
        return f"the TLS certificate of {url} did not verify: {cert.verify_message or cert.reason or cert}"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {url} within {timeout:g} s"
    root = root_oserror(exc)
    if root is not None:
        if root.errno == errno.ECONNREFUSED:
            return f"connection to {url} refused: no agent listening there"
        if root.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"no route to {url}: the node is off or its link is down"
        return f"cannot connect to {url}: {root.strerror or root}"
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return f"connection to {url} refused: no agent listening there"
    return f"cannot connect to {url}: {text}"
