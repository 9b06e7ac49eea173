"""Per-host authentication of reports that arrive through the broker.

Over HTTP a host shows its token (api.auth). Through the Redis stream or a
Celery task there is no header, so the agent signs each report's JSON text
with its credential (core.signing) and sends `host` and `sig` beside it. Here
the signature is checked against the keys of that host's live credentials,
and the report must then be about that host: a host can only report for
itself. With signatures required (FLEETFIX_REQUIRE_SIGNED_REPORTS, on by
default in production) an unsigned report is refused as well; otherwise it is
accepted as before (the embedded demo, a fleet being enrolled).

Refused reports are logged with the reason and counted in the batch result;
the rest of the batch goes on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from checker.schemas import Report
from core.db import Database
from core.models import ApiToken
from core.signing import verify_report
from remediator.schemas import Refusal


@dataclass(frozen=True)
class SignedPayload:
    """A report's JSON text as it came off the broker, with who says they sent it."""

    body: str | bytes | dict[str, Any]
    host: str | None = None
    sig: str | None = None

    @property
    def raw(self) -> bytes:
        """The signed bytes: only JSON text can be signed (an object has no one serialization)."""
        if isinstance(self.body, dict):
            raise TypeError("a signed report must be JSON text")
        return self.body.encode() if isinstance(self.body, str) else self.body


class HostKeys:
    """The report-signing keys of every host credential that is not revoked, cached.

    Reloaded every `ttl_s`, and at once (at most every `miss_reload_s`) when a
    host signs with a key we do not know yet — a credential issued a moment ago.
    A revoked credential stops working within `ttl_s`.
    """

    def __init__(self, database: Database, *, ttl_s: float = 30.0, miss_reload_s: float = 5.0) -> None:
        self.database = database
        self.ttl_s = ttl_s
        self.miss_reload_s = miss_reload_s
        self._keys: dict[str, list[bytes]] = {}
        self._loaded = float("-inf")
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self.database.session() as session:
            rows = session.execute(
                select(ApiToken.hostname, ApiToken.token_hash).where(
                    ApiToken.hostname.is_not(None), ApiToken.revoked_at.is_(None)
                )
            ).all()
        keys: dict[str, list[bytes]] = {}
        for hostname, token_hash in rows:
            if hostname is not None:
                keys.setdefault(hostname, []).append(bytes.fromhex(token_hash))
        self._keys = keys
        self._loaded = time.monotonic()

    def keys_for(self, hostname: str, *, missed: bool = False) -> list[bytes]:
        with self._lock:
            age = time.monotonic() - self._loaded
            if age > self.ttl_s or (missed and age > self.miss_reload_s):
                self._load()
            return self._keys.get(hostname, [])

    def verify(self, payload: SignedPayload) -> bool:
        host, sig = payload.host, payload.sig
        if host is None or sig is None:
            return False
        for missed in (False, True):
            if any(verify_report(key, payload.raw, sig) for key in self.keys_for(host, missed=missed)):
                return True
        return False


def authenticate(
    payloads: list[SignedPayload], keys: HostKeys | None, *, required: bool
) -> tuple[list[tuple[int, SignedPayload]], list[Refusal]]:
    """Split payloads into those whose signature holds (or that may go unsigned) and refusals."""
    passed: list[tuple[int, SignedPayload]] = []
    refused: list[Refusal] = []
    for index, payload in enumerate(payloads):
        if payload.sig is None or payload.host is None:
            if required:
                refused.append(Refusal(index=index, errors=["unsigned report: signatures are required"]))
            else:
                passed.append((index, payload))
            continue
        if isinstance(payload.body, dict) or keys is None or not keys.verify(payload):
            refused.append(
                Refusal(
                    index=index,
                    errors=[f"signature does not match any live credential of host {payload.host!r}"],
                )
            )
            continue
        passed.append((index, payload))
    return passed, refused


def about_the_signer(report: Report, payload: SignedPayload) -> str | None:
    """None if a signed report is about its signer (or is unsigned), else why it is refused."""
    if payload.host is not None and report.host.hostname != payload.host:
        return f"host {payload.host!r} may only report for itself, not for {report.host.hostname!r}"
    return None
