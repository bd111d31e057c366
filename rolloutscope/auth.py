"""The bearer token a collector may be given (``--token-file``), checked the same way wherever
it guards something: OTLP/HTTP, OTLP/gRPC, the query endpoint and the live dashboard."""

from __future__ import annotations

import hashlib
import hmac


def bearer_token_matches(header: str | bytes | None, expected: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case (RFC 7235 section 2.1: schemes are
    case-insensitive), compared in constant time."""
    if header is None:
        return False
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, token = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                              expected.encode())


def token_matches(given: str | None, expected: str) -> bool:
    """A token given on its own (a query parameter), compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def session_value(token: str) -> str:
    """What a cookie carries after a first authenticated visit: derived from the token, so the
    token itself is never stored in a browser, and unusable without it."""
    return hmac.new(token.encode(), b"rolloutscope dashboard session", hashlib.sha256).hexdigest()
