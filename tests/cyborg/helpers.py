"""Building blocks for cyborg's tests: a host executor on a simulated host, a reporter that keeps what it
was sent, and a recorded system that answers commands from recorded tool outputs and keeps every write.
The envelopes it runs are built by tests/builders/envelopes.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from checker.collectors.base import CommandResult
from checker.sim.standalone import standalone_host
from cyborg.drivers.simulated import SimulatedDriver
from cyborg.envelope import Signer
from cyborg.host.executor import HostExecutor
from cyborg.host.journal import Journal
from tests.builders.envelopes import NOW


@dataclass
class Reports:
    """Stands in for the central queue: what the host sent, by task name."""

    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def send(self, task: str, report: dict[str, Any]) -> None:
        self.sent.append((task, report))

    def of(self, task: str) -> list[dict[str, Any]]:
        return [report for name, report in self.sent if name == task]


def sim_executor(
    signer: Signer,
    *,
    faults: tuple[str, ...] = ("edac_poll_slow",),
    journal: Journal | None = None,
    time_scale: float = 0.0,
    allowed: tuple[str, ...] | None = None,
    clock: Any = None,
    hardware_class: str = "",
) -> tuple[HostExecutor, SimulatedDriver, Reports]:
    host = standalone_host("sim-1", hardware_class=hardware_class, faults=list(faults))
    driver = SimulatedDriver(host, time_scale=time_scale)
    reports = Reports()
    kwargs: dict[str, Any] = {}
    if allowed is not None:
        kwargs["allowed"] = allowed
    executor = HostExecutor(
        "sim-1",
        verifier=signer.verifier(),
        driver=driver,
        journal=journal or Journal(None),
        reporter=reports,
        clock=clock or (lambda: NOW + dt.timedelta(seconds=1)),
        **kwargs,
    )
    return executor, driver, reports


@dataclass
class RecordedSystem:
    """Answers commands from `outputs` (argv prefix -> stdout, rc), keeps files in `files`, logs every call."""

    outputs: dict[tuple[str, ...], list[tuple[str, int]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    tools: set[str] = field(default_factory=set)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    ran: list[list[str]] = field(default_factory=list)
    written: list[tuple[str, str]] = field(default_factory=list)
    refuse_writes: set[str] = field(default_factory=set)

    def answer(self, argv: list[str], stdout: str, rc: int = 0) -> None:
        self.outputs.setdefault(tuple(argv), []).append((stdout, rc))

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        self.ran.append(list(argv))
        for length in range(len(argv), 0, -1):
            queue = self.outputs.get(tuple(argv[:length]))
            if queue:
                stdout, rc = queue.pop(0) if len(queue) > 1 else queue[0]
                return CommandResult(tuple(argv), rc, stdout)
        return CommandResult(tuple(argv), 0, "")

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def write_text(self, path: str, text: str) -> None:
        if path in self.refuse_writes:
            raise OSError(5, "Input/output error")
        self.written.append((path, text))
        self.files[path] = text

    def list_dir(self, path: str) -> list[str] | None:
        return self.dirs.get(path)

    def which(self, tool: str) -> str | None:
        return f"/usr/bin/{tool}" if tool in self.tools else None
