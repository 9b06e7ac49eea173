"""Progress of long command-line work (`db prune`, `hosts import`, `snapshot`): a rich bar or spinner on
stderr while a person watches, nothing at all otherwise.

rich rather than tqdm: typer already depends on it (constraints.txt pins it), so neither the central
side nor a host installs anything new, and its live display clears itself when done. The bar goes to
stderr and only when stderr is a terminal, so what a command prints on stdout — and everything it
prints under cron, systemd or a pipe — is byte for byte what it was; the command's own summary line
says what was done.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Tracker:
    """What a long operation tells the display: a new stage, or units done. Does nothing when quiet."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def stage(self, description: str, total: int | None = None) -> None:
        """Start a stage: a new description, and a bar of `total` units (None: a spinner)."""

    def advance(self, units: int = 1) -> None:
        """`units` more of the current stage are done."""

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


class _Shown(Tracker):
    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.display = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=stream),
            transient=True,  # gone when done: the summary line is what stays
        )
        self.task = self.display.add_task("", total=None)

    def stage(self, description: str, total: int | None = None) -> None:
        self.display.reset(self.task, description=description, total=total)

    def advance(self, units: int = 1) -> None:
        self.display.advance(self.task, units)


def is_watched(stream: TextIO) -> bool:
    """A person is looking: the stream is a terminal (not a file, a pipe, cron's mail, the journal)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


@contextmanager
def tracked(description: str, total: int | None = None, *, stream: TextIO | None = None) -> Iterator[Tracker]:
    """A progress display on `stream` (default stderr) while the block runs, if a person watches it."""
    target = stream if stream is not None else sys.stderr
    if not is_watched(target):
        yield Tracker()
        return
    shown = _Shown(target)
    shown.stage(description, total)
    with shown.display:
        yield shown
