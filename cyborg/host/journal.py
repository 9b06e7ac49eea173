"""The host's journal of the envelopes it accepted, in its state directory.

An envelope is written here (state `running`, with the boot id) before anything runs, and again
with its outcome. So a replayed envelope is recognised and refused; a redelivered one after the
agent died is recognised as interrupted — run again only if the action is idempotent, or found to
have completed across the host's restart — and a result the agent could not send is sent later.
Entries are kept a day past their envelope's expiry (after that the envelope is refused as expired).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from cyborg.envelope import Envelope

log = logging.getLogger(__name__)
KEEP_AFTER_EXPIRY = dt.timedelta(days=1)
JOURNAL_FILE = "cyborg-journal.json"

EntryState = Literal["running", "finished"]


@dataclass
class JournalEntry:
    id: str
    hostname: str
    remediation_id: int
    step: int
    attempt: int
    action: str
    params: dict[str, Any]
    timeout_s: int
    dry_run: bool
    expires_at: str
    accepted_at: str
    boot_id_before: str | None
    state: EntryState = "running"
    restart_issued_at: str | None = None  # set just before the driver asked the host to restart
    runs: int = 0  # how many times the driver was started for it
    runner: str | None = None  # the process running it ("pid:start time"): alive means in flight, not crashed
    finished_at: str | None = None
    reported: bool = False
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def accept(cls, envelope: Envelope, *, boot_id: str | None, now: dt.datetime) -> JournalEntry:
        return cls(
            id=str(envelope.id),
            hostname=envelope.hostname,
            remediation_id=envelope.remediation_id,
            step=envelope.step,
            attempt=envelope.attempt,
            action=envelope.action,
            params=dict(envelope.params),
            timeout_s=envelope.timeout_s,
            dry_run=envelope.dry_run,
            expires_at=envelope.expires_at.isoformat(),
            accepted_at=now.isoformat(),
            boot_id_before=boot_id,
        )


def this_process() -> str:
    """This process's identity across pid reuse: its pid and its start time in clock ticks after boot
    (field 22 of /proc/self/stat; empty where there is no /proc)."""
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19] if ")" in stat else ""


def runner_alive(runner: str | None) -> bool:
    """Whether the process that journalled itself as running an entry is still that process."""
    if not runner:
        return False
    pid_text, _, started = runner.partition(":")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # alive, and someone else's
    return _start_time(pid) == started


class Journal:
    """Entries by envelope id; every change is written to disk (atomically) before it counts.
    Without a path (the embedded demo's simulated hosts) it lives in memory: `durable` is False, and
    the executor then runs only simulated actions (a real one could run twice after a restart)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._entries: dict[str, JournalEntry] = {}
        if path is not None and path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            self._entries = {key: JournalEntry(**value) for key, value in data.get("entries", {}).items()}

    @property
    def durable(self) -> bool:
        return self.path is not None

    def get(self, envelope_id: str) -> JournalEntry | None:
        with self.lock:
            return self._entries.get(envelope_id)

    def put(self, entry: JournalEntry) -> None:
        with self.lock:
            self._entries[entry.id] = entry
            self._write()

    def entries(self) -> list[JournalEntry]:
        with self.lock:
            return list(self._entries.values())

    def prune(self, now: dt.datetime) -> int:
        with self.lock:
            old = [
                key
                for key, entry in self._entries.items()
                if entry.state == "finished"
                and entry.reported
                and dt.datetime.fromisoformat(entry.expires_at) + KEEP_AFTER_EXPIRY < now
            ]
            for key in old:
                del self._entries[key]
            if old:
                self._write()
            return len(old)

    def _write(self) -> None:
        if self.path is None:
            return
        temporary = self.path.with_suffix(".new")
        with temporary.open("w", encoding="utf-8") as handle:
            json.dump({"entries": {k: asdict(v) for k, v in self._entries.items()}}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        # The rename is durable only once the directory entry is: fsync the directory too.
        directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
