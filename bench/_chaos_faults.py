"""The chaos bench's faults, injected in order while the fleet reports, each timed and measured.

  1. kill -9 an ingester while it holds read, unacknowledged entries (mid-batch); a new one starts;
  2. kill -9 the worker (and its pool) while it holds the `run_remediation` task of a remediation
     with a non-idempotent host step (a reboot): the run it held is lost until Redis' visibility
     timeout, and the scheduler's stall sweep (remediator/stalls.py) has to send it again;
  3. kill -9 a host agent while a reboot's driver runs and before it restarted the host, and
  4. kill -9 another while its host is down after the restart was issued; each is started again
     on the same journal and simulated state;
  5. PostgreSQL crash-restart (`pg_ctl restart -m immediate`);
  6. kill -9 Redis while reports are being added, and start it again on the same append-only file.
A condition not met within its time (no such task held, no reboot mid-run) is reported, and the
fault is injected anyway (2) or skipped (3, 4).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
from sqlalchemy import create_engine, text

from bench._chaos_agents import AgentProcess, read_journal
from bench._chaos_catch import catch
from bench._chaos_fleet import Acked, Publisher, Run
from bench._services import OwnPostgres, OwnRedis, Service
from checker.sim import VirtualHost
from core.queue import HOST_QUEUE_PREFIX, INGEST_GROUP, INGEST_STREAM
from cyborg.actions import ACTIONS

NON_IDEMPOTENT = tuple(name for name, a in ACTIONS.items() if a.site == "host" and not a.idempotent)
log = logging.getLogger(__name__)


@dataclass
class Fault:
    name: str
    at: float = 0.0  # monotonic
    wall: float = 0.0
    detail: str = ""
    recovered: float | None = None  # monotonic
    recovery: str = "probe stored"
    hit: list[dict[str, Any]] = field(default_factory=list)  # the non-idempotent work it met


def consumer_of(service: Service) -> str:
    return f"{socket.gethostname()}-{service.pid}"  # remediator.stream: host name and main thread id


def stored(url: str, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    engine = create_engine(url)
    found: set[uuid.UUID] = set()
    with engine.connect() as conn:
        for start in range(0, len(ids), 5000):
            rows = conn.execute(text("SELECT id FROM reports WHERE id = ANY(:ids)"), {"ids": ids[start : start + 5000]})
            found.update(row[0] for row in rows)
    engine.dispose()
    return found


def unacked(client: redis.Redis) -> list[tuple[str, str, str]]:
    """(task, argsrepr, queue) of what kombu's Redis transport holds as delivered and not acknowledged."""
    held = []
    for raw in client.hvals("unacked"):
        message, _exchange, routing_key = orjson.loads(raw)[:3]
        held.append((message["headers"]["task"], str(message["headers"].get("argsrepr", "")), str(routing_key)))
    return held


def held_tasks(client: redis.Redis, *, central: bool = True) -> list[str]:
    """Held tasks of the central queues (central) or of the hosts' queues (not central)."""
    return sorted(f"{t}{a}" for t, a, q in unacked(client) if q.startswith(HOST_QUEUE_PREFIX) != central)


def held_runs(client: redis.Redis) -> set[int]:
    """Remediations whose `run_remediation` a central worker holds."""
    found = set()
    for task, args, queue in unacked(client):
        if task == "remediator.run_remediation" and not queue.startswith(HOST_QUEUE_PREFIX):
            match = re.search(r"\d+", args)
            if match:
                found.add(int(match.group()))
    return found


class Chaos:
    """The faults, injected while the publisher runs, each followed by its recovery measurement."""

    def __init__(
        self,
        run: Run,
        pg: OwnPostgres,
        broker: OwnRedis,
        url: str,
        services: dict[str, Service],
        agents: list[AgentProcess],
        state: Path,
        probe: Publisher,
        probe_host: VirtualHost,
        rounds: int,
    ) -> None:
        self.run, self.pg, self.broker, self.url = run, pg, broker, url
        self.services = services
        self.agents = agents  # one per lockup host: the agents that may be killed
        self.state = state
        self.probe, self.probe_host = probe, probe_host
        self.share = max(1, rounds // 5)
        self.faults: list[Fault] = []
        self.worker_held: list[str] = []
        self.worker_held_runs: set[int] = set()
        self.worker_killed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self.error: BaseException | None = None
        self.engine = create_engine(url, pool_pre_ping=True, pool_size=2)

    def _run(self) -> None:
        try:
            self._at_round(self.share)
            self._record(self.kill_ingester(), self.probe_recovery)
            self._at_round(self.share + 1)
            self._record(self.kill_worker(), self.probe_recovery)
            self.worker_killed.set()  # the main loop gives the last wave of hosts their lockups
            for phase in ("before the restart", "while restarting"):
                fault = self.kill_agent(phase)
                if fault is not None:
                    self._record(fault, self.step_recovery)
            self._at_round(max(self.run.round + 1, 4 * self.share))
            self._record(self.crash_postgres(), self.probe_recovery)
            self._at_round(max(self.run.round + 1, 5 * self.share))
            self._record(self.kill_redis(), self.probe_recovery)
        except BaseException as error:
            self.error = error

    def _at_round(self, at_round: int) -> None:
        while self.run.round < at_round or self.run.round_share < 0.3:
            time.sleep(0.05)

    def _record(self, fault: Fault, recovery: Any) -> None:
        self.faults.append(fault)
        recovery(fault)

    # -- recovery ---------------------------------------------------------------------------

    def probe_recovery(self, fault: Fault) -> None:
        """Until a report published right after the fault is stored."""
        report_id, report = self.probe.report(self.probe_host)
        self.probe.xadd_until_acked([(report_id, self.probe_host.hostname, orjson.dumps(report).decode())])
        with self.run.lock:
            self.run.acked.pop(report_id, None)  # probes are counted among the reports as well, below
            self.run.acked[report_id] = Acked(self.probe_host.hostname, "probe", time.monotonic())
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if stored(self.url, [report_id]):
                    fault.recovered = time.monotonic()
                    return
            except Exception as error:  # the database is restarting
                log.info("bench.probe.retried", extra={"error": str(error)[:200]})
            time.sleep(0.1)

    def step_recovery(self, fault: Fault) -> None:
        """Until the central side has the killed envelope's step finished (its host's result came back)."""
        fault.recovery = "its step finished centrally"
        hit = fault.hit[0]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with self.engine.connect() as conn:
                state = conn.execute(
                    text("SELECT state::text FROM remediation_steps WHERE remediation_id = :r AND index = :s"),
                    {"r": hit["remediation"], "s": hit["step"]},
                ).scalar()
            if state not in (None, "running", "pending"):
                fault.recovered = time.monotonic()
                return
            time.sleep(0.2)

    # -- the faults ---------------------------------------------------------------------------

    def kill_ingester(self) -> Fault:
        victim = self.services["ingester-1"]
        client = redis.Redis.from_url(self.broker.url)
        name, held = consumer_of(victim), 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # mid-batch: it has read entries it has not acknowledged
            consumers = {c["name"].decode(): c["pending"] for c in client.xinfo_consumers(INGEST_STREAM, INGEST_GROUP)}
            held = int(consumers.get(name, 0))
            if held:
                break
            time.sleep(0.01)
        fault = Fault("kill -9 ingester", time.monotonic(), time.time(), f"held {held} unacknowledged entries")
        victim.kill()
        time.sleep(1)  # a supervisor's restart delay
        self.services["ingester-3"] = Service("ingester-3", ["ingester"], victim.env, victim.logs).start()
        return fault

    def kill_worker(self) -> Fault:
        """When it holds the run that would start a reboot (or another non-idempotent host step):
        caught by a process of its own (bench/_chaos_catch.py); if none comes, killed anyway."""
        worker = self.services["worker"]
        caught = catch(self.broker.url, self.url, worker.pid, list(NON_IDEMPOTENT), 150)
        fault = Fault("kill -9 worker", time.monotonic(), caught.get("at") or time.time())
        client = redis.Redis.from_url(self.broker.url)
        if caught["caught"] is None:
            worker.kill()
            fault.wall = time.time()
        else:
            worker.kill()  # already dead: reaps it
            fault.at -= time.time() - fault.wall
        self.worker_held = held_tasks(client)
        self.worker_held_runs = held_runs(client)
        looked = f"{caught['looked']} held runs looked at (worker frozen {caught['stops']} times for it)"
        if caught["caught"] is None:
            fault.detail = f"no run of a pending non-idempotent step held in {caught['waited']:.0f} s ({looked}); "
        else:
            fault.detail = (
                f"it held the run of remediation {caught['caught']} ({caught['action']} step {caught['step']} "
            )
            fault.detail += f"pending) after {caught['waited']:.1f} s of watching ({looked}); "
        fault.detail += f"held {len(self.worker_held)}: {', '.join(self.worker_held)}"
        with self.engine.connect() as conn:  # what the dead worker left: nothing moves them but a host's result
            rows = conn.execute(
                text(
                    "SELECT s.remediation_id, s.index, s.action, s.state::text, s.result->>'envelope_id', h.hostname"
                    " FROM remediation_steps s JOIN remediations r ON r.id = s.remediation_id"
                    " JOIN hosts h ON h.id = r.host_id WHERE s.remediation_id = ANY(:ids) AND s.action = ANY(:a)"
                ),
                {"ids": list(self.worker_held_runs), "a": list(NON_IDEMPOTENT)},
            ).all()
        fault.hit = [
            {"remediation": r, "step": i, "action": a, "step_state": s, "envelope": e, "host": h}
            for r, i, a, s, e, h in rows
        ]
        time.sleep(1)
        worker.start()
        return fault

    def kill_agent(self, phase: str) -> Fault | None:
        """A lockup host's agent while a reboot's driver runs: before the restart, or while the host is down."""
        deadline = time.monotonic() + 180
        killed = {id(a) for a in self.agents if a.killed_at}
        while time.monotonic() < deadline:
            for agent in self.agents:
                if id(agent) in killed or not agent.alive():
                    continue
                for hostname in agent.hostnames:
                    for envelope, entry in read_journal(self.state, hostname).items():
                        if entry["state"] != "running" or entry["runs"] < 1 or entry["action"] not in NON_IDEMPOTENT:
                            continue
                        if bool(entry["restart_issued_at"]) != (phase == "while restarting"):
                            continue
                        return self._kill_agent(agent, phase, hostname, envelope, entry)
            time.sleep(0.05)
        self.faults.append(Fault(f"kill -9 agent {phase}", detail="not injected: no reboot was at that point in 180 s"))
        return None

    def _kill_agent(
        self, agent: AgentProcess, phase: str, hostname: str, envelope: str, entry: dict[str, Any]
    ) -> Fault:
        fault = Fault(f"kill -9 agent {phase}", time.monotonic(), time.time())
        agent.kill()
        accepted = dt.datetime.fromisoformat(entry["accepted_at"]).timestamp()
        issued = entry["restart_issued_at"]
        after = (
            f", {fault.wall - dt.datetime.fromisoformat(issued).timestamp():.1f} s after the restart was issued"
            if issued
            else ", restart not issued yet"
        )
        fault.detail = (
            f"{hostname}: {entry['action']} envelope {envelope[:8]} of remediation {entry['remediation_id']}, "
            f"{fault.wall - accepted:.1f} s after the host accepted it{after}"
        )
        fault.hit = [
            {
                "remediation": entry["remediation_id"],
                "step": entry["step"],
                "action": entry["action"],
                "envelope": envelope,
                "host": hostname,
            }
        ]
        time.sleep(1)  # a supervisor's restart delay
        agent.start()
        return fault

    def crash_postgres(self) -> Fault:
        fault = Fault("PostgreSQL crash-restart", time.monotonic(), time.time(), "pg_ctl restart -m immediate")
        started = time.monotonic()
        self.pg.crash_restart()
        fault.detail += f", back in {time.monotonic() - started:.1f} s"
        return fault

    def kill_redis(self) -> Fault:
        client = redis.Redis.from_url(self.broker.url)
        before = int(client.xlen(INGEST_STREAM))
        fault = Fault("kill -9 Redis", time.monotonic(), time.time())
        self.broker.kill()
        time.sleep(1)
        started = time.monotonic()
        self.broker.start()
        after = int(redis.Redis.from_url(self.broker.url).xlen(INGEST_STREAM))
        fault.detail = (
            f"stream {before} -> {after} entries after AOF replay, back in {time.monotonic() - started:.1f} s"
        )
        return fault

    def still_waiting(self) -> list[int]:
        """Remediations whose run the killed worker held that have not changed since it died."""
        if not self.worker_held_runs or not self.worker_killed.is_set():
            return []
        killed = next(f.wall for f in self.faults if f.name == "kill -9 worker")
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT id, updated_at FROM remediations"
                        " WHERE id = ANY(:ids) AND state IN ('planned', 'running')"
                    ),
                    {"ids": list(self.worker_held_runs)},
                ).all()
        except Exception:  # the database is restarting
            return list(self.worker_held_runs)
        return [r for r, updated in rows if updated.timestamp() <= killed]
