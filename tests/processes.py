"""Starting fleetfix commands as real processes for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_") or k.startswith("FLEETFIX_TEST_")}
    env.update(settings)
    return env


class FleetfixProcess:
    """`python -m api ARGS` with its output in a log file, stopped on exit."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "api", *args],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        wait_until(lambda: text in self.output() or None, timeout, f"{text!r} in {self.log_path}", self)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()

    def __enter__(self) -> FleetfixProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def wait_until(probe: Callable[[], T | None], timeout: float, what: str, process: FleetfixProcess | None = None) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        if process is not None and process.proc.poll() is not None:
            raise AssertionError(
                f"process exited ({process.proc.returncode}) waiting for {what}:\n{process.output()[-3000:]}"
            )
        time.sleep(0.2)
    tail = process.output()[-3000:] if process else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")
