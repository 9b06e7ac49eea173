"""Signing reports with a host's own credential, for transports that carry no HTTP header.

A host's credential is an API token bound to its hostname (`fleetfix tokens
issue --host NAME`); the central side stores only the token's SHA-256. That
digest is the HMAC key: the agent derives it from its token, the central side
has it already, and the token itself never travels through the broker. Anyone
who can read the broker's queues sees signatures, not keys; forging a report
needs the token or the central database.
"""

from __future__ import annotations

import hashlib
import hmac


def report_key(token: str) -> bytes:
    """The HMAC key of a host token: its SHA-256 (what core.auth stores, as hex)."""
    return hashlib.sha256(token.encode()).digest()


def sign_report(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_report(key: bytes, body: bytes, signature: str) -> bool:
    return hmac.compare_digest(sign_report(key, body), signature)
