"""Where EDAC (or rasdaemon) says memory errors are: a signal's subject and detail parsed into the
memory controller and the layers the kernel numbers after it (channel, slot, csrow, …).

The EDAC side of remediator.dimms, which ties a location to a board's DIMM. Pure: stdlib, pydantic and
the report's types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from checker.schemas import EdacDimm, RasMemoryEvent

GENERIC_LAYERS = ("top", "middle", "lower")
"""rasdaemon's names for the layers, when nothing says what they are."""

# EDAC labels as the kernel writes them when nobody registered board labels.
_SKX_LABEL = re.compile(r"^CPU_SrcID#(\d+)_(?:MC|Ha)#(\d+)_Chan#(\d+)_DIMM#(\d+)$", re.I)  # skx, i10nm, sb_edac
_I7CORE_LABEL = re.compile(r"^CPU#(\d+)Channel#(\d+)_DIMM#(\d+)$", re.I)
_DEFAULT_LABEL = re.compile(r"^mc#(\d+)((?:(?:branch|channel|slot|csrow|memory)#\d+)+)$", re.I)  # edac_mc.c
_LABEL_LAYER = re.compile(r"(branch|channel|slot|csrow|memory)#(\d+)", re.I)
_LOCATION = re.compile(r"^(?:(?:branch|channel|slot|csrow|memory)\s+\d+\s*)+$", re.I)  # dimm_location
_LOCATION_LAYER = re.compile(r"(branch|channel|slot|csrow|memory)\s+(\d+)", re.I)
_RAS_SUBJECT = re.compile(r"^mc(-|\d+):(-|-?\d+):(-|-?\d+):(-|-?\d+)$")  # remediator.derive.rasdaemon
_SYSFS_SUBJECT = re.compile(r"^mc(\d+)(?:/(\S+))?$")  # an unlabelled EDAC entry, or a whole controller
_CSROW_ENTRY = re.compile(r"^csrow(\d+)/ch(\d+)$")
_MC_NAME = re.compile(r"(?:Socket|SrcID)#(\d+)(?:[\s_]*(?:IMC|Ha)#(\d+))?", re.I)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class EdacLocation(BaseModel):
    """Where EDAC (or rasdaemon) says the errors are, as far as the signal and the report tell."""

    model_config = ConfigDict(frozen=True)

    subject: str = Field("", description="What the signal named: a label, mcN/dimm3, mcN:top:mid:low.")
    mc: int | None = Field(None, description="The sysfs controller mcN (rasdaemon's mc).")
    entry: str | None = Field(None, description="sysfs entry: dimm3, rank1, csrow2/ch0.")
    label: str = Field("", description="The EDAC dimm_label.")
    location: str | None = Field(None, description="The EDAC dimm_location text.")
    layers: tuple[tuple[str, int], ...] = Field((), description="Positions after mc as the kernel numbers them.")
    socket: int | None = None
    controller: int | None = Field(None, description="The memory controller within the socket (MC#, Ha#).")

    def layer(self, name: str) -> int | None:
        return next((position for layer, position in self.layers if layer == name), None)

    @property
    def coordinates(self) -> tuple[int, ...] | None:
        """mc.top.mid[.low], the label map's key; None unless both the controller and its layers are known."""
        if self.mc is None or not self.layers:
            return None
        return (self.mc, *(position for _, position in self.layers))

    def describe(self) -> str:
        """'EDAC mc3 (socket 1, MC#1) channel 2 slot 0' — or what the signal named, when nothing was parsed."""
        within = ", ".join(
            text
            for text, known in ((f"socket {self.socket}", self.socket), (f"MC#{self.controller}", self.controller))
            if known is not None
        )
        words = [f"mc{self.mc}" if self.mc is not None else "", f"({within})" if within else ""]
        words += [f"{name} {position}" for name, position in self.layers]
        text = " ".join(w for w in words if w)
        if text:
            return f"EDAC {text}"
        return f"EDAC {self.label or self.entry or self.subject or 'location unknown'}"

    def evidence(self) -> dict[str, Any]:
        coordinates = self.coordinates
        return {
            "subject": self.subject,
            "mc": self.mc,
            "entry": self.entry,
            "label": self.label,
            "location": self.location,
            "socket": self.socket,
            "controller": self.controller,
            "channel": self.layer("channel"),
            "slot": self.layer("slot"),
            "csrow": self.layer("csrow"),
            "coordinates": ".".join(map(str, coordinates)) if coordinates else None,
            "text": self.describe(),
        }


def locate(subject: str, detail: Mapping[str, Any] | None = None) -> EdacLocation:
    """The EDAC location of a signal: its subject (a DIMM label, `mcN/dimm3`, `mcN`, rasdaemon's
    `mcN:top:mid:low`) and its detail (`mc`, `entry`, `label`, `location`, `mc_name`, `socket`, and
    rasdaemon's `top_layer`/`middle_layer`/`lower_layer`). The kernel's dimm_location wins over a
    kernel-format label, which wins over a csrow entry name, which wins over rasdaemon's layers."""
    detail = detail or {}
    subject = subject.strip()
    mc = _int(detail.get("mc"))
    entry = str(detail.get("entry") or "").strip() or None
    label = str(detail.get("label") or "").strip()
    location_text = str(detail.get("location") or "").strip() or None
    ras = [detail.get(key) for key in ("top_layer", "middle_layer", "lower_layer")]
    if m := _RAS_SUBJECT.match(subject):
        mc = mc if mc is not None else _int(m[1])
        if all(v is None for v in ras):
            ras = [None if v == "-" else int(v) for v in m.groups()[1:]]
    elif m := _SYSFS_SUBJECT.match(subject):
        mc = mc if mc is not None else int(m[1])
        entry = entry or m[2]
    elif not label:
        label = subject
    if label.lower().startswith("unknown"):
        label = ""  # rasdaemon's 'unknown memory' names nothing

    socket, controller = _int(detail.get("socket")), None
    candidates: list[list[tuple[str, int]]] = []
    if location_text and _LOCATION.match(location_text):
        candidates.append([(n.lower(), int(p)) for n, p in _LOCATION_LAYER.findall(location_text)])
    if m := _SKX_LABEL.match(label):
        socket, controller = int(m[1]), int(m[2])
        candidates.append([("channel", int(m[3])), ("slot", int(m[4]))])
    elif m := _I7CORE_LABEL.match(label):
        socket = int(m[1])
        candidates.append([("channel", int(m[2])), ("slot", int(m[3]))])
    elif m := _DEFAULT_LABEL.match(label):
        mc = mc if mc is not None else int(m[1])
        candidates.append([(n.lower(), int(p)) for n, p in _LABEL_LAYER.findall(m[2])])
    if entry and (m := _CSROW_ENTRY.match(entry)):
        candidates.append([("csrow", int(m[1])), ("channel", int(m[2]))])
    positions = [_int(v) for v in ras]
    if positions[0] is not None:
        known = positions[: positions.index(None)] if None in positions else positions
        candidates.append([(name, p) for name, p in zip(GENERIC_LAYERS, known, strict=False) if p is not None])
    if socket is None and (m := _MC_NAME.search(str(detail.get("mc_name") or ""))):
        socket, controller = int(m[1]), _int(m[2])
    return EdacLocation(
        subject=subject,
        mc=mc,
        entry=entry,
        label=label,
        location=location_text,
        layers=tuple(candidates[0]) if candidates else (),
        socket=socket,
        controller=controller,
    )


def locate_edac_dimm(dimm: EdacDimm, mc_name: str | None = None) -> EdacLocation:
    """The location of an EDAC sysfs entry (its signal's subject is its label, else mcN/entry)."""
    detail = {"mc": dimm.mc, "entry": dimm.name, "label": dimm.label, "location": dimm.location, "mc_name": mc_name}
    return locate(dimm.label or f"mc{dimm.mc}/{dimm.name}", detail)


def locate_ras_event(event: RasMemoryEvent) -> EdacLocation:
    """The location of a rasdaemon mc_event row (its signal's subject is its label, else mcN:top:mid:low)."""
    layers = [event.top_layer, event.middle_layer, event.lower_layer]
    subject = event.label.strip()
    if not subject or subject.lower().startswith("unknown"):
        subject = f"mc{'-' if event.mc is None else event.mc}:" + ":".join("-" if v is None else str(v) for v in layers)
    detail = {
        "mc": event.mc,
        "label": event.label,
        "top_layer": event.top_layer,
        "middle_layer": event.middle_layer,
        "lower_layer": event.lower_layer,
    }
    return locate(subject, detail)


def locate_in_observations(
    subject: str, observations: Mapping[str, Any], detail: Mapping[str, Any] | None = None
) -> EdacLocation:
    """The location of a signal's subject, its detail completed from a stored report's observations (JSON):
    the EDAC entry with that label or mcN/entry name (mc, entry, location, the controller's mc_name),
    else the newest rasdaemon event with that label (mc and layers)."""
    merged: dict[str, Any] = dict(detail or {})

    def fill(values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            if merged.get(key) in (None, "") and value not in (None, ""):
                merged[key] = value

    for controller in (observations.get("edac") or {}).get("controllers") or []:
        for dimm in controller.get("dimms") or []:
            if subject and subject in (dimm.get("label"), f"mc{dimm.get('mc')}/{dimm.get('name')}"):
                fill({"mc": dimm.get("mc"), "entry": dimm.get("name"), "label": dimm.get("label")})
                fill({"location": dimm.get("location"), "mc_name": controller.get("mc_name")})
    for event in reversed((observations.get("rasdaemon") or {}).get("memory_events") or []):
        if subject and subject == (event.get("label") or "").strip():
            fill({key: event.get(key) for key in ("mc", "top_layer", "middle_layer", "lower_layer")})
            break
    return locate(subject, merged)
