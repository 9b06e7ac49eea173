"""The BMC's Redfish answers in a snapshot: `fleetfix snapshot` records each GET the redfish collector makes
into DIR/redfish/, and `fleetfix check --snapshot DIR` replays them, through the collector's one seam (its
client's get(path, timeout_s)), so parsing, cursors, paging and truncation run as they did on the host.

DIR/redfish/index.json: {"format": 1, "bmc_protocol", "settings": the collector's bounds (no URL, user or
password), "resources": {path: {"status": 200, "file": NAME} or {"status": HTTP status or null, "kind":
"error" | "transport" | "denied", "error": the message}}}; DIR/redfish/NAME is the JSON body. Never kept: the
BMC's address (the service root URL, with any credentials in it, is cut from paths, bodies and messages, so
an absolute link becomes a relative one; the bare address is replaced by <bmc> where it is an IP address or
a dotted name), the login (sushy's session POST happens below the seam), any header or cookie, and the
password or session token should either appear in an answer (replaced by <redacted>).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from checker.collectors.context import Context
from checker.collectors.redfish import RedfishCollector
from checker.collectors.redfish_client import (
    AccessDenied,
    RedfishClient,
    RedfishError,
    RedfishSettings,
    TransportError,
)
from checker.snapshot import SnapshotError

REDFISH_DIR = "redfish"
INDEX = "index.json"
FORMAT = 1
REPLAY_URL = "snapshot://redfish"
"""What a replayed report gives as the redfish section's `service`: the BMC's address is not in the snapshot."""
MIN_SECRET_CHARS = 4  # a shorter password cannot be masked without mangling the evidence around it
KEPT_SETTINGS = ("timeout_s", "max_entries", "max_pages", "inventory_every_s")
KINDS: dict[str, type[RedfishError]] = {"transport": TransportError, "denied": AccessDenied, "error": RedfishError}

Collector = Callable[[Context], None]


def _kind(error: RedfishError) -> str:
    if isinstance(error, TransportError):
        return "transport"
    return "denied" if isinstance(error, AccessDenied) else "error"


def file_name(path: str) -> str:
    """A safe, unique file name for a resource path (its query too: `Entries?$skip=50` is its own page)."""
    base = re.sub(r"[^A-Za-z0-9.,+=-]+", "_", path.removeprefix("/redfish/v1")).strip("_.")[:100] or "root"
    return f"{base}.{hashlib.sha256(path.encode()).hexdigest()[:10]}.json"


class RecordingRedfishClient(RedfishClient):
    """The collector's client, writing each answer it gives into DIR/redfish/ (the first answer per path)."""

    def __init__(self, settings: RedfishSettings, directory: Path, protocol: str) -> None:
        super().__init__(settings)
        self.folder = directory / REDFISH_DIR
        self.index: dict[str, Any] = {
            "format": FORMAT,
            "bmc_protocol": protocol,
            "settings": {name: getattr(settings, name) for name in KEPT_SETTINGS},
            "resources": {},
        }
        host = urlsplit(settings.url).hostname or ""
        at = rf"\[{re.escape(host)}\]" if ":" in host else re.escape(host)
        # the service root in any scheme, with or without credentials and port: what makes a link absolute
        self._address_url = (
            re.compile(rf"(?i)https?://(?:[^/@\s\"]*@)?{at}(?::\d+)?(?![A-Za-z0-9.-])") if host else None
        )
        # the bare address, where it cannot be an ordinary word (an IP address or a dotted name)
        self._address = (
            re.compile(rf"(?<![A-Za-z0-9.-]){at}(?![A-Za-z0-9-]|\.[A-Za-z0-9])") if "." in host or ":" in host else None
        )
        self._session_keys: set[str] = set()  # every session token seen: close() forgets the current one
        self.folder.mkdir(parents=True, exist_ok=True)
        self._save_index()

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.index["resources"]
        return resources

    def get(self, path: str, timeout_s: float) -> dict[str, Any]:
        try:
            body = super().get(path, timeout_s)
        except RedfishError as error:
            status = getattr(error.__context__, "status_code", None)  # sushy's HTTPError under our message
            self._record(path, {"status": status if isinstance(status, int) else None, "kind": _kind(error)}, error)
            raise
        self._record(path, {"status": 200}, body)
        return body

    def _record(self, path: str, entry: dict[str, Any], answer: dict[str, Any] | RedfishError) -> None:
        secrets = self._secrets()
        key = self._scrub(path, secrets) or "/"
        if key in self.resources:
            return  # a path read twice in a cycle (a System, for its logs and its memory) is replayed once
        if isinstance(answer, RedfishError):
            entry["error"] = self._scrub(str(answer), secrets)
        else:
            entry["file"] = file_name(key)
            body = self._scrub_json(answer, secrets)
            (self.folder / entry["file"]).write_text(json.dumps(body, indent=1, ensure_ascii=False), encoding="utf-8")
        self.resources[key] = entry
        self._save_index()

    def _save_index(self) -> None:
        (self.folder / INDEX).write_text(json.dumps(self.index, indent=1), encoding="utf-8")

    def _secrets(self) -> list[str]:
        key = self._auth.get_session_key() if self._auth is not None else None
        if isinstance(key, str):
            self._session_keys.add(key)
        found = list(self._session_keys)
        with contextlib.suppress(RedfishError):  # unreadable: the login failed, and nothing to mask
            found.append(self._password())
        return [s for s in found if len(s) >= MIN_SECRET_CHARS]

    def _scrub(self, text: str, secrets: list[str]) -> str:
        for secret in secrets:
            text = text.replace(secret, "<redacted>")
        if self._address_url is not None:
            text = self._address_url.sub("", text)
        if self._address is not None:
            text = self._address.sub("<bmc>", text)
        return text

    def _scrub_json(self, value: Any, secrets: list[str]) -> Any:
        if isinstance(value, str):
            return self._scrub(value, secrets)
        if isinstance(value, list):
            return [self._scrub_json(item, secrets) for item in value]
        if isinstance(value, dict):
            return {self._scrub(k, secrets): self._scrub_json(v, secrets) for k, v in value.items()}
        return value


class ReplayRedfishClient(RedfishClient):
    """The collector's client answering from DIR/redfish/: no network, no session. A path not recorded is a
    404, which the collector handles as it handles a BMC's (a problem; that resource only)."""

    def __init__(self, settings: RedfishSettings, folder: Path, resources: dict[str, Any]) -> None:
        super().__init__(settings)
        self.folder = folder
        self.resources = resources

    def _open(self, timeout_s: float) -> Any:
        raise TransportError("a snapshot replay opens no Redfish session")

    def get(self, path: str, timeout_s: float) -> dict[str, Any]:
        entry = self.resources.get(path)
        if not isinstance(entry, dict):
            raise RedfishError(f"GET {path}: 404, not in the snapshot (the collector did not read it when captured)")
        if "error" in entry:
            raise KINDS.get(str(entry.get("kind")), RedfishError)(str(entry["error"]))
        name = entry.get("file")
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            raise RedfishError(f"GET {path}: the snapshot's index names no file for it")
        try:
            body = json.loads((self.folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise RedfishError(f"GET {path}: snapshot file {name}: {error}") from None
        if not isinstance(body, dict):
            raise RedfishError(f"GET {path}: not a JSON object")
        return body


def recording_collectors(
    directory: Path, protocol: str, settings: RedfishSettings | None
) -> tuple[dict[str, Collector], RecordingRedfishClient | None]:
    """The collectors the agent runs under `protocol`, the redfish one recording into DIR/redfish/."""
    from checker.cycle import bmc_collectors

    collectors = bmc_collectors(protocol, settings)
    if "redfish" not in collectors or settings is None:
        return collectors, None
    client = RecordingRedfishClient(settings, directory, protocol)
    collectors["redfish"] = RedfishCollector(settings, protocol, client)  # same place: before sel and sensors
    return collectors, client


def replay_collectors(directory: Path) -> dict[str, Collector] | None:
    """The collectors of the capture's BMC protocol, the redfish one answering from DIR/redfish/; None when
    the snapshot holds no Redfish answers."""
    from checker.cycle import BMC_PROTOCOLS, bmc_collectors

    path = directory / REDFISH_DIR / INDEX
    if not path.is_file():
        return None
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SnapshotError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(index, dict) or not isinstance(index.get("resources"), dict):
        raise SnapshotError(f"{path}: no `resources` object")
    if not isinstance(index.get("format", FORMAT), int) or index.get("format", FORMAT) > FORMAT:
        raise SnapshotError(f"{path}: format {index.get('format')!r}; this fleetfix reads up to {FORMAT}")
    protocol = index.get("bmc_protocol", "redfish")
    if protocol not in BMC_PROTOCOLS or protocol == "ipmi":
        raise SnapshotError(f"{path}: bmc_protocol {protocol!r} is not redfish or both")
    kept = index.get("settings")
    kept = kept if isinstance(kept, dict) else {}
    defaults = RedfishSettings(url=REPLAY_URL)
    bounds: dict[str, Any] = {}  # the capture's (max_entries, max_pages …): the replay truncates as it did
    for name in KEPT_SETTINGS:
        value, default = kept.get(name), getattr(defaults, name)
        wanted = int if isinstance(default, int) else int | float
        if isinstance(value, wanted) and not isinstance(value, bool) and value > 0:
            bounds[name] = value
    settings = dataclasses.replace(defaults, **bounds)
    collectors = bmc_collectors(protocol, settings)
    client = ReplayRedfishClient(settings, path.parent, index["resources"])
    collectors["redfish"] = RedfishCollector(settings, protocol, client)
    return collectors
