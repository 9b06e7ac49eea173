"""A PostgreSQL, a Redis and fleetfix commands of a benchmark's own, which it may kill and restart.

The machine's PostgreSQL and Redis are shared with other work: a benchmark that crashes its
database or its broker starts these instead, on free ports under a scratch directory, and stops
them when it ends (also when it fails).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parent.parent
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(*argv: str) -> list[str]:
    """PostgreSQL refuses to run as root: its commands run as the `postgres` OS user when we are root."""
    return ["runuser", "-u", PG_USER, "--", *argv] if os.geteuid() == 0 else list(argv)


class OwnPostgres:
    """initdb + pg_ctl on a free port; `crash_restart` is `pg_ctl restart -m immediate` (crash recovery on start)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.sockets = directory / "sockets"
        self.port = free_port()

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(
            _as_postgres(
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.directory / "postgres.log"),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                *args,
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def start(self) -> None:
        self.sockets.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, PG_USER)
            shutil.chown(self.sockets, PG_USER)
        subprocess.run(
            _as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self._ctl("start")

    def crash_restart(self) -> None:
        self._ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("stop", "-m", "fast")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)


class OwnRedis:
    """redis-server on a free port with its append-only file in `directory`: every write is fsynced
    before Redis replies (appendfsync always), so what a client was told is stored survives a kill -9."""

    def __init__(self, directory: Path, appendfsync: str = "always") -> None:
        self.directory = directory
        self.port = free_port()
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("a")
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                "--save",
                "",
                "--maxclients",
                "10000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.ping():
                    break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        """kill -9: no shutdown, no final rewrite; what is in the append-only file is what there is."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class ChildProcess:
    """A child in its own session (process group): kill -9 takes its children with it (a Celery worker's
    pool goes with it, as in a pod's crash); stop is SIGTERM, then kill -9 after 20 s."""

    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(10)

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.pid, signal.SIGTERM)
        assert self.proc is not None
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()


class Service(ChildProcess):
    """`python -m api ARGS` (the `fleetfix` command) in its own session, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.logs = logs
        self.proc = None
        self.started = 0

    def start(self) -> Service:
        self.started += 1
        log = (self.logs / f"{self.name}.{self.started}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "api", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        return self


def fleetfix_env(**settings: str) -> dict[str, str]:
    """This environment without any FLEETFIX_ setting of the caller's, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(settings)
    return env
