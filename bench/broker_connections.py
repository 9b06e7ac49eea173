"""What idle agents cost a broker: memory and CPU per connected agent, on Redis and on RabbitMQ.

    .venv/bin/python bench/broker_connections.py [--agents 100,200,300] [--window 20]

Needs the machine's Redis (127.0.0.1:6379, db 12) and RabbitMQ (127.0.0.1:5672, guest; a vhost
`fleetfix-bench` is created and deleted, which needs rabbitmqctl). Prints figures; asserts nothing.

1. One real agent (`fleetfix agent`, simulated driver) is started on each broker, and the TCP
   connections it holds to the broker are counted from /proc (its sockets whose peer is the
   broker's port): that is what one idle agent costs in connections.
2. Simulated agents hold the same: per agent, a kombu consumer on host.<name> plus the Celery
   remote-control (pidbox) consumer on one connection — on Redis a BRPOP every second and a
   SUBSCRIBE on a second connection, as kombu does — and idle connections for the rest
   (the producer, and on Redis the ingest-stream client), with a thread per agent draining
   events the way a Celery worker's loop does.
3. For each step of N agents the broker's own process is read from /proc: resident memory
   (VmRSS) and CPU time (utime + stime) over a window while the agents are idle. The figures per
   agent and per connection are the differences from the step with no agents.
4. The ceiling of this machine: the broker's client limit (Redis maxclients), its open-files
   limit, memory, and the CPU per idle agent as agents per core.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from kombu import Connection, Consumer, Queue

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.queue import create_celery, host_queue  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/12"
AMQP_ROOT = "amqp://guest:guest@127.0.0.1:5672"
VHOST = "fleetfix-bench"
TICK = os.sysconf("SC_CLK_TCK")


# --- the broker's process, from /proc ---


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def open_files_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return line.split()[3]
    return "?"


def find_process(name: str, needle: str = "") -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm == name and needle in cmdline:
            return int(entry.name)
    raise LookupError(f"no {name} process")


def broker_sockets(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` whose peer port is `port`."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            remote, state, inode = parts[2], parts[3], parts[9]
            if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


# --- one real agent ---


def real_agent_connections(broker_url: str, port: int, workdir: Path) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(
        FLEETFIX_BROKER_URL=broker_url,
        FLEETFIX_DATA_DIR=str(workdir / "data"),
        FLEETFIX_AGENT_STATE_DIR=str(workdir / "state"),
        FLEETFIX_AGENT_DRIVER="simulated",
    )
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "agent.log").open("w")
    agent = subprocess.Popen(
        [sys.executable, "-m", "api", "agent", "--hostname", "bench-probe-1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "ready." not in (workdir / "agent.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(5)  # its first report is sent and it is idle
        return broker_sockets(agent.pid, port)
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(20)
        log.close()


# --- simulated idle agents ---


@dataclass
class SimAgent:
    connections: list[Connection]
    extra: list[redis.Redis]


class Fleet:
    """N idle agents' worth of broker connections, each agent's consumers drained by its thread."""

    def __init__(self, broker_url: str, per_agent: int) -> None:
        self.broker_url = broker_url
        self.per_agent = per_agent
        self.app = create_celery(broker_url, make_current=False)
        self.agents: list[SimAgent] = []
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.idle_per_agent = 0

    def calibrate(self, port: int) -> None:
        """Add idle connections to each agent until one holds as many as the real agent did."""
        before = broker_sockets(os.getpid(), port)
        self.add(1)
        core = broker_sockets(os.getpid(), port) - before
        self.idle_per_agent = max(0, self.per_agent - core)
        for _ in range(self.idle_per_agent):  # top the first agent up too
            producer = Connection(self.broker_url, heartbeat=120)
            producer.ensure_connection(max_retries=3)
            producer.default_channel  # noqa: B018
            self.agents[0].connections.append(producer)

    def add(self, count: int) -> None:
        for _ in range(count):
            name = f"bench-{len(self.agents):05d}"
            consumer_conn = Connection(self.broker_url, heartbeat=120)
            consumer_conn.ensure_connection(max_retries=3)
            connections = [consumer_conn]
            Consumer(consumer_conn.channel(), [Queue(host_queue(name))], accept=["json"], callbacks=[]).consume()
            node = self.app.control.mailbox(consumer_conn).Node(f"agent@{name}", channel=consumer_conn.channel())
            node.listen(callback=lambda *a: None)
            extra: list[redis.Redis] = []
            for index in range(self.idle_per_agent):
                if self.broker_url.startswith("redis") and index == 0:
                    client = redis.Redis.from_url(self.broker_url)  # the ingest-stream client
                    client.ping()
                    extra.append(client)
                else:
                    producer = Connection(self.broker_url, heartbeat=120)
                    producer.ensure_connection(max_retries=3)
                    producer.default_channel  # noqa: B018 - opens it, as a producer pool does
                    connections.append(producer)
            agent = SimAgent(connections, extra)
            self.agents.append(agent)
            thread = threading.Thread(target=self._drain, args=(consumer_conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _drain(self, conn: Connection) -> None:
        while not self.stop.is_set():
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                pass
            except OSError:
                if self.stop.is_set():
                    return
                time.sleep(1)
            with contextlib.suppress(Exception):  # transports without heartbeats
                conn.heartbeat_check()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        for agent in self.agents:
            for conn in agent.connections:
                conn.release()
            for client in agent.extra:
                client.close()


@dataclass
class Step:
    agents: int
    connections: int
    rss_kb: int
    cpu_pct: float


def measure(pid: int, agents: int, connections: int, window: float) -> Step:
    time.sleep(5)  # settle after connecting
    before = cpu_seconds(pid)
    time.sleep(window)
    used = cpu_seconds(pid) - before
    return Step(agents, connections, proc_status(pid, "VmRSS"), 100 * used / window)


def run_broker(label: str, url: str, pid: int, port: int, steps: list[int], window: float, workdir: Path) -> None:
    per_agent = real_agent_connections(url, port, workdir / label)
    print(f"\n== {label}: broker pid {pid}; one real `fleetfix agent` holds {per_agent} connections to it")
    fleet = Fleet(url, per_agent)
    results = [measure(pid, 0, 0, window)]
    fleet.calibrate(port)
    try:
        for target in steps:
            try:
                fleet.add(target - len(fleet.agents))
            except Exception as error:  # the broker's own limit: report where it stopped
                held = broker_sockets(os.getpid(), port)
                print(f"  the broker refused agent {len(fleet.agents) + 1} at {held} connections: {error!r}")
                break
            held = broker_sockets(os.getpid(), port)
            print(f"  {target} simulated agents hold {held} connections ({held / target:.1f} each)")
            results.append(measure(pid, target, held, window))
    finally:
        fleet.close()
    base = results[0]
    print(
        f"{'agents':>7} {'conns':>6} {'broker RSS':>11} {'broker CPU':>11} "
        f"{'KiB/agent':>10} {'KiB/conn':>9} {'CPU/agent':>10}"
    )
    for step in results:
        grown = step.rss_kb - base.rss_kb
        per = f"{grown / step.agents:10.1f} {grown / step.connections:9.1f}" if step.agents else f"{'':>10} {'':>9}"
        cpu_per = f"{(step.cpu_pct - base.cpu_pct) / step.agents:9.4f}%" if step.agents else f"{'':>10}"
        print(
            f"{step.agents:7d} {step.connections:6d} {step.rss_kb / 1024:9.1f}MB {step.cpu_pct:10.2f}% {per} {cpu_per}"
        )
    last = results[-1]
    kib_agent = (last.rss_kb - base.rss_kb) / last.agents
    cpu_agent = (last.cpu_pct - base.cpu_pct) / last.agents
    mem_total = proc_meminfo("MemTotal")
    print(f"ceiling ({label}, this machine):")
    print(
        f"  broker open-files limit {open_files_limit(pid)} -> agents by file descriptors: {fd_agents(pid, per_agent)}"
    )
    if label == "rabbitmq":
        status = subprocess.run(["rabbitmqctl", "status"], capture_output=True, text=True, timeout=60).stdout
        sockets = [line.strip() for line in status.splitlines() if line.strip().startswith("Sockets:")]
        print(f"  rabbitmqctl status: {sockets[0] if sockets else '?'} -> {socket_agents(sockets, per_agent)} agents")
    if label == "redis":
        maxclients = int(redis.Redis.from_url(url).config_get("maxclients")["maxclients"])
        print(f"  maxclients {maxclients} -> {maxclients // per_agent} agents ({per_agent} connections each)")
    if kib_agent > 0:
        print(f"  memory {mem_total / 1024 / 1024:.1f} GiB -> {int(mem_total / kib_agent):,} agents by RSS alone")
    if cpu_agent > 0:
        print(f"  one core -> {int(100 / cpu_agent):,} idle agents ({cpu_agent:.4f}% of a core each)")


def socket_agents(lines: list[str], per_agent: int) -> str:
    """RabbitMQ's own socket limit ('Sockets: 3, limit: 832') in agents."""
    if not lines or "limit:" not in lines[0]:
        return "?"
    return str(int(lines[0].rsplit("limit:", 1)[1]) // per_agent)


def proc_meminfo(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def fd_agents(pid: int, per_agent: int) -> str:
    limit = open_files_limit(pid)
    return str(int(limit) // per_agent) if limit.isdigit() else limit


def rabbitmqctl(*args: str) -> None:
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        raise SystemExit("rabbitmqctl is needed to create the bench vhost")
    subprocess.run([tool, "-q", *args], check=True, capture_output=True, timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", default="100,200,300", help="steps of simulated agents, comma-separated")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of CPU measurement per step")
    parser.add_argument("--brokers", default="redis,rabbitmq")
    args = parser.parse_args()
    steps = [int(n) for n in args.agents.split(",")]
    cores = os.cpu_count()
    memory = proc_meminfo("MemTotal") / 1024 / 1024
    print(f"machine: {cores} cores, {memory:.1f} GiB; this process may open {open_files_limit(os.getpid())} files")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if "redis" in args.brokers:
            client = redis.Redis.from_url(REDIS_URL)
            client.flushdb()
            pid = int(client.info("server")["process_id"])
            try:
                run_broker("redis", REDIS_URL, pid, 6379, steps, args.window, workdir)
            finally:
                client.flushdb()
        if "rabbitmq" in args.brokers:
            rabbitmqctl("add_vhost", VHOST)
            rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
            try:
                pid = find_process("beam.smp", "rabbit")
                run_broker("rabbitmq", f"{AMQP_ROOT}/{VHOST}", pid, 5672, steps, args.window, workdir)
            finally:
                rabbitmqctl("delete_vhost", VHOST)


if __name__ == "__main__":
    main()
