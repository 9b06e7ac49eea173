"""How an action touches the host, and the structured log of everything it did.

Drivers never run a shell string: each command is an argv list run with a time limit through a
`System` (the real one runs processes and writes files; tests give a recorded one). Every
command, file write and wait goes into the `CommandLog` with its argv, exit status and an output
excerpt; the log travels with the step's result to the central service and onto tickets.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from checker.collectors.base import CommandResult, LiveHost

EXCERPT_CHARS = 2000
DEFAULT_COMMAND_TIMEOUT_S = 120.0


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Head and tail of long output: the start says what ran, the end how it ended."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… {len(text) - limit} characters cut …\n{text[-half:]}"


class System(Protocol):
    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult: ...

    def read_text(self, path: str) -> str | None: ...

    def write_text(self, path: str, text: str) -> None:
        """Write (sysfs, config files); raises OSError."""

    def list_dir(self, path: str) -> list[str] | None: ...

    def which(self, tool: str) -> str | None: ...


class LiveSystem:
    """This machine."""

    def __init__(self) -> None:
        self._host = LiveHost()

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        return self._host.run(argv, timeout_s=timeout_s)

    def read_text(self, path: str) -> str | None:
        return self._host.read_text(path)

    def write_text(self, path: str, text: str) -> None:
        if path.startswith(("/sys/", "/proc/")):
            with open(path, "w", encoding="ascii") as handle:  # one write(): sysfs takes one value per call
                handle.write(text)
            return
        temporary = f"{path}.fleetfix-new"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    def list_dir(self, path: str) -> list[str] | None:
        return self._host.list_dir(path)

    def which(self, tool: str) -> str | None:
        return shutil.which(tool)


@dataclass
class CommandRecord:
    argv: list[str]
    exit_status: int | None
    output: str = ""
    kind: str = "run"  # run, write, wait, simulated, dry_run
    at: str = ""
    duration_s: float = 0.0
    timed_out: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "exit_status": self.exit_status,
            "output": self.output,
            "kind": self.kind,
            "at": self.at,
            "duration_s": round(self.duration_s, 3),
            "timed_out": self.timed_out,
        }


class ActionFailed(Exception):
    """The action could not be carried out (a precondition, a command, a verification)."""


class ActionTimedOut(ActionFailed):
    """The action ran past its time budget."""


@dataclass
class CommandLog:
    records: list[CommandRecord] = field(default_factory=list)

    def add(self, record: CommandRecord) -> CommandRecord:
        record.at = record.at or dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        self.records.append(record)
        return record

    def add_http(self, url: str, status: int, body: str) -> CommandRecord:
        return self.add(CommandRecord(["POST", url], status, excerpt(body, 500), kind="http"))

    def as_json(self) -> list[dict[str, Any]]:
        return [r.as_json() for r in self.records]


class ActionContext:
    """One action's run: its system, its deadline, dry-run, and its command log.

    In a dry run nothing is changed: commands that would change the host are logged with
    `kind: dry_run` and not run; reads still run, so the plan shows what it would do here.
    `on_restart` is called (by `restart_issued`) just before a driver asks the host to restart: the
    executor journals it, so after a boot it knows the restart was the action's and not another.
    """

    def __init__(
        self,
        system: System | None,
        *,
        timeout_s: float,
        dry_run: bool = False,
        log: CommandLog | None = None,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self._system = system
        self.dry_run = dry_run
        self.log = log or CommandLog()
        self.deadline = time.monotonic() + timeout_s
        self.on_restart = on_restart

    @property
    def system(self) -> System:
        if self._system is None:
            raise ActionFailed("this driver has no system to run commands on")
        return self._system

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check_time(self) -> None:
        if self.remaining() <= 0:
            raise ActionTimedOut("the action ran past its time budget")

    def run(
        self, argv: list[str], *, timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S, changes: bool = True
    ) -> CommandResult:
        """Run argv (or, dry, log it); a non-zero exit is the caller's to judge."""
        self.check_time()
        if self.dry_run and changes:
            self.log.add(CommandRecord(list(argv), None, "not run (dry run)", kind="dry_run"))
            return CommandResult(tuple(argv), 0, "")
        budget = max(1.0, min(timeout_s, self.remaining()))
        started = time.monotonic()
        result = self.system.run(list(argv), timeout_s=budget)
        output = result.stdout + (f"\n{result.stderr}" if result.stderr else "")
        self.log.add(
            CommandRecord(
                list(argv),
                result.returncode,
                excerpt(output),
                duration_s=time.monotonic() - started,
                timed_out=result.timed_out,
            )
        )
        if result.timed_out and self.remaining() <= 0:
            raise ActionTimedOut(f"{argv[0]} ran past the action's time budget")
        return result

    def must(self, argv: list[str], *, timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S, changes: bool = True) -> str:
        """Run argv and fail the action unless it exits 0; returns its output."""
        result = self.run(argv, timeout_s=timeout_s, changes=changes)
        if result.missing:
            raise ActionFailed(f"{argv[0]} is not installed")
        if result.timed_out:
            raise ActionFailed(f"{' '.join(argv[:3])} timed out")
        if result.returncode != 0:
            detail = excerpt(result.stderr or result.stdout, 300)
            raise ActionFailed(f"{' '.join(argv[:4])} exited {result.returncode}: {detail}")
        return result.stdout

    def write(self, path: str, text: str) -> None:
        if self.dry_run:
            self.log.add(CommandRecord(["write", path, text.strip()], None, "not written (dry run)", kind="dry_run"))
            return
        try:
            self.system.write_text(path, text)
        except OSError as error:
            self.log.add(CommandRecord(["write", path, text.strip()], 1, error.strerror or str(error), kind="write"))
            raise ActionFailed(f"cannot write {path}: {error.strerror or error}") from None
        self.log.add(CommandRecord(["write", path, text.strip()], 0, "", kind="write"))

    def read(self, path: str) -> str | None:
        return self.system.read_text(path)

    def restart_issued(self) -> None:
        """The next command restarts the host (not in a dry run, which restarts nothing)."""
        if self.on_restart is not None and not self.dry_run:
            self.on_restart()

    def note(self, what: str, output: str = "", *, kind: str = "wait") -> None:
        """A step that is not a command (a wait, a check) but belongs in the log."""
        self.log.add(CommandRecord([what], 0, excerpt(output), kind=kind))

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, self.remaining())))
        self.check_time()
