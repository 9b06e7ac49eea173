"""`fleetfix ingester`: agents' reports from a Redis Stream, a batch per transaction.

Celery spends its per-message cost on every report (about 700 tasks/s on this
kind of machine for a no-op task); a stream read by a consumer group hands a
consumer hundreds of reports in one call. Delivery is at least once:

- an entry is acknowledged (and deleted) only after the transaction holding
  its report has committed;
- while the database is unreachable, entries stay pending and are read again;
- entries left pending by a consumer that died are claimed by another after
  `claim_idle_s`;
- ingest is idempotent by report id, so an entry read twice is stored once.

Entries from agents with a credential carry `host` and `sig` beside `report`
(remediator.hostauth checks them).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import redis
from sqlalchemy.exc import OperationalError

from core.db import Database
from core.queue import INGEST_GROUP, INGEST_STREAM, broker_use_ssl
from remediator.hostauth import HostKeys, SignedPayload
from remediator.ingest import ingest_batch
from remediator.rules import RuleRegistry

log = logging.getLogger(__name__)


def publish_report(client: redis.Redis, report_json: str, *, host: str | None = None, sig: str | None = None) -> str:
    """Add one report (JSON text) to the ingest stream, signed if `sig` is given; returns the entry id."""
    fields = {"report": report_json, **({"host": host, "sig": sig} if host and sig else {})}
    return str(client.xadd(INGEST_STREAM, fields))  # type: ignore[arg-type]


def signed_payload(fields: dict[bytes, bytes]) -> SignedPayload:
    """A stream entry's fields: `report` (JSON text) and, from agents with a credential, `host` and `sig`."""
    host, sig = fields.get(b"host"), fields.get(b"sig")
    return SignedPayload(
        body=fields.get(b"report", b"").decode(),
        host=host.decode() if host else None,
        sig=sig.decode() if sig else None,
    )


class StreamIngester:
    def __init__(
        self,
        redis_url: str,
        database: Database,
        rules: RuleRegistry,
        *,
        consumer: str | None = None,
        batch: int = 500,
        block_ms: int = 1000,
        claim_idle_s: float = 60.0,
        require_signed: bool = False,
        tls: dict[str, str] | None = None,
    ) -> None:
        # A rediss:// broker's CA and client certificate (FLEETFIX_BROKER_TLS_*), as Celery gets them.
        self.client = redis.Redis.from_url(redis_url, **(broker_use_ssl(redis_url, tls) or {}))
        self.database = database
        self.rules = rules
        self.consumer = consumer or f"{socket.gethostname()}-{threading.get_native_id()}"
        self.batch = batch
        self.block_ms = block_ms
        self.claim_idle_ms = int(claim_idle_s * 1000)
        self.backlog = True  # first read our own pending entries (left by a crash or an outage)
        self._last_claim = 0.0
        self.stopping = threading.Event()
        self.host_keys = HostKeys(database)
        self.require_signed = require_signed

    def ensure_group(self) -> None:
        try:
            self.client.xgroup_create(INGEST_STREAM, INGEST_GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def _read(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        now = time.monotonic()
        if now - self._last_claim > self.claim_idle_ms / 1000:
            self._last_claim = now
            claimed = self.client.xautoclaim(
                INGEST_STREAM, INGEST_GROUP, self.consumer, min_idle_time=self.claim_idle_ms, count=self.batch
            )
            entries = self._drop_deleted(claimed[1])
            if entries:
                log.warning("remediator.stream.claimed", extra={"fields": {"entries": len(entries)}})
                return entries
        if self.backlog:
            response: Any = self.client.xreadgroup(INGEST_GROUP, self.consumer, {INGEST_STREAM: "0"}, count=self.batch)
            entries = response[0][1] if response else []
            if entries:
                return self._drop_deleted(entries)
            self.backlog = False
        response = self.client.xreadgroup(
            INGEST_GROUP, self.consumer, {INGEST_STREAM: ">"}, count=self.batch, block=self.block_ms
        )
        return self._drop_deleted(response[0][1] if response else [])

    def _drop_deleted(self, entries: list[Any]) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """A pending entry whose body was deleted (acknowledged elsewhere) is only acknowledged."""
        gone = [entry_id for entry_id, fields in entries if not fields]
        if gone:
            self.client.xack(INGEST_STREAM, INGEST_GROUP, *gone)
        return [(entry_id, fields) for entry_id, fields in entries if fields]

    def run_once(self) -> int:
        """Read, ingest and acknowledge one batch; returns how many entries were acknowledged."""
        entries = self._read()
        if not entries:
            return 0
        ids = [entry_id for entry_id, _ in entries]
        payloads = [signed_payload(fields) for _, fields in entries]
        try:
            ingest_batch(
                payloads,
                database=self.database,
                ruleset=self.rules.ruleset,
                host_keys=self.host_keys,
                require_signed=self.require_signed,
            )
        except OperationalError as error:
            log.warning(
                "remediator.stream.deferred", extra={"fields": {"entries": len(ids), "error": str(error)[:200]}}
            )
            self.backlog = True  # read them again once the database is back
            self.stopping.wait(2.0)
            return 0
        pipe = self.client.pipeline(transaction=False)
        pipe.xack(INGEST_STREAM, INGEST_GROUP, *ids)
        pipe.xdel(INGEST_STREAM, *ids)
        pipe.execute()
        return len(ids)

    def run(self) -> None:
        self.ensure_group()
        log.info("remediator.stream.started", extra={"fields": {"consumer": self.consumer}})
        while not self.stopping.is_set():
            try:
                self.run_once()
            except redis.ConnectionError as error:
                log.warning("remediator.stream.broker_unreachable", extra={"fields": {"error": str(error)[:200]}})
                self.stopping.wait(2.0)
            except redis.ResponseError as error:
                # The stream or its group vanished (Redis restarted without persistence, a FLUSHDB):
                # recreate the group and go on; agents' new entries arrive in the new stream.
                if "NOGROUP" not in str(error) and "no longer exists" not in str(error):
                    raise
                log.warning("remediator.stream.recreated", extra={"fields": {"error": str(error)[:200]}})
                self.backlog = True
                self.ensure_group()

    def stop(self) -> None:
        self.stopping.set()
