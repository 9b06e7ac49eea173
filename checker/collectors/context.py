"""What a collector gets to work with: the host, its time budget, its cursor, and three ways to stop.

A collector is a function `collect(ctx) -> None` that fills its section of `ctx.observations`.
It raises Unavailable when it cannot run here (tool missing, no permission, no EDAC), ParseFailed
when its input could not be read (with an excerpt of that input), and BudgetExceeded when its
time ran out; the cycle turns each into the collector's status and never fails because of one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from checker.collectors.base import CommandResult, HostAccess
from checker.parsers.common import Parsed, excerpt
from checker.schemas import MAX_EXCERPT_CHARS, MAX_PROBLEM_CHARS, MAX_PROBLEMS, Observations

T = TypeVar("T")


class Unavailable(Exception):
    """The collector cannot run on this host; the message says why."""


class ParseFailed(Exception):
    """The collector ran but could not read its input."""

    def __init__(self, reason: str, offending: str = "") -> None:
        super().__init__(reason)
        self.excerpt = offending[:MAX_EXCERPT_CHARS]


class BudgetExceeded(Exception):
    """The collector's time budget ran out (what it gathered so far is kept)."""


class CollectorState:
    """Cursors of the incremental collectors (kmsg sequence number and boot id, SEL record id,
    rasdaemon row ids, mcelog offset), persisted as one JSON file in the agent's state directory.

    New cursors are staged during a cycle and written by commit() only once the report carrying
    those records has been sent or spooled, so a crash in between re-reads them rather than losing
    them. Without a path (`fleetfix check`) nothing is persisted and every cycle starts fresh.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._saved: dict[str, dict[str, Any]] = {}
        self._staged: dict[str, dict[str, Any]] = {}
        self.memo: dict[tuple[str, ...], tuple[float, CommandResult]] = {}
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                loaded = {}
            if isinstance(loaded, dict):
                self._saved = {k: v for k, v in loaded.items() if isinstance(v, dict)}

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._saved.get(name, {}))

    def stage(self, name: str, value: dict[str, Any]) -> None:
        self._staged[name] = value

    def commit(self) -> None:
        self._saved.update(self._staged)
        self._staged = {}
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._saved, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def discard(self) -> None:
        self._staged = {}


@dataclass
class Context:
    host: HostAccess
    observations: Observations
    state: CollectorState
    budget_s: float
    memo_s: float = 0.0  # how long inventory command results may be reused (0: never)
    started: float = field(default_factory=time.monotonic)
    problems: list[str] = field(default_factory=list)
    source: str | None = None

    def remaining(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, argv: list[str], timeout_s: float | None = None, *, memo: bool = False) -> CommandResult:
        """Run a command within what is left of the budget. memo: an inventory command whose
        answer (firmware, DIMM serials) may be reused for memo_s seconds."""
        key = tuple(argv)
        hit = self.state.memo.get(key) if memo and self.memo_s > 0 else None
        if hit is not None and time.monotonic() - hit[0] < self.memo_s:
            return hit[1]
        left = self.remaining()
        if left <= 0.05:
            raise BudgetExceeded(f"time budget of {self.budget_s:g}s used up before {' '.join(argv[:3])}")
        result = self.host.run(argv, timeout_s=min(timeout_s or left, left))
        if memo and not (result.timed_out or result.missing):
            self.state.memo[key] = (time.monotonic(), result)
        return result

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text[:MAX_PROBLEM_CHARS])

    def take(self, parsed: Parsed[T], what: str, offending: str, *, empty: Callable[[T], bool] | None = None) -> T:
        """A parser's value; its problems become the collector's. When the parser read nothing
        (value None or empty) and said why, the collector fails with an excerpt of the input."""
        value = parsed.value
        nothing = value is None or (empty(value) if empty is not None else value == [] or value == {})
        if nothing and parsed.problems:
            raise ParseFailed(f"{what}: {parsed.problems[0]}", offending)
        for item in parsed.problems:
            self.problem(f"{what}: {item}")
        return value


def command_failure(result: CommandResult) -> str:
    """One line saying why a command gave nothing useful."""
    if result.missing:
        return result.stderr or f"{result.argv[0]}: not installed"
    if result.timed_out:
        return f"{' '.join(result.argv)}: {result.stderr or 'timed out'}"
    said = excerpt((result.stderr or result.stdout).strip(), 300)
    return f"{' '.join(result.argv)} exited {result.returncode}" + (f": {said}" if said else "")
