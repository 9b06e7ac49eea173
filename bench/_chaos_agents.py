"""The chaos bench's host agents: cyborg executors in child processes it can kill -9 and start again.

    python bench/_chaos_agents.py SPEC.json      # what AgentProcess runs; SPEC is written by it

A child is a Celery worker (`worker_main`, as `fleetfix agent` runs one) on the host.<name> queues
of its hosts, one executor per host with the simulated driver on a copy of the bench's virtual
host, its journal and the host's simulated state (boot id, faults cleared) on disk under
STATE/<hostname>/: started again after a kill, it finds both where the dead one left them, and
the worker_ready signal makes each executor `resume()` what was cut short (cyborg.host.tasks).

Before the real executor starts the driver for an envelope it appends one JSON line to the run's
starts file (written, flushed and fsynced before the driver runs), so the bench counts driver
starts per envelope and per step across kills. A restarting action (reboot) is given a window
before the restart (`pre_restart_s`: services stopping) and the simulated downtime
(`time_scale` x 7 s warm) after it, so an agent can be killed on either side of the restart.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._services import ChildProcess  # noqa: E402
from checker.sim import VirtualHost  # noqa: E402
from checker.sim.standalone import STATE_FILE, load_host  # noqa: E402
from cyborg.actions import ActionParams, CyborgAction, lookup  # noqa: E402
from cyborg.commands import ActionContext  # noqa: E402
from cyborg.drivers.simulated import SimulatedDriver  # noqa: E402
from cyborg.host.executor import HostExecutor  # noqa: E402
from cyborg.host.journal import JOURNAL_FILE, JournalEntry  # noqa: E402

_starts_lock = threading.Lock()


class ChaosDriver(SimulatedDriver):
    """The simulated driver, with `pre_restart_s` of work before a restarting action restarts the host."""

    def __init__(self, host: VirtualHost, *, pre_restart_s: float, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.pre_restart_s = pre_restart_s

    def run(self, action: CyborgAction, params: ActionParams, ctx: ActionContext) -> dict[str, Any]:
        if action.restarts and self.pre_restart_s and not ctx.dry_run:
            ctx.note("stopping services before the restart (chaos bench)", f"{self.pre_restart_s:g} s")
            ctx.sleep(self.pre_restart_s)
        return super().run(action, params, ctx)


class CountingExecutor(HostExecutor):
    """The real executor; every start of the driver for an envelope is appended to `starts` first."""

    starts: Path
    agent: str

    def _execute(self, entry: JournalEntry, action: Any, params: Any) -> dict[str, Any]:
        line = {
            "envelope": entry.id,
            "remediation": entry.remediation_id,
            "step": entry.step,
            "attempt": entry.attempt,
            "action": entry.action,
            "idempotent": lookup(entry.action).idempotent,
            "host": entry.hostname,
            "agent": self.agent,
            "pid": os.getpid(),
            "at": time.time(),
        }
        with _starts_lock:
            fd = os.open(self.starts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(line) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return super()._execute(entry, action, params)


def child_main(spec_path: Path) -> None:
    """The agent process: executors for its hosts, then a Celery worker on their queues."""
    import logging

    from celery.signals import worker_ready

    import cyborg.host.tasks  # noqa: F401 - registers cyborg.run_action and the resume at worker_ready
    from core.queue import create_celery, host_queue
    from cyborg.envelope import load_verifier
    from cyborg.host.executor import CeleryReporter
    from cyborg.host.journal import Journal
    from cyborg.host.runtime import HostExecutors

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s %(message)s %(fields)s")
    logging.getLogger("celery").setLevel(logging.WARNING)
    logging.getLogger("kombu").setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_with_fields)
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    hosts: dict[str, VirtualHost] = pickle.loads(Path(spec["hosts"]).read_bytes())  # noqa: S301 - the bench's own file
    tokens: dict[str, str] = json.loads(Path(spec["tokens"]).read_text(encoding="utf-8"))
    queues = [host_queue(name) for name in spec["hostnames"]]
    app = create_celery(spec["broker_url"], extra_queues=tuple(queues))
    verifier = load_verifier(Path(spec["public_key"]))
    CountingExecutor.starts = Path(spec["starts"])
    CountingExecutor.agent = spec["name"]
    executors = HostExecutors().provide_to(app)  # this child's runtime: the worker's run_action finds it there
    for name in spec["hostnames"]:
        directory = Path(spec["state"]) / name
        directory.mkdir(parents=True, exist_ok=True)
        driver = ChaosDriver(
            hosts[name], pre_restart_s=spec["pre_restart_s"], time_scale=spec["time_scale"], state_dir=directory
        )
        executors.install(
            CountingExecutor(
                name,
                verifier=verifier,
                driver=driver,
                journal=Journal(directory / JOURNAL_FILE),
                reporter=CeleryReporter(app, hostname=name, token=tokens[name]),
            )
        )

    def _ready(**_: Any) -> None:  # after cyborg's own resume (connected first)
        Path(spec["ready"]).write_text(str(os.getpid()), encoding="utf-8")

    worker_ready.connect(_ready, weak=False)

    pool = ["-P", "solo"] if spec["concurrency"] == 1 else ["-P", "threads", "-c", str(spec["concurrency"])]
    flags = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    app.worker_main(["worker", "-Q", ",".join(queues), "-n", f"{spec['name']}@chaos", *pool, *flags])


def _with_fields(record: Any) -> bool:
    record.fields = getattr(record, "fields", "")
    return True


class AgentProcess(ChildProcess):
    """One child agent process (see the module's docstring); `kill` is kill -9, `start` starts it again."""

    def __init__(self, name: str, hostnames: list[str], work: Path, settings: dict[str, Any]) -> None:
        self.name = name
        self.hostnames = hostnames
        self.work = work
        self.settings = settings  # broker_url, public_key, state, hosts, tokens, time_scale, pre_restart_s, concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.killed_at: list[float] = []

    def start(self) -> AgentProcess:
        self.started += 1
        stem = self.work / f"{self.name}.{self.started}"
        spec = {
            **self.settings,
            "name": self.name,
            "hostnames": self.hostnames,
            "starts": str(self.work / "starts" / f"{self.name}.{self.started}.jsonl"),
            "ready": str(stem) + ".ready",
        }
        (self.work / "starts").mkdir(exist_ok=True)
        Path(str(stem) + ".json").write_text(json.dumps(spec), encoding="utf-8")
        with Path(str(stem) + ".log").open("w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), str(stem) + ".json"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        return self

    def ready(self) -> bool:
        return Path(str(self.work / f"{self.name}.{self.started}") + ".ready").exists()

    def kill(self) -> None:
        if self.alive():
            super().kill()
            self.killed_at.append(time.monotonic())


def read_starts(work: Path) -> list[dict[str, Any]]:
    """Every driver start any agent process recorded, in order of time."""
    starts = []
    for path in sorted((work / "starts").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                starts.append(json.loads(line))
    return sorted(starts, key=lambda s: s["at"])


def read_journal(state: Path, hostname: str) -> dict[str, dict[str, Any]]:
    """A host's journal entries by envelope id, as its agent last wrote them (atomically)."""
    path = state / hostname / JOURNAL_FILE
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")).get("entries", {}))
    except (FileNotFoundError, ValueError):
        return {}


class HostSync:
    """The bench's copy of a host follows what the agent's actions did to its own copy (the simulated
    state the driver saves): a reboot clears the lockups in what the host reports next."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.seen: dict[str, float] = {}

    def __call__(self, host: VirtualHost) -> None:
        path = self.state / host.hostname / STATE_FILE
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return
        if self.seen.get(host.hostname) == mtime:
            return
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return  # replaced while read: the next round reads it
        if saved["host"].get("boot_id") != host.boot_id:
            host.reboot()  # counters and the kernel log start again, as on the machine
        load_host(path.parent, host)
        self.seen[host.hostname] = mtime


if __name__ == "__main__":
    child_main(Path(sys.argv[1]))
