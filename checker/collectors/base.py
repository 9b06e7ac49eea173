"""The one layer through which collectors touch the host: files, /dev/kmsg, SQLite databases, commands.

LiveHost reads the real /sys, /proc and runs tools (argv lists with timeouts, never shell
strings); SnapshotHost reads a captured snapshot directory, so every test and every support
case runs the same collectors on recorded input. checker.snapshot records a snapshot by
wrapping LiveHost. Files are read with plain open/read/close: no inotify, no polling.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

KMSG = "/dev/kmsg"
KMSG_RECORD_BYTES = 16384  # one read() returns one record; the kernel's limit is 8 KiB
KMSG_MAX_RECORDS = 50_000  # per call, so a flood cannot keep a cycle reading forever
LISTING = ".fleetfix-entries"  # in a snapshot directory: the names a live listing returned, one a line
REALPATHS = "realpaths.json"  # in a snapshot directory: {path: its resolved path} of each resolve() made


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False  # the tool is not installed


@dataclass(frozen=True)
class FileSlice:
    """Text read from a byte offset to the end of a file, and where the next read should start."""

    text: str
    end: int  # byte offset after the last byte read
    inode: int  # a new inode (or a file shorter than the offset) means the log was rotated


@dataclass(frozen=True)
class FileStat:
    """A file's size and last modification (POSIX st_size, st_mtime): when a tool last wrote it."""

    size: int
    mtime: float


def _stat(path: str) -> FileStat | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return FileStat(found.st_size, found.st_mtime)


class HostAccess(Protocol):
    def read_text(self, path: str) -> str | None:
        """The file's text, or None if it does not exist or cannot be read."""

    def read_from(self, path: str, offset: int, max_bytes: int) -> FileSlice | None:
        """At most max_bytes of a growing log file from offset (0 when the file was rotated)."""

    def list_dir(self, path: str) -> list[str] | None:
        """Entry names, or None if the directory does not exist."""

    def resolve(self, path: str) -> str | None:
        """The path with every symlink resolved (realpath), or None if it does not exist: where a sysfs
        link (/sys/dev/block/M:m, /dev/mapper/NAME) points, so its bus (usb, an iSCSI session) shows."""

    def read_kmsg(self) -> str | None:
        """The kernel log records readable now, 'prio,seq,usec,flags;message' each; None when
        /dev/kmsg cannot be opened."""

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        """`size` bytes at `offset` of a device file (one pread: /dev/cpu/N/msr reads an MSR this way);
        raises OSError (FileNotFoundError, PermissionError, EIO for an MSR the CPU does not have)."""

    def open_sqlite(self, path: str) -> sqlite3.Connection | None:
        """A read-only connection to an SQLite database, or None if there is none."""

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult: ...


def _read_from(path: Path, offset: int, max_bytes: int) -> FileSlice | None:
    try:
        with open(path, "rb") as handle:
            inode = os.fstat(handle.fileno()).st_ino
            size = os.fstat(handle.fileno()).st_size
            start = offset if 0 <= offset <= size else 0
            handle.seek(start)
            data = handle.read(max_bytes)
    except OSError:
        return None
    return FileSlice(data.decode("utf-8", errors="replace"), start + len(data), inode)


def _pread(path: str, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    if len(data) != size:
        raise OSError(errno.EIO, f"short read: {len(data)} of {size} bytes at offset {offset:#x}", path)
    return data


def _open_sqlite_ro(path: Path) -> sqlite3.Connection | None:
    if not path.is_file():
        return None
    try:
        # mode=ro: the agent never writes rasdaemon's database, and never creates one.
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error:
        return None


class LiveHost:
    """This machine. Keeps /dev/kmsg open between cycles, so each read returns only new records."""

    def __init__(self) -> None:
        self._kmsg_fd: int | None = None

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def read_from(self, path: str, offset: int, max_bytes: int) -> FileSlice | None:
        return _read_from(Path(path), offset, max_bytes)

    def stat(self, path: str) -> FileStat | None:
        """The file's size and mtime, or None (not in HostAccess: a host without it reads whole files)."""
        return _stat(path)

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def resolve(self, path: str) -> str | None:
        try:
            return os.path.realpath(path, strict=True)
        except (OSError, RuntimeError):
            return None

    def read_kmsg(self) -> str | None:
        if self._kmsg_fd is None:
            try:
                self._kmsg_fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return None
        records: list[str] = []
        while len(records) < KMSG_MAX_RECORDS:
            try:
                record = os.read(self._kmsg_fd, KMSG_RECORD_BYTES)
            except BlockingIOError:
                break  # nothing more to read now
            except BrokenPipeError:
                continue  # EPIPE: records were overwritten; the next read returns the oldest left
            except OSError:
                break
            if not record:
                break
            records.append(record.decode("utf-8", errors="replace"))
        return "".join(records)

    def open_sqlite(self, path: str) -> sqlite3.Connection | None:
        return _open_sqlite_ro(Path(path))

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        return _pread(path, offset, size)

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not installed", missing=True)
        except PermissionError:
            return CommandResult(tuple(argv), 126, "", f"{argv[0]}: permission denied", missing=True)
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else ""
            return CommandResult(tuple(argv), -1, out, f"timed out after {timeout_s:g}s", timed_out=True)
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        if self._kmsg_fd is not None:
            os.close(self._kmsg_fd)
            self._kmsg_fd = None


class SnapshotHost:
    """A snapshot: DIR/root/… mirrors files read (DIR/root/dev/kmsg holds kmsg records);
    DIR/commands.json lists commands run as {"argv", "rc", "stdout", and optionally "stderr",
    "timed_out", "missing"}; "stdout" names a file relative to DIR."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.root = directory / "root"
        self._root = str(self.root)
        self._dir = os.path.normpath(directory)
        commands_file = directory / "commands.json"
        loaded = json.loads(commands_file.read_text(encoding="utf-8")) if commands_file.exists() else []
        self.commands: list[dict[str, object]] = [e for e in loaded if isinstance(e, dict)]

    def _path(self, path: str) -> str:
        return os.path.join(self._root, path.lstrip("/"))

    def read_text(self, path: str) -> str | None:
        try:
            with open(self._path(path), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def read_from(self, path: str, offset: int, max_bytes: int) -> FileSlice | None:
        return _read_from(Path(self._path(path)), offset, max_bytes)

    def stat(self, path: str) -> FileStat | None:
        """The recorded file's size and mtime (the snapshot's copy: when it was recorded, or set by a test)."""
        return _stat(self._path(path))

    def list_dir(self, path: str) -> list[str] | None:
        """The recorded entries: files and directories the snapshot holds, and the names of a recorded
        listing (entries whose presence was all a collector looked at: ACPI's HEST, GHES.N)."""
        directory = self._path(path)
        try:
            names = set(os.listdir(directory))
        except OSError:
            return None
        if LISTING in names:
            names.discard(LISTING)
            try:
                with open(os.path.join(directory, LISTING), encoding="utf-8") as handle:
                    names.update(line for line in handle.read().splitlines() if line and "/" not in line)
            except OSError:
                pass
        return sorted(names)

    def resolve(self, path: str) -> str | None:
        """The resolved path recorded for it (DIR/realpaths.json), else the path resolved within the
        snapshot's own tree (a symlink kept in it); None when neither says."""
        try:
            with open(os.path.join(self._dir, REALPATHS), encoding="utf-8") as handle:
                known = json.load(handle)
        except (OSError, ValueError):
            known = {}
        target = known.get(path) if isinstance(known, dict) else None
        if isinstance(target, str):
            return target
        mirrored = self._path(path)
        if not os.path.lexists(mirrored):
            return None
        root, real = os.path.realpath(self._root), os.path.realpath(mirrored)
        return "/" + os.path.relpath(real, root) if real == root or real.startswith(root + os.sep) else None

    def read_kmsg(self) -> str | None:
        return self.read_text(KMSG)

    def open_sqlite(self, path: str) -> sqlite3.Connection | None:
        return _open_sqlite_ro(Path(self._path(path)))

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        """The recorded file's bytes; a sidecar PATH.errno naming an errno (EACCES, EIO …) replays
        the error the live read raised."""
        target = self._path(path)
        try:
            with open(target + ".errno", encoding="utf-8") as handle:
                name = handle.read().strip()
        except OSError:
            return _pread(target, offset, size)
        code = getattr(errno, name, errno.EIO)
        raise OSError(code, os.strerror(code), path)

    def _stdout(self, name: str) -> str:
        path = os.path.normpath(os.path.join(self._dir, name))
        if not path.startswith(self._dir + os.sep):
            raise ValueError(f"commands.json: stdout {name!r} is outside the snapshot")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def run(self, argv: list[str], *, timeout_s: float) -> CommandResult:
        for entry in self.commands:
            if entry.get("argv") != argv:
                continue
            stdout_file = entry.get("stdout")
            stdout = ""
            if isinstance(stdout_file, str) and stdout_file:
                stdout = self._stdout(stdout_file)
            rc = entry.get("rc", 0)
            stderr = entry.get("stderr", "")
            return CommandResult(
                tuple(argv),
                rc if isinstance(rc, int) else 0,
                stdout,
                stderr if isinstance(stderr, str) else "",
                timed_out=entry.get("timed_out") is True,
                missing=entry.get("missing") is True,
            )
        return CommandResult(tuple(argv), 127, "", f"{argv[0]}: not in snapshot", missing=True)
