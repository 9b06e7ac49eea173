"""The chaos bench's fleet: its agents' reports (acknowledged or sent again), and the hosts given lockups."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import redis

from checker.sim import SimulatedFleet, VirtualHost
from core.queue import INGEST_STREAM
from core.signing import report_key, sign_report

REPORT_INTERVAL_S = 60  # what the reports say; the central side marks a host unreachable after 3 of them


@dataclass
class Acked:
    host: str
    path: str  # stream, http or probe
    at: float


@dataclass
class Run:
    """What the fleet was told is stored, and where the run is."""

    acked: dict[uuid.UUID, Acked] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    resent: int = 0  # sends repeated after an error (agents' spool)
    round: int = 0
    round_share: float = 0.0  # how much of the current round is published
    lock: threading.Lock = field(default_factory=threading.Lock)


def distinct_report(host: VirtualHost, now: dt.datetime, seq: int) -> tuple[uuid.UUID, dict[str, Any]]:
    report = host.report(now, interval_s=REPORT_INTERVAL_S).model_dump(mode="json")
    collector = next(iter(report["collectors"]))
    report["collectors"][collector]["problems"].append(f"chaos bench: report {seq} of {host.hostname}")
    return uuid.UUID(report["report_id"]), report


class Publisher:
    """The fleet's agents: each round every host reports; what fails is sent again until acknowledged.
    `sync` brings a host up to what its agent's actions did (HostSync) before it reports."""

    def __init__(
        self,
        run: Run,
        fleet: list[VirtualHost],
        lock: threading.RLock,
        redis_url: str,
        api: str,
        tokens: dict[str, str],
        http_hosts: set[str],
        sync: Callable[[VirtualHost], None] | None = None,
        synced: set[str] | None = None,
    ) -> None:
        self.run = run
        self.hosts = fleet
        self.lock = lock
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10)
        self.http = httpx.Client(base_url=api, timeout=30)
        self.tokens = tokens
        self.keys = {name: report_key(token) for name, token in tokens.items()}
        self.http_hosts = http_hosts
        self.sync = sync
        self.synced = synced or set()
        self.seq = 0

    def report(self, host: VirtualHost) -> tuple[uuid.UUID, dict[str, Any]]:
        with self.lock:
            if self.sync is not None and host.hostname in self.synced:
                self.sync(host)
            self.seq += 1
            return distinct_report(host, dt.datetime.now(dt.UTC), self.seq)

    def xadd_until_acked(self, batch: list[tuple[uuid.UUID, str, str]]) -> None:
        while True:
            try:
                pipe = self.client.pipeline(transaction=False)
                for _, hostname, body in batch:
                    pipe.xadd(
                        INGEST_STREAM,
                        {"report": body, "host": hostname, "sig": sign_report(self.keys[hostname], body.encode())},
                    )
                pipe.execute()
                break
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                self.run.resent += len(batch)
                time.sleep(0.5)
        now = time.monotonic()
        with self.run.lock:
            for report_id, hostname, _ in batch:
                self.run.acked.setdefault(report_id, Acked(hostname, "stream", now))

    def post_until_acked(self, report_id: uuid.UUID, hostname: str, report: dict[str, Any]) -> None:
        headers = {"Authorization": f"Bearer {self.tokens[hostname]}"}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                response = self.http.post("/api/v1/reports", json=report, headers=headers)
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code == 200:
                body = response.json()
                if str(report_id) in [*body["accepted"], *body["duplicates"]]:
                    with self.run.lock:
                        self.run.acked.setdefault(report_id, Acked(hostname, "http", time.monotonic()))
                    return
            if response is not None and response.status_code in (403, 409, 422):
                self.run.refused.append(f"{report_id}: {response.status_code} {response.text[:200]}")
                return
            self.run.resent += 1
            time.sleep(0.5)
        self.run.refused.append(f"{report_id}: not acknowledged over HTTP within 300 s")

    def publish_round(self) -> None:
        batch: list[tuple[uuid.UUID, str, str]] = []
        for index, host in enumerate(self.hosts):
            self.run.round_share = index / len(self.hosts)
            if not host.reporting:
                continue
            report_id, report = self.report(host)
            if host.hostname in self.http_hosts:
                self.post_until_acked(report_id, host.hostname, report)
                continue
            batch.append((report_id, host.hostname, orjson.dumps(report).decode()))
            if len(batch) >= 100:
                self.xadd_until_acked(batch)
                batch = []
        if batch:
            self.xadd_until_acked(batch)


def lockup_hosts(fleet: SimulatedFleet, count: int, probe: VirtualHost) -> list[VirtualHost]:
    """`count` healthy hosts, each in a rack where no host has a fault (the rack cap is one host out
    and a drained neighbour would hold the reboot), one a rack; never the probe host."""
    troubled = {(h.datacenter, h.rack) for h in fleet.hosts if h.faults}
    chosen: list[VirtualHost] = []
    racks: set[tuple[str, str]] = set()
    for host in fleet.hosts:
        if host is probe:
            continue
        if len(chosen) >= count:
            break
        where = (host.datacenter, host.rack)
        if host.faults or where in troubled or where in racks:
            continue
        racks.add(where)
        chosen.append(host)
    return chosen


def give_lockups(fleet: SimulatedFleet, hosts: list[VirtualHost]) -> None:
    """Soft lockups every 10 s from now: after three (two rounds) the default pack's soft-lockups rule
    plans a warm reboot, a non-idempotent host action."""
    for host in hosts:
        fault = fleet.fault("soft_lockups")
        fault.per_hour = 360.0
        host.inject(fault)


def waves(hosts: list[VirtualHost]) -> tuple[list[VirtualHost], list[VirtualHost], list[VirtualHost]]:
    """The lockup hosts in three waves: at the start (undisturbed), for the worker's kill, for the agents' kills."""
    first = max(1, len(hosts) // 4)
    second = first + (len(hosts) - first) // 2
    return hosts[:first], hosts[first:second], hosts[second:]
