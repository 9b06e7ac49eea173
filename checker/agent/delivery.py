"""Getting reports to the central side: the broker first, HTTP as the fallback, the spool last.

With a Redis broker, reports go to the ingest stream (core.queue.INGEST_STREAM, one JSON text
per entry) that `fleetfix ingester` reads in batches; with any other broker, to the `ingest`
queue as the task remediator.ingest_reports, by name (the agent has no central code). When the
broker does not take them and a fallback URL is set, each is POSTed to {url}/api/v1/reports.
The POST carries the host's own token (FLEETFIX_AGENT_TOKEN or _TOKEN_FILE), with which the
API takes only this host's reports; through the broker, each report's JSON text is signed with
a key derived from that token (core.signing; remediator.hostauth checks it). When neither
works, the report is spooled; spooled reports are sent first, oldest first, as soon as delivery
works again, so the central side sees them in capture order. Over HTTP, with delta reports on
(FLEETFIX_AGENT_DELTA_REPORTS), a report goes as a delta (checker.wire, POST
{url}/api/v1/reports/delta) once the centre's answers named a base (checker.agent.wire_state),
encoded only when it goes that way; the broker and the spool always carry whole reports.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Literal

import orjson
import redis
from celery import Celery

from checker.agent.spool import Spool
from checker.agent.wire_state import WireState
from checker.schemas import Report
from core.queue import INGEST_QUEUE, INGEST_STREAM
from core.signing import report_key, sign_report

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

INGEST_TASK = "remediator.ingest_reports"
# Answers to POST /reports/delta after which the same report is POSTed whole at once: the centre refused the
# delta (409 send_full, 422), or something in front of it has no such route or will not pass it (401, 403, 404,
# 405, 410: a proxy that passes only POST /api/v1/reports). Anything else (5xx, 429) is an outage: spooled.
DELTA_REFUSED = frozenset({401, 403, 404, 405, 409, 410, 422})
BATCH = 20  # spooled reports per ingest task when catching up
# Give up on the broker quickly: the spool, not a blocked cycle, is where reports wait.
PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}

Outcome = Literal["broker", "http", "spool", "dropped"]


class Delivery:
    def __init__(
        self,
        app: Celery,
        *,
        spool: Spool | None,
        fallback_url: str = "",
        http_timeout_s: float = 10.0,
        token: str = "",
        wire: WireState | None = None,
    ) -> None:
        self.app = app
        self.wire = wire  # the base a delta is sent against, and what the centre answered of it
        self.spool = spool
        self.fallback_url = fallback_url
        self.http_timeout_s = http_timeout_s
        self.token = token  # the host's own credential: the API takes only this host's reports with it
        self._key: bytes | None = None  # its report-signing key, for the broker (core.signing)
        self.dropped_without_spool = 0
        self._redis: redis.Redis | None = None

    def _stream_client(self) -> redis.Redis | None:
        url = str(self.app.conf.broker_url or "")
        if not url.startswith(("redis://", "rediss://")):
            return None
        if self._redis is None:
            # A rediss:// broker: the same CA and client certificate as the Celery connection.
            tls = self.app.conf.broker_use_ssl if url.startswith("rediss://") else None
            self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, **(tls or {}))
        return self._redis

    def _key_prefix(self) -> str:
        """The broker's key prefix (kombu's global_keyprefix), so the stream lives beside its queues."""
        options = self.app.conf.broker_transport_options or {}
        return str(options.get("global_keyprefix", ""))

    def _signed(self, payload: dict[str, Any]) -> tuple[bytes, dict[str, str] | None]:
        """The report's JSON text and, with a credential, who signs it and the signature (core.signing)."""
        body = orjson.dumps(payload)
        if not self.token:
            return body, None
        if self._key is None:
            self._key = report_key(self.token)
        return body, {"host": str(payload.get("host", {}).get("hostname", "")), "sig": sign_report(self._key, body)}

    def _broker(self, payloads: list[dict[str, Any]]) -> bool:
        try:
            client = self._stream_client()
            signed = [self._signed(payload) for payload in payloads]
            if client is not None:
                stream = f"{self._key_prefix()}{INGEST_STREAM}"
                pipe = client.pipeline(transaction=False)
                for body, signature in signed:
                    fields: dict[str | bytes, str | bytes] = {"report": body}
                    fields.update(signature or {})
                    pipe.xadd(stream, fields)  # type: ignore[arg-type]
                pipe.execute()
            elif self.token:
                texts = [body.decode() for body, _ in signed]
                signatures = [signature for _, signature in signed]
                self.app.send_task(
                    INGEST_TASK,
                    args=[texts, signatures],
                    queue=INGEST_QUEUE,
                    retry=True,
                    retry_policy=PUBLISH_RETRY,
                )
            else:
                self.app.send_task(
                    INGEST_TASK, args=[payloads], queue=INGEST_QUEUE, retry=True, retry_policy=PUBLISH_RETRY
                )
        except Exception as error:  # kombu raises OperationalError, redis-py its own, sockets OSError
            log.warning("checker.report.broker_failed", extra={"fields": {"error": f"{type(error).__name__}: {error}"}})
            return False
        return True

    def _post(self, client: httpx.Client, payload: dict[str, Any], report: Report | None) -> httpx.Response:
        """POST the report, as its delta when the wire state gives one (checker.agent.wire_state). A delta the
        centre does not take is followed at once by the whole report: 409 (send_full), 422, or a 401, 403,
        404, 405 or 410 (a centre or proxy without the route; only the full POST's 401/403 is a credential
        problem). Any other answer (5xx, 429) or no answer goes the usual way, to the spool, the base kept."""
        delta = self.wire.prepare(report) if self.wire is not None and report is not None else None
        if delta is not None and self.wire is not None:
            response = client.post(f"{self.fallback_url}/api/v1/reports/delta", json=delta)
            if response.is_success:
                self.wire.taken()
                return response
            if response.status_code not in DELTA_REFUSED:
                return response
            self.wire.refused(f"HTTP {response.status_code}: {response.text[:300]}")
        return client.post(f"{self.fallback_url}/api/v1/reports", json=payload)

    def _http(self, payloads: list[dict[str, Any]], report: Report | None = None) -> bool:
        if not self.fallback_url:
            return False
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with httpx.Client(timeout=self.http_timeout_s, headers=headers) as client:
                for position, payload in enumerate(payloads):
                    response = self._post(client, payload, report if position == len(payloads) - 1 else None)
                    if response.is_success and self.wire is not None:
                        with contextlib.suppress(ValueError):  # not the centre's JSON answer: no base named
                            self.wire.answered(response.json())
                    if response.status_code in (401, 403):
                        # A missing, revoked or wrong credential: keep the report (spooled) until it is fixed.
                        log.error(
                            "checker.report.unauthorized",
                            extra={"fields": {"status": response.status_code, "detail": response.text[:500]}},
                        )
                        return False
                    if response.status_code == 422:
                        # Refused as malformed: sending it again cannot help; keep the reason in the log.
                        log.error(
                            "checker.report.refused",
                            extra={"fields": {"report_id": payload.get("report_id"), "detail": response.text[:500]}},
                        )
                    elif response.status_code >= 300:
                        raise httpx.HTTPStatusError(
                            f"HTTP {response.status_code}", request=response.request, response=response
                        )
        except httpx.HTTPError as error:
            log.warning("checker.report.http_failed", extra={"fields": {"error": f"{type(error).__name__}: {error}"}})
            return False
        return True

    def send(self, payloads: list[dict[str, Any]], report: Report | None = None) -> Outcome | None:
        """The broker takes reports whole (the ingest stream answers nothing an agent reads); HTTP may send the
        last one, `report` when given, as a delta (encoded only then)."""
        if self._broker(payloads):
            return "broker"
        if self._http(payloads, report):
            return "http"
        return None

    def flush(self) -> bool:
        """Send spooled reports, oldest first; True when the spool is empty afterwards."""
        if self.spool is None:
            return True
        while files := self.spool.files()[:BATCH]:
            loaded = [(path, self.spool.load(path)) for path in files]
            payloads = [payload for _, payload in loaded if payload is not None]
            if payloads and self.send(payloads) is None:
                return False
            self.spool.remove([path for path, _ in loaded])
            log.info("checker.spool.sent", extra={"fields": {"reports": len(payloads)}})
        return True

    def deliver(self, payload: dict[str, Any], report: Report | None = None) -> Outcome:
        """Send one report after whatever is spooled (over HTTP maybe as a delta of `report`, its model, when
        given: checker.wire); spool it whole when that cannot be done now."""
        if self.flush() and (outcome := self.send([payload], report)) is not None:
            return outcome
        if self.spool is None:
            self.dropped_without_spool += 1
            log.error("checker.report.dropped", extra={"fields": {"report_id": payload.get("report_id")}})
            return "dropped"
        try:
            self.spool.put(payload)
        except OSError as error:
            self.spool.count_dropped(1)
            log.error("checker.spool.write_failed", extra={"fields": {"error": str(error)}})
            return "dropped"
        log.info("checker.report.spooled", extra={"fields": {"report_id": payload.get("report_id")}})
        return "spool"
