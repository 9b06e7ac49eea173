"""The Celery app factory and the queue layout.

One factory builds the app for every role (embedded, central worker, host
agent); the caller names the task modules to load, so this module imports no
stage package. JSON is the only serialisation; pickle is refused.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any, TypeVar

from celery import Celery, Signature
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

from core.vocabulary import is_hostname

INGEST_QUEUE = "ingest"
REMEDIATE_QUEUE = "remediate"
NOTIFY_QUEUE = "notify"
CENTRAL_QUEUES = (INGEST_QUEUE, REMEDIATE_QUEUE, NOTIFY_QUEUE)
HOST_QUEUE_PREFIX = "host."
HOST_TASK_EXPIRES_S = 900
"""A task on a host queue that has not started within this time is dropped,
so a dead host does not pile up work that would run when it comes back."""

INGEST_STREAM = "fleetfix:ingest"
"""Redis Stream of agents' reports (one JSON text per entry, field `report`), read in
batches by `fleetfix ingester`; used when the broker is Redis."""
INGEST_GROUP = "ingesters"


def host_queue(hostname: str) -> str:
    if not is_hostname(hostname):
        raise ValueError(f"not a valid hostname for a queue: {hostname!r}")
    return f"{HOST_QUEUE_PREFIX}{hostname}"


ServiceT = TypeVar("ServiceT")

SERVICES_ATTRIBUTE = "fleetfix_services"
"""The attribute of a Celery app that holds what its process's root built for its tasks."""


def provide(app: Celery, kind: type[ServiceT], service: ServiceT) -> None:
    """Hand `service` to the app's tasks, found by `kind` (a process's root does, once, as it builds the app)."""
    services: dict[type[Any], Any] | None = getattr(app, SERVICES_ATTRIBUTE, None)
    if services is None:
        services = {}
        setattr(app, SERVICES_ATTRIBUTE, services)
    services[kind] = service


def find(app: Celery, kind: type[ServiceT]) -> ServiceT | None:
    """The service of `kind` the app carries, or None."""
    found: ServiceT | None = (getattr(app, SERVICES_ATTRIBUTE, None) or {}).get(kind)
    return found


def service(app: Celery, kind: type[ServiceT]) -> ServiceT:
    """The service of `kind` the app carries; a task reaches its process's runtime through its own app
    (`self.app`), never through a module global."""
    found = find(app, kind)
    if found is None:
        raise LookupError(f"app {app.main!r} carries no {kind.__name__}: this process's root did not build one")
    return found


class BrokerApps:
    """The sending apps of one app on other brokers (datacenters'), one per URL."""

    def __init__(self) -> None:
        self.apps: dict[str, Celery] = {}
        self.lock = threading.Lock()


def app_for_broker(app: Celery, broker_url: str) -> Celery:
    """A sending app on another broker (a datacenter's), with `app`'s settings; one per URL per app."""
    if broker_url == app.conf.broker_url:
        return app
    others: BrokerApps = app.conf.fleetfix_broker_apps
    with others.lock:
        other = others.apps.get(broker_url)
        if other is None:
            other = create_celery(
                broker_url, name=f"{app.main}-dc", tls=app.conf.get("fleetfix_broker_tls"), make_current=False
            )
            others.apps[broker_url] = other
        return other


def host_app(app: Celery, datacenter: str | None) -> Celery:
    """The app on the broker a datacenter's agents listen on: its own when DATACENTER_BROKERS names one,
    else `app`'s. Host tasks go out on it, and so do broadcasts meant for those agents (a revoke)."""
    brokers: dict[str, str] = app.conf.get("fleetfix_datacenter_brokers") or {}
    return app_for_broker(app, brokers[datacenter]) if datacenter in brokers else app


def host_signature(
    app: Celery, hostname: str, task: str, *, args: list[Any] | None = None, datacenter: str | None = None
) -> Signature:
    """A task for one host's agent, bound to the broker its agent listens on (its datacenter's, when
    DATACENTER_BROKERS names one); it expires unstarted after HOST_TASK_EXPIRES_S. Hand it to
    core.dispatch.send_after_commit, or call apply_async()."""
    target = host_app(app, datacenter)
    return target.signature(task, args=args or [], queue=host_queue(hostname), expires=HOST_TASK_EXPIRES_S)


def broker_use_ssl(broker_url: str, tls: dict[str, str] | None) -> dict[str, Any] | None:
    """kombu's TLS options for a rediss:// or amqps:// broker from CA/cert/key file paths.

    The certificate is always verified; the two transports name the same files differently."""
    if not broker_url.startswith(("rediss://", "amqps://")):
        return None
    tls = tls or {}
    if broker_url.startswith("rediss://"):
        options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
        options.update({f"ssl_{key}": value for key, value in tls.items()})
        return options
    return {"cert_reqs": ssl.CERT_REQUIRED, **tls}


def _connection(url: str, tls: dict[str, str] | None, timeout: float) -> Connection:
    return Connection(
        url,
        ssl=broker_use_ssl(url, tls) or False,
        connect_timeout=timeout,
        transport_options={"socket_timeout": timeout, "socket_connect_timeout": timeout, "max_retries": 0},
    )


def check_broker(broker_url: str, *, tls: dict[str, str] | None = None, timeout: float = 2.0) -> None:
    """Raise unless the broker accepts a connection within `timeout`."""
    with _connection(broker_url, tls, timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)


def queue_depths(
    broker_url: str,
    queues: tuple[str, ...] = CENTRAL_QUEUES,
    *,
    tls: dict[str, str] | None = None,
    timeout: float = 2.0,
) -> dict[str, int]:
    """Messages waiting in each queue, read from the broker (a queue nobody declared yet holds 0).

    With a Redis broker the ingest stream's length and its entries read but not yet
    acknowledged are included as `stream:ingest` and `stream:ingest:pending`. Raises
    when the broker cannot be reached."""
    depths: dict[str, int] = {}
    with _connection(broker_url, tls, timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)
        for name in queues:
            with conn.channel() as channel:
                try:
                    _, count, _ = channel.queue_declare(queue=name, passive=True)
                except conn.channel_errors:  # not declared yet (Redis: an empty list has no key)
                    count = 0
                depths[name] = int(count)
        if broker_url.startswith(("redis://", "rediss://")):
            client = conn.default_channel.client
            depths["stream:ingest"] = int(client.xlen(INGEST_STREAM))
            try:
                pending = client.xpending(INGEST_STREAM, INGEST_GROUP)
            except Exception:  # no group yet: nothing was ever read
                pending = {"pending": 0}
            depths["stream:ingest:pending"] = int(pending["pending"])
    return depths


def ingest_lag_s(broker_url: str, *, tls: dict[str, str] | None = None, timeout: float = 2.0) -> float | None:
    """How long the oldest report still in the Redis ingest stream has waited, in seconds (0: none waits).

    Ingesters delete an entry once its batch is committed (remediator.stream), so the oldest entry left is
    the oldest report not yet ingested, read or not; its id is the broker's clock at XADD, compared with
    the broker's own TIME so neither the API's clock nor the agents' enters. None on a broker without the
    stream (RabbitMQ: there the lag shows in fleetfix_report_delay_seconds). Raises when unreachable."""
    if not broker_url.startswith(("redis://", "rediss://")):
        return None
    with _connection(broker_url, tls, timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)
        client = conn.default_channel.client
        oldest = client.xrange(INGEST_STREAM, count=1)
        if not oldest:
            return 0.0
        seconds, micros = client.time()
        entry_id = oldest[0][0]
        added_ms = int((entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)).split("-", 1)[0])
        return max(0.0, int(seconds) + int(micros) / 1e6 - added_ms / 1000)


def create_celery(
    broker_url: str,
    *,
    include: list[str] | tuple[str, ...] = (),
    name: str = "fleetfix",
    extra_queues: tuple[str, ...] = (),
    tls: dict[str, str] | None = None,
    datacenter_brokers: dict[str, str] | None = None,
    make_current: bool = True,
) -> Celery:
    """The Celery app. `tls`: CA/cert/key files for rediss:// and amqps:// brokers;
    `datacenter_brokers`: where host tasks of each datacenter go (see host_signature)."""
    app = Celery(name, broker=broker_url, include=list(include))
    exchange = Exchange("fleetfix", type="direct")
    queues = [Queue(q, exchange, routing_key=q) for q in (*CENTRAL_QUEUES, *extra_queues)]
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=REMEDIATE_QUEUE,
        task_default_exchange="fleetfix",
        task_default_routing_key=REMEDIATE_QUEUE,
        task_queues=queues,
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        timezone="UTC",
        enable_utc=True,
        broker_use_ssl=broker_use_ssl(broker_url, tls),
        fleetfix_broker_tls=tls or {},
        fleetfix_datacenter_brokers=dict(datacenter_brokers or {}),
        fleetfix_broker_apps=BrokerApps(),
    )
    if make_current:
        app.set_current()
        app.set_default()
    return app
