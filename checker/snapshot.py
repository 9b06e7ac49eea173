"""Snapshots: everything the collectors read on a host, captured into a directory.

`fleetfix snapshot DIR` runs one check cycle through RecordingHost, which reads the live host and
writes what it read: DIR/root/… mirrors each file (root/sys/…, root/proc/…, root/var/log/…;
root/dev/kmsg holds the kernel log records as /dev/kmsg returns them; SQLite databases are copied
whole), DIR/commands.json lists each command as {"argv", "rc", "stdout": "commands/NAME.out"}, and
DIR/meta.json holds the hostname, capture time and format version; under bmc_protocol redfish or both,
DIR/redfish/ holds the BMC's Redfish answers (checker/snapshot_redfish.py). `fleetfix check --snapshot DIR`
(SnapshotHost) runs the same collectors on it elsewhere — for bug reports, support and tests.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import re
import socket
import sqlite3
from pathlib import Path
from typing import Any

from checker.collectors.base import KMSG, LISTING, REALPATHS, CommandResult, FileSlice, HostAccess, LiveHost
from checker.collectors.context import CollectorState
from checker.collectors.redfish_client import RedfishSettings
from checker.schemas import Report

FORMAT_VERSION = 1
MAX_STDERR_CHARS = 2000


class SnapshotError(Exception):
    """The snapshot directory cannot be written or read."""


class RecordingHost:
    """A HostAccess that reads through another one (normally LiveHost) and records what it read."""

    def __init__(self, inner: HostAccess, directory: Path) -> None:
        self.inner = inner
        self.directory = directory
        self.root = directory / "root"
        self.commands: list[dict[str, Any]] = []
        self._names: set[str] = set()
        self._realpaths: dict[str, str] = {}
        self.files_written = 0
        self.redfish_answers = 0  # set by capture(): the Redfish GETs recorded into DIR/redfish/

    def _mirror(self, path: str) -> Path:
        target = self.root / path.lstrip("/")
        if ".." in Path(path).parts:
            raise SnapshotError(f"refusing to record a path with '..': {path}")
        return target

    def _write(self, path: str, text: str) -> None:
        target = self._mirror(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.files_written += 1

    def read_text(self, path: str) -> str | None:
        text = self.inner.read_text(path)
        if text is not None:
            self._write(path, text)
        return text

    def read_from(self, path: str, offset: int, max_bytes: int) -> FileSlice | None:
        piece = self.inner.read_from(path, offset, max_bytes)
        if piece is not None:
            self._write(path, piece.text)  # a snapshot starts without cursors: this is the file from 0
        return piece

    def list_dir(self, path: str) -> list[str] | None:
        names = self.inner.list_dir(path)
        if names is not None:
            # An empty directory still exists in the snapshot, so "empty" and "missing" stay distinct;
            # its names are kept too, for the collectors that look only at which entries exist.
            target = self._mirror(path)
            target.mkdir(parents=True, exist_ok=True)
            (target / LISTING).write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
        return names

    def resolve(self, path: str) -> str | None:
        target = self.inner.resolve(path)
        if target is not None:
            self._realpaths[path] = target
            (self.directory / REALPATHS).write_text(json.dumps(self._realpaths, indent=1), encoding="utf-8")
        return target

    def read_kmsg(self) -> str | None:
        text = self.inner.read_kmsg()
        if text is not None:
            self._write(KMSG, text)
        return text

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        target = self._mirror(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = self.inner.read_bytes(path, offset, size)
        except OSError as error:
            name = errno.errorcode.get(error.errno or 0, "EIO")
            target.with_name(target.name + ".errno").write_text(name + "\n", encoding="utf-8")
            raise
        # The bytes at the same offset of a file otherwise zero: what SnapshotHost.read_bytes reads back.
        with open(target, "r+b" if target.exists() else "wb") as handle:
            handle.seek(offset)
            handle.write(data)
        self.files_written += 1
        return data

    def open_sqlite(self, path: str) -> sqlite3.Connection | None:
        conn = self.inner.open_sqlite(path)
        if conn is not None:
            target = self._mirror(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            copy = sqlite3.connect(target)
            try:
                conn.backup(copy)  # a consistent copy even while rasdaemon writes
            finally:
                copy.close()
            self.files_written += 1
        return conn

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        result = self.inner.run(argv, timeout_s=timeout_s)
        entry: dict[str, Any] = {"argv": list(argv), "rc": result.returncode}
        if result.stdout:
            name = self._command_name(argv)
            path = self.directory / "commands" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(result.stdout, encoding="utf-8")
            entry["stdout"] = f"commands/{name}"
        if result.stderr:
            entry["stderr"] = result.stderr[:MAX_STDERR_CHARS]
        if result.timed_out:
            entry["timed_out"] = True
        if result.missing:
            entry["missing"] = True
        self.commands.append(entry)
        (self.directory / "commands.json").write_text(json.dumps(self.commands, indent=1), encoding="utf-8")
        return result

    def _command_name(self, argv: list[str]) -> str:
        base = re.sub(r"[^A-Za-z0-9.,+=-]+", "_", "_".join(argv)).strip("_")[:100] or "command"
        name, n = f"{base}.out", 1
        while name in self._names:
            n += 1
            name = f"{base}.{n}.out"
        self._names.add(name)
        return name


def write_meta(directory: Path, hostname: str, captured_at: dt.datetime, **extra: object) -> None:
    meta = {"format_version": FORMAT_VERSION, "hostname": hostname, "captured_at": captured_at.isoformat(), **extra}
    (directory / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def read_meta(directory: Path) -> dict[str, Any]:
    """meta.json, or {} for a hand-made snapshot without one. A newer format is refused."""
    path = directory / "meta.json"
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise SnapshotError(f"{path}: not JSON ({error})") from error
    if not isinstance(meta, dict):
        raise SnapshotError(f"{path}: not a JSON object")
    version = meta.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise SnapshotError(f"{path}: format_version {version!r}; this fleetfix reads up to {FORMAT_VERSION}")
    return meta


def capture(
    directory: Path,
    *,
    hostname: str | None = None,
    inner: HostAccess | None = None,
    bmc_protocol: str = "ipmi",
    redfish_settings: RedfishSettings | None = None,
    **cycle_options: Any,
) -> tuple[Report, RecordingHost]:
    """Run one check cycle on this host (or `inner`) and record everything it read into `directory`,
    which must not exist or be empty; under `bmc_protocol` redfish or both, the collectors the agent runs
    there, the redfish one recording its BMC's answers. Returns the report the cycle produced and the recorder."""
    from checker.cycle import run_cycle
    from checker.snapshot_redfish import recording_collectors

    if directory.exists() and any(directory.iterdir()):
        raise SnapshotError(f"{directory} is not empty")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SnapshotError(f"cannot create {directory}: {error.strerror}") from error
    recorder = RecordingHost(inner if inner is not None else LiveHost(), directory)
    name = hostname or socket.gethostname()
    redfish = None
    if bmc_protocol != "ipmi" and "collectors" not in cycle_options:
        cycle_options["collectors"], redfish = recording_collectors(directory, bmc_protocol, redfish_settings)
    try:
        report = run_cycle(recorder, hostname=name, state=CollectorState(), **cycle_options)
    finally:  # whatever ended the capture: the BMC session is ended
        if redfish is not None:
            redfish.shutdown()
    recorder.redfish_answers = len(redfish.resources) if redfish is not None else 0
    (directory / "commands.json").write_text(json.dumps(recorder.commands, indent=1), encoding="utf-8")
    write_meta(
        directory,
        name,
        report.captured_at,
        agent_version=report.host.agent_version,
        kernel=report.observations.identity.kernel if report.observations.identity else None,
    )
    return report, recorder
