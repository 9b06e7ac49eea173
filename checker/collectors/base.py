"""The one layer through which collectors touch the host: files and commands.

LiveHost reads the real /sys, /proc and runs tools (argv lists with timeouts,
never shell strings); SnapshotHost reads a captured snapshot directory, so every
test and every support case runs the same collectors on recorded input.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False  # the tool is not installed


class HostAccess(Protocol):
    def read_text(self, path: str) -> str | None:
        """The file's text, or None if it does not exist or cannot be read."""

    def list_dir(self, path: str) -> list[str] | None:
        """Entry names, or None if the directory does not exist."""

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult: ...


class LiveHost:
    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(p.name for p in Path(path).iterdir())
        except OSError:
            return None

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not installed", missing=True)
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else ""
            return CommandResult(tuple(argv), -1, out, f"timed out after {timeout_s}s", timed_out=True)
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)


class SnapshotHost:
    """A snapshot: DIR/root/… mirrors files read; DIR/commands.json lists commands run."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.root = directory / "root"
        commands_file = directory / "commands.json"
        self.commands: list[dict[str, object]] = (
            json.loads(commands_file.read_text(encoding="utf-8")) if commands_file.exists() else []
        )

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def read_text(self, path: str) -> str | None:
        try:
            return self._path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(p.name for p in self._path(path).iterdir())
        except OSError:
            return None

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        for entry in self.commands:
            if entry.get("argv") == argv:
                stdout_file = entry.get("stdout")
                stdout = (self.directory / str(stdout_file)).read_text(encoding="utf-8") if stdout_file else ""
                rc = entry.get("rc", 0)
                return CommandResult(tuple(argv), rc if isinstance(rc, int) else 0, stdout)
        return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not in snapshot", missing=True)
