"""The cputime watch's place in its rotation through /proc, kept between cycles in the agent's cursors.

Each cycle reads a slice of the process list, in pid order, from where the last one stopped (`after`:
the last pid judged); the rotation ends when a slice reaches the highest pid, and the next starts at
the lowest. Pid order is only a way to go round: a process keeps its pid, so every process alive
through a rotation is judged in it, and one started behind the cursor (a wrapped pid space) in the
next. Flagged processes (`watch`, with their start time so a reused pid is not taken for them) are
re-read every cycle. Counts per rotation decide `complete`: the last finished rotation and the one in
progress together left nothing unscanned or unverified.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CURSOR = "cputime"
MAX_WATCHED = 32  # flagged processes re-read every cycle, before the slice (2 stat files each while still over)


@dataclass
class Tally:
    """What one rotation did."""

    cycles: int = 0
    checked: int = 0
    unscanned: int = 0
    unverified: int = 0


@dataclass(frozen=True)
class Watched:
    """A flagged process: its pid, its start time (field 22, ticks since boot) and the thread found over."""

    pid: int
    start: int
    tid: int | None = None


@dataclass
class Rotation:
    after: int | None = None  # the last pid the rotation in progress judged; None: it starts at the lowest
    current: Tally = field(default_factory=Tally)
    last: Tally | None = None  # the last rotation that finished
    watch: list[Watched] = field(default_factory=list)
    uptime_s: float = 0.0
    boot_id: str | None = None

    @classmethod
    def load(cls, saved: dict[str, Any], uptime_s: float, boot_id: str | None) -> Rotation:
        """The stored rotation; a fresh one on the first cycle, after a reboot (another boot id, or the
        uptime went back: the pids, and the verdict, were another boot's) or when what is stored is not
        one."""
        fresh = cls(uptime_s=uptime_s, boot_id=boot_id)
        try:
            rotation = cls(
                after=_count_or_none(saved.get("after")),
                current=_tally(saved.get("current", {})),
                last=_tally(saved["last"]) if saved.get("last") is not None else None,
                watch=[_watched(w) for w in saved.get("watch", [])][:MAX_WATCHED],
                uptime_s=float(saved.get("uptime_s", 0.0)),
                boot_id=saved.get("boot_id"),
            )
        except (TypeError, ValueError, KeyError):
            return fresh
        if rotation.uptime_s > uptime_s or (boot_id is not None and rotation.boot_id not in (None, boot_id)):
            return fresh
        rotation.uptime_s, rotation.boot_id = uptime_s, boot_id or rotation.boot_id
        return rotation

    def finish(self) -> None:
        self.last, self.current, self.after = self.current, Tally(), None

    def dump(self) -> dict[str, Any]:
        return {
            "after": self.after,
            "current": asdict(self.current),
            "last": asdict(self.last) if self.last is not None else None,
            "watch": [asdict(w) for w in self.watch[:MAX_WATCHED]],
            "uptime_s": self.uptime_s,
            "boot_id": self.boot_id,
        }

    @property
    def unscanned(self) -> int:
        return self.current.unscanned + (self.last.unscanned if self.last else 0)

    @property
    def unverified(self) -> int:
        return self.current.unverified + (self.last.unverified if self.last else 0)

    @property
    def complete(self) -> bool:
        return self.last is not None and self.unscanned == 0 and self.unverified == 0


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _count_or_none(value: object) -> int | None:
    return None if value is None else _count(value)


def _tally(value: object) -> Tally:
    if not isinstance(value, dict):
        raise ValueError("not a tally")
    return Tally(**{name: _count(value.get(name, 0)) for name in ("cycles", "checked", "unscanned", "unverified")})


def _watched(value: object) -> Watched:
    if not isinstance(value, dict):
        raise ValueError("not a watched process")
    return Watched(_count(value["pid"]), _count(value["start"]), _count_or_none(value.get("tid")))
