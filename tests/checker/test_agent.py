"""The host agent: its settings, its spool, delivery (broker, HTTP fallback, spool) against the
machine's real Redis, the check loop's cursors, CPU pinning, and the `fleetfix agent` process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from bench.samples import rich_snapshot
from checker.agent.config import AgentConfig, AgentConfigError, load_agent_config
from checker.agent.delivery import Delivery
from checker.agent.spool import Spool
from checker.agent.worker import CheckLoop
from checker.schemas import Report
from core.queue import INGEST_STREAM, create_celery
from tests.conftest import REDIS_URL
from tests.processes import FleetfixProcess, base_env, wait_until

DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


class Broker:
    """The machine's real Redis, with every key of this test under its own prefix, so a central
    worker of another test run on the same Redis database never consumes these reports."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"agent-test-{uuid.uuid4().hex[:8]}:"

    def app(self) -> Celery:
        app = create_celery(self.url)
        app.conf.broker_transport_options = {"global_keyprefix": self.prefix}
        return app

    def cleanup(self) -> None:
        client = redis.Redis.from_url(self.url)
        for key in client.scan_iter(f"{self.prefix}*"):
            client.delete(key)


@pytest.fixture
def broker() -> Iterator[Broker]:
    made = Broker(REDIS_URL)  # not the redis_url fixture: no FLUSHDB under another run's workers
    yield made
    made.cleanup()


def ingest_messages(broker: Broker) -> list[list[dict[str, Any]]]:
    """The reports waiting on the ingest stream (a Redis broker's path), oldest first, one per entry."""
    client = redis.Redis.from_url(broker.url)
    entries = client.xrange(f"{broker.prefix}{INGEST_STREAM}")
    return [[json.loads(fields[b"report"])] for _, fields in entries]


def payload(n: int) -> dict[str, Any]:
    return {"report_id": str(uuid.UUID(int=n)), "n": n}


def ids(batches: list[list[dict[str, Any]]]) -> list[Any]:
    return [p["n"] for batch in batches for p in batch]


# -- settings ----------------------------------------------------------------------------------


def test_agent_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    defaults = AgentConfig()
    assert (defaults.state_dir, defaults.spool_max_reports, defaults.fallback_url) == (
        Path("/var/lib/fleetfix-agent"),
        1440,
        "",
    )
    monkeypatch.setenv("FLEETFIX_AGENT_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FLEETFIX_AGENT_FALLBACK_URL", "https://central.example/")
    monkeypatch.setenv("FLEETFIX_AGENT_SPOOL_MAX_REPORTS", "10")
    monkeypatch.setenv("FLEETFIX_AGENT_CPUS", "0-1,4")
    monkeypatch.setenv("FLEETFIX_AGENT_COLLECTOR_TIMEOUTS", '{"sel": 90}')
    config = load_agent_config()
    assert (config.state_dir, config.fallback_url, config.spool_max_reports) == (
        tmp_path,
        "https://central.example",
        10,
    )
    assert (config.cpu_set, config.collector_timeouts) == ({0, 1, 4}, {"sel": 90.0})
    assert load_agent_config(state_dir=tmp_path / "cli").state_dir == tmp_path / "cli"


def test_the_default_allow_list_is_every_host_action_cyborg_has() -> None:
    """The agent cannot import cyborg to say which actions run on a host, so it keeps its own list; one that
    fell behind would refuse a signed action of a rule (offline_cpu, restore_cmci were missing once)."""
    from cyborg.actions import HOST_ACTIONS

    assert sorted(AgentConfig().allowed_actions) == sorted(HOST_ACTIONS)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FLEETFIX_AGENT_STATEDIR", "/x", "FLEETFIX_AGENT_STATEDIR: unknown agent setting"),
        ("FLEETFIX_AGENT_FALLBACK_URL", "central:8000", "FLEETFIX_AGENT_FALLBACK_URL: Value error, must be an http"),
        ("FLEETFIX_AGENT_CPUS", "0-x", "FLEETFIX_AGENT_CPUS: Value error, not a cpu"),
        ("FLEETFIX_AGENT_SPOOL_MAX_REPORTS", "0", "FLEETFIX_AGENT_SPOOL_MAX_REPORTS: Input should be greater"),
        ("FLEETFIX_AGENT_COLLECTOR_TIMEOUTS", '{"sell": 5}', "no collector 'sell'"),
    ],
)
def test_bad_agent_settings_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(AgentConfigError, match=message.replace("(", r"\(")):
        load_agent_config()


# -- spool and delivery --------------------------------------------------------------------------


def test_spool_keeps_the_newest_and_counts_what_it_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", max_reports=3)
    for n in range(5):
        spool.put(payload(n))
    assert [spool.load(path)["n"] for path in spool.files()] == [2, 3, 4]  # type: ignore[index]
    assert spool.dropped_total == 2
    spool.files()[0].write_text("{half a rep")
    assert spool.load(spool.files()[0]) is None
    assert (len(spool), spool.dropped_total) == (2, 3)
    assert Spool(tmp_path / "spool", max_reports=3).dropped_total == 3  # persisted


def test_delivery_goes_to_the_ingest_queue_on_real_redis(broker: Broker, tmp_path: Path) -> None:
    delivery = Delivery(broker.app(), spool=Spool(tmp_path, 10))
    assert delivery.deliver(payload(1)) == "broker"
    assert ingest_messages(broker) == [[payload(1)]]


def test_unreachable_broker_spools_and_the_spool_is_sent_oldest_first(broker: Broker, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 10)
    down = Delivery(create_celery(DEAD_BROKER, make_current=False), spool=spool)
    assert [down.deliver(payload(n)) for n in (1, 2, 3)] == ["spool"] * 3
    assert len(spool) == 3
    up = Delivery(broker.app(), spool=spool)
    assert up.deliver(payload(4)) == "broker"
    assert ids(ingest_messages(broker)) == [1, 2, 3, 4]
    assert len(spool) == 0


class Central(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, Any]]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Central.received.append((self.path, body))
        self.send_response(Central.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def central() -> Iterator[str]:
    Central.received, Central.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), Central)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_is_the_fallback_when_the_broker_is_down(central: str, tmp_path: Path) -> None:
    delivery = Delivery(create_celery(DEAD_BROKER, make_current=False), spool=Spool(tmp_path, 10), fallback_url=central)
    assert delivery.deliver(payload(7)) == "http"
    assert Central.received == [("/api/v1/reports", payload(7))]
    Central.status = 503
    assert delivery.deliver(payload(8)) == "spool"
    Central.status = 422  # refused as malformed: sending it again cannot help, so it is not kept
    assert delivery.deliver(payload(9)) == "http"
    assert [p["n"] for _, p in Central.received] == [7, 8, 8, 9]
    assert delivery.spool is not None
    assert len(delivery.spool) == 0


# -- the check loop --------------------------------------------------------------------------------


def test_check_loop_sends_reports_with_its_own_status_and_moves_cursors(broker: Broker, tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap")
    config = AgentConfig(state_dir=tmp_path / "state", benchmark_window="")  # the benchmark has its own tests
    loop = CheckLoop(broker.app(), "loop-1", 60, config, host=snap.host())
    try:
        first_id = loop.once()
        (first,) = ingest_messages(broker)[0]
        report = Report.model_validate(first)
        assert report.report_id == first_id
        assert report.observations.agent is not None
        assert (report.observations.agent.spooled, report.observations.agent.last_delivery) == (0, None)
        assert report.collectors["agent"].status == "ok"
        assert report.observations.kernel_log is not None
        assert len(report.observations.kernel_log.events) == 2
        cursors = json.loads((tmp_path / "state/cursors.json").read_text())
        assert cursors["kernel_log"]["seq"] == 107
        assert cursors["rasdaemon"]["mc_event"] == 3
        assert cursors["sel"]["entries"] == 545
        loop.once()
        second = Report.model_validate(ingest_messages(broker)[1][0])
        assert second.observations.kernel_log is not None
        assert second.observations.kernel_log.events == []  # nothing new in the log
        assert second.observations.sel is not None
        assert second.observations.sel.entries == []  # nor in the SEL
        assert second.observations.agent is not None
        assert second.observations.agent.last_delivery == "broker"
    finally:
        loop.stop()
    held = CheckLoop(broker.app(), "loop-1", 60, config, host=snap.host())
    second = CheckLoop(broker.app(), "loop-2", 60, config, host=snap.host())
    try:
        # A second agent on the same state directory must not share its cursors: it runs without them.
        assert (second.state_dir, second.spool) == (None, None)
        assert second.build().collectors["agent"].problems == [
            f"state directory {config.state_dir} is held by another agent: no cursors on disk, no spool"
        ]
    finally:
        second.stop()
        held.stop()


def test_check_loop_reports_what_its_full_spool_dropped(tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap")
    config = AgentConfig(state_dir=tmp_path / "state", spool_max_reports=1, benchmark_window="")
    loop = CheckLoop(create_celery(DEAD_BROKER, make_current=False), "offline-1", 60, config, host=snap.host())
    try:
        for _ in range(3):
            loop.once()
        assert loop.spool is not None
        (kept,) = loop.spool.files()
        last = Report.model_validate(json.loads(kept.read_text()))
        assert last.observations.agent is not None
        assert (last.observations.agent.spooled, last.observations.agent.spool_dropped_total) == (1, 1)
        assert last.observations.agent.last_delivery == "spool"
        assert last.collectors["agent"].problems == ["1 reports dropped since the last report"]
    finally:
        loop.stop()


def test_an_unusable_state_directory_is_said_in_every_report(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    config = AgentConfig(state_dir=tmp_path / "a-file" / "state")
    loop = CheckLoop(
        create_celery(DEAD_BROKER, make_current=False),
        "no-state-1",
        60,
        config,
        host=rich_snapshot(tmp_path / "s").host(),
    )
    try:
        report = loop.build()
        assert loop.spool is None
        assert report.collectors["agent"].problems == [
            f"state directory {config.state_dir} unusable (Not a directory): no cursors on disk, no spool"
        ]
    finally:
        loop.stop()


def test_the_agent_pins_itself_to_housekeeping_cpus() -> None:
    code = (
        "import os, threading; from checker.agent.worker import pin_to_cpus; pin_to_cpus({0}); "
        "seen = []; t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0))); t.start(); t.join(); "
        "print(sorted(os.sched_getaffinity(0)), sorted(seen[0]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[0] [0]"  # and every thread started after it


AGENT_START = """
import sys
from checker.agent.cli import app
from checker.agent.worker import run_agent
import checker.agent.tasks, cyborg.host.tasks, cyborg.host.agent, cyborg.drivers.linux
print(" ".join(sorted(m for m in sys.modules if any(m == a or m.startswith(a + ".") for a in sys.argv[1:]))))
"""


def test_the_agent_starts_without_what_it_rarely_or_never_needs() -> None:
    """What an agent (a linux-driver one) imports to start: none of the central side, and not what it needs
    only now and then — cryptography's primitives (the first action envelope; redis imports only its
    top-level package, to see whether it is there), httpx (the HTTP fallback, a firmware download), the
    simulated fleet, Celery's command line (the agent builds its worker without it)."""
    absent = ["sqlalchemy", "fastapi", "remediator", "ticketing", "api", "core.db", "core.models"]
    absent += ["cryptography.hazmat", "httpx", "rich", "checker.sim", "celery.bin", "click_repl", "prompt_toolkit"]
    done = subprocess.run([sys.executable, "-c", AGENT_START, *absent], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_agent_process_spools_while_the_broker_is_unreachable(tmp_path: Path) -> None:
    env = base_env(FLEETFIX_BROKER_URL=DEAD_BROKER, FLEETFIX_REPORT_INTERVAL_S="3600")
    state = tmp_path / "state"
    with FleetfixProcess(["agent", "--hostname", "offline-2", "--state-dir", str(state)], env, tmp_path / "a.log") as a:
        spooled = wait_until(lambda: list((state / "spool").glob("*.json")), 60, "a spooled report", a)
        report = Report.model_validate(json.loads(spooled[0].read_text()))
        assert report.host.hostname == "offline-2"
        assert report.collectors["kernel_log"].status == "ok"
        # The cursors are written once the report is handed off (here: spooled), a moment after the spool file.
        wait_until(lambda: (state / "cursors.json").is_file(), 10, "cursors.json", a)
