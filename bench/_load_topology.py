"""The API processes bench/load.py measures: `fleetfix api` alone and unpinned (the default), or with an
agents-only intake replica beside it (--intake-replica; deploy/kubernetes/api-intake.yaml), each of the
two then pinned to cores of its own.

The pinning stands in for the CPU a Kubernetes pod gets: the intake Deployment asks for a whole core
(request = limit), which the kubelet's static CPU manager policy turns into an exclusive core, so the
main API's page rendering and Argon2 checks cannot take it. On one machine that is
os.sched_setaffinity: every process and thread of each API inherits its cores from the moment it is
started.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

NOT_MODELLED = (
    "PostgreSQL and Redis run unpinned on every core (both APIs share them; the client and the reports' "
    "sender share the main API's core); a limit enforced as a CFS quota (without the static CPU manager "
    "policy); the proxy and network in front; floods sent to the replica's own address"
)
"""What pinning the two APIs does not reproduce of deploy/kubernetes/api-intake.yaml (docs/reliability.md, "Load")."""


def base_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(settings)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiProcess:
    """`fleetfix api --workers N` on a port of its own, in a session of its own (its process group is how
    its CPU is counted and how it is stopped), optionally pinned to `cores`."""

    name: str
    workers: int
    log: Path
    cores: set[int] | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, env: dict[str, str]) -> None:
        self.port = free_port()
        own = os.sched_getaffinity(0)
        if self.cores:
            os.sched_setaffinity(0, self.cores)  # the child inherits it at fork, before uvicorn starts a thread
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "api", "api", "--workers", str(self.workers)],
                env={**env, "FLEETFIX_API_PORT": str(self.port)},
                stdout=self.log.open("w"),
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        finally:
            os.sched_setaffinity(0, own)

    def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name}: fleetfix api exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"{self.name}: fleetfix api did not become ready:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def tail_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def threads_on(self) -> dict[str, int]:
        """How many threads of the process group may run on which cores (Cpus_allowed_list), e.g.
        {"1": 37}: the check that the pinning reached every worker and thread."""
        found: dict[str, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) != self.pid:
                    continue
                for task in (entry / "task").iterdir():
                    status = (task / "status").read_text()
                    allowed = next(
                        line.split(":", 1)[1].strip()
                        for line in status.splitlines()
                        if line.startswith("Cpus_allowed_list")
                    )
                    found[allowed] = found.get(allowed, 0) + 1
            except (OSError, IndexError, ValueError, StopIteration):
                continue
        return found


def split_cores() -> tuple[set[int], set[int]]:
    """(the main API's cores, the intake replica's): the last core this process may use goes to intake,
    the rest to the API (on 2 cores: one each)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"--intake-replica pins each API to cores of its own: this process may use {len(cores)}")
    return set(cores[:-1]), {cores[-1]}


def cores_busy() -> list[float]:
    """CPU seconds each core has spent busy (not idle, not waiting on I/O) since boot, from /proc/stat."""
    busy = []
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        if not (line.startswith("cpu") and line[3].isdigit()):
            break
        fields = [int(x) for x in line.split()[1:]]
        busy.append((sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK"))
    return busy


def describe(cores: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cores))


def start_apis(
    args: argparse.Namespace, env: dict[str, str], workdir: Path, started: list[ApiProcess]
) -> tuple[ApiProcess, ApiProcess | None]:
    """The main API, and with --intake-replica the intake replica, each on cores of its own; each is
    appended to `started` as soon as it runs, so the caller stops it whatever happens next."""
    api = ApiProcess("api", args.workers, workdir / "api.log")
    intake = None
    if args.intake_replica:
        api.cores, intake_cores = split_cores()
        intake = ApiProcess("intake replica", 1, workdir / "api-intake.log", intake_cores)
    for process in (api, intake):
        if process is not None:
            process.start(env)
            started.append(process)
    for process in started:
        process.wait_ready()
    print(f"fleetfix api --workers {args.workers} (production, PostgreSQL, Redis db {args.redis_db}) on {api.base}")
    if intake is None:
        return api, None
    print(f"intake replica: fleetfix api --workers 1 on {intake.base}; every report goes there, the rest to the api")
    for process in (api, intake):
        threads = ", ".join(f"{n} on cpu {cores}" for cores, n in sorted(process.threads_on().items()))
        print(f"  {process.name} pinned to cpu {describe(process.cores or set())}: threads {threads}")
    print("  an emulation of the CPU each pod's limit gives it (deploy/kubernetes/api-intake.yaml)")
    print(f"  not modelled: {NOT_MODELLED}")
    return api, intake
