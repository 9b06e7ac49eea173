"""Which DIMM an EDAC location is: by topology and the board's label map, and saying so when that is not certain.

EDAC names memory by where a memory controller sees it: mcN, then the driver's layers (channel and
slot on skx, i10nm and sb_edac; csrow and channel on amd64 and the chipset drivers; memory on ghes).
dmidecode names a DIMM by the board's silkscreen (Locator) and sometimes a Bank Locator. Only a label
map of the hardware class (rasdaemon's dimm_labels idea, `<label>: <mc>.<top>.<mid>[.<low>]`) or an
exact name ties one to the other for certain. What text suggests (a bank locator's P1, NODE 1, CPU2,
Channel0_Dimm0) narrows the candidates and never more: a wrong serial on a ticket sends a technician
to pull a healthy DIMM. The label-map file is read by remediator.dimm_labels, EDAC's side parsed by
remediator.edac_locations. Pure: stdlib, pydantic and the report's types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from checker.schemas import DimmInventory
from remediator.dimm_labels import (
    DEFAULT_DIMM_LABELS,
    BoardLabels,
    DimmLabelMaps,
    DimmLabelsError,
    LabeledSlot,
    load_label_maps,
    parse_label_maps,
)
from remediator.edac_locations import (
    GENERIC_LAYERS,
    EdacLocation,
    locate,
    locate_edac_dimm,
    locate_in_observations,
    locate_ras_event,
)

__all__ = [  # the label-map file's and the EDAC locations' names too, so callers need one module
    "CONFIRM",
    "DEFAULT_DIMM_LABELS",
    "BoardLabels",
    "DimmAttribution",
    "DimmLabelMaps",
    "DimmLabelsError",
    "EdacLocation",
    "LabeledSlot",
    "attribute",
    "attribute_signal",
    "board_position",
    "load_label_maps",
    "locate",
    "locate_edac_dimm",
    "locate_in_observations",
    "locate_ras_event",
    "parse_label_maps",
]

CONFIRM = "confirm the slot before pulling"
_PLACEHOLDERS = frozenset({"", "not specified", "not provided", "unknown", "none", "n/a", "to be filled by o.e.m."})

# Board text. Bank locators count sockets from 0 (P0_Node0_…, P0 CHANNEL A, NODE 1 …); CPU1, PROC 1
# and Supermicro's P1-DIMMA1 count from 1.
_BANK_SOCKET = re.compile(r"^(?:P|NODE\s*)(\d+)(?=[\s_]|$)", re.I)
_CPU_SOCKET = re.compile(r"\b(?:CPU|PROC(?:ESSOR)?)\s*(\d+)", re.I)
_LOCATOR_SOCKET = re.compile(r"^P(\d+)-DIMM", re.I)
_BANK_CHANNEL = re.compile(r"CHANNEL\s*_?(\d+|[A-Z])(?![A-Z])", re.I)
_BANK_SLOT = re.compile(r"CHANNEL\s*_?(?:\d+|[A-Z])[\s_]+DIMM\s*_?(\d+)$", re.I)


def _norm(text: str | None) -> str:
    """Letters and digits, case ignored: how names are compared."""
    return "".join(ch for ch in (text or "").lower() if ch.isalnum())


def _clean(text: str | None) -> str | None:
    value = (text or "").strip()
    return None if value.lower() in _PLACEHOLDERS else value


# -- the board side ---------------------------------------------------------------


def board_position(dimm: DimmInventory) -> tuple[int | None, int | None, int | None]:
    """(socket, channel, slot) as a dmidecode record's own text suggests them — a hint, never proof."""
    bank, locator = _clean(dimm.bank_locator) or "", _clean(dimm.locator) or ""
    sockets = set()
    if m := _BANK_SOCKET.match(bank):
        sockets.add(int(m[1]))
    for text in (bank, locator):
        if m := _CPU_SOCKET.search(text):
            sockets.add(int(m[1]) - 1)
    if m := _LOCATOR_SOCKET.match(locator):
        sockets.add(int(m[1]) - 1)
    socket = next(iter(sockets)) if len(sockets) == 1 and min(sockets) >= 0 else None
    channel = None
    if m := _BANK_CHANNEL.search(bank):
        channel = int(m[1]) if m[1].isdigit() else ord(m[1].upper()) - ord("A")
    slot = int(m[1]) if (m := _BANK_SLOT.search(bank)) else None
    return socket, channel, slot


def _inventory(dimm: DimmInventory | Mapping[str, Any]) -> DimmInventory:
    if isinstance(dimm, DimmInventory):
        return dimm
    # Stored reports were validated when they arrived; take them as they are.
    values: dict[str, Any] = {name: dimm.get(name) for name in DimmInventory.model_fields}
    return DimmInventory.model_construct(**values)


# -- attribution ------------------------------------------------------------------


class DimmAttribution(BaseModel):
    """Which DIMM it is — `dimm` only when certain — or which it could be, and why."""

    model_config = ConfigDict(frozen=True)

    certain: bool
    dimm: DimmInventory | None = None
    candidates: tuple[DimmInventory, ...] = ()
    edac: EdacLocation
    method: str
    note: str

    def evidence(self) -> dict[str, Any]:
        """The ticket evidence's `part` (docs/tickets.md): the DIMM's dmidecode fields, null unless certain."""
        chosen = self.dimm if self.certain else None
        fields = {name: getattr(chosen, name) if chosen else None for name in DimmInventory.model_fields}
        # Vendor and model are what repair statistics count: known when every candidate is the same part.
        makers = {(d.manufacturer, d.part_number) for d in ([chosen] if chosen else self.candidates)}
        vendor, model = next(iter(makers)) if len(makers) == 1 else (None, None)
        return {
            "certain": self.certain,
            **fields,
            "vendor": vendor,
            "model": model,
            "edac": self.edac.evidence(),
            "candidates": [
                {
                    "locator": d.locator,
                    "bank_locator": _clean(d.bank_locator),
                    "serial": d.serial,
                    "manufacturer": d.manufacturer,
                    "part_number": d.part_number,
                    "size_mb": d.size_mb,
                }
                for d in self.candidates
            ],
            "method": self.method,
            "note": self.note,
        }


def _named(dimm: DimmInventory) -> str:
    bank = _clean(dimm.bank_locator)
    return f"{dimm.locator} ({bank})" if bank else dimm.locator


def _by_label_map(
    location: EdacLocation,
    records: Sequence[DimmInventory],
    hardware_class: str | None,
    label_maps: DimmLabelMaps | None,
) -> tuple[list[DimmInventory], str]:
    """The records the class's label map names for this location (one: certain), and why, when not one."""
    board = label_maps.classes.get(hardware_class or "") if label_maps is not None else None
    if board is None:
        return [], f"no label map for hardware class {hardware_class or 'unknown'}"
    coordinates = location.coordinates
    if coordinates is None:
        return [], f"the {hardware_class} label map needs the EDAC controller and layers, which are not known"
    dotted = ".".join(map(str, coordinates))
    slot = board.slot_at(coordinates)
    if slot is None:
        return [], f"the {hardware_class} label map has no slot at EDAC {dotted}"
    found = [
        r
        for r in records
        if _norm(r.locator) == _norm(slot.locator)
        and (slot.bank_locator is None or _norm(r.bank_locator) == _norm(slot.bank_locator))
    ]
    if len(found) != 1:
        listed = "does not list it" if not found else f"lists it {len(found)} times"
        return (
            found,
            f"the {hardware_class} label map puts EDAC {dotted} in slot {slot.name}; this host's dmidecode {listed}",
        )
    return found, ""


def _by_label(location: EdacLocation, records: Sequence[DimmInventory]) -> tuple[list[DimmInventory], str, str]:
    """Records whose Locator (or Bank Locator and Locator, as ghes_edac writes labels) equals the EDAC label:
    (records, method, why not one)."""
    wanted = _norm(location.label)
    if not wanted:
        return [], "", ""
    same = [r for r in records if _norm(r.locator) == wanted]
    if len(same) == 1:
        return same, "EDAC label equals a unique locator", ""
    if same:
        if location.socket is not None:
            on_socket = [r for r in same if board_position(r)[0] == location.socket]
            if len(on_socket) == 1:
                method = f"EDAC label equals a locator that repeats; the bank locator gives socket {location.socket}"
                return on_socket, method, ""
        why = f"the EDAC label {location.label!r} is the locator of {len(same)} DIMMs"
        return same, "EDAC label equals a repeated locator — unconfirmed", why
    combined = [r for r in records if _clean(r.bank_locator) and _norm(f"{r.bank_locator}{r.locator}") == wanted]
    if len(combined) == 1:
        return combined, "EDAC label equals a unique bank locator and locator", ""
    return [], "", ""


def _by_topology(location: EdacLocation, records: Sequence[DimmInventory]) -> tuple[list[DimmInventory], str]:
    """Candidates from what the records' own text says of socket, channel and slot. Channels are compared
    only where the EDAC channel counts within the socket (no controller, or the first)."""
    positions = [(r, board_position(r)) for r in records]
    pool = positions
    narrowed = False
    if location.socket is not None:
        on_socket = [(r, p) for r, p in positions if p[0] == location.socket]
        if on_socket:
            pool, narrowed = on_socket, True
    channel = location.layer("channel") if location.controller in (None, 0) else None
    slot = location.layer("slot")

    def fits(position: tuple[int | None, int | None, int | None]) -> bool:
        checks = [
            want == have for want, have in ((channel, position[1]), (slot, position[2])) if None not in (want, have)
        ]
        return bool(checks) and all(checks)

    fitting = [r for r, p in pool if fits(p)]
    if fitting:
        return fitting, "bank locator topology — unconfirmed"
    if narrowed:
        return [r for r, _ in pool], f"socket {location.socket} from EDAC — slot unconfirmed"
    return [r for r, _ in positions], "none"


def attribute(
    location: EdacLocation,
    dimms: Sequence[DimmInventory | Mapping[str, Any]],
    *,
    hardware_class: str | None = None,
    label_maps: DimmLabelMaps | None = None,
) -> DimmAttribution:
    """The DIMM at an EDAC location among a host's populated dmidecode records.

    Certain only when: the class's label map names a slot that dmidecode lists exactly once; or the
    EDAC label equals a locator that is unique on the host (letters and digits, case ignored), or one
    that repeats across sockets where the bank locator says which is on the EDAC location's socket.
    A label map and an equal label that disagree make it uncertain. Otherwise the candidates are the
    DIMMs the bank locators' topology fits, else those of the location's socket, else all of them."""
    records = [_inventory(d) for d in dimms]
    where = location.describe()
    board = label_maps.classes.get(hardware_class or "") if label_maps is not None else None
    if board is not None and board.layers and location.layers and location.layers[0][0] in GENERIC_LAYERS:
        # rasdaemon's top/middle/lower: the class says what they are.
        named = tuple(zip(board.layers, (p for _, p in location.layers), strict=False))
        location = location.model_copy(update={"layers": named})
        where = location.describe()
    if not records:
        note = f"{where}: the host reported no DIMM inventory (dmidecode), so no slot can be named: {CONFIRM}."
        return DimmAttribution(certain=False, edac=location, method="none", note=note)
    mapped, map_why = _by_label_map(location, records, hardware_class, label_maps)
    labelled, label_method, label_why = _by_label(location, records)
    if len(mapped) == 1:
        if len(labelled) == 1 and labelled[0] is not mapped[0]:
            note = (
                f"{where} could not be mapped to a slot with certainty: the {hardware_class} label map says "
                f"{_named(mapped[0])}, the EDAC label says {_named(labelled[0])}: {CONFIRM}."
            )
            return DimmAttribution(
                certain=False,
                candidates=(mapped[0], labelled[0]),
                edac=location,
                method="label map and EDAC label disagree",
                note=note,
            )
        note = f"{where} is slot {_named(mapped[0])} by the {hardware_class} label map."
        return DimmAttribution(
            certain=True, dimm=mapped[0], edac=location, method=f"label map {hardware_class}", note=note
        )
    if len(labelled) == 1:
        note = f"{where} is slot {_named(labelled[0])}: {label_method}."
        return DimmAttribution(certain=True, dimm=labelled[0], edac=location, method=label_method, note=note)
    if mapped:
        candidates, method = mapped, f"label map {hardware_class} — locator repeats, unconfirmed"
    elif labelled:
        candidates, method = labelled, label_method
    else:
        candidates, method = _by_topology(location, records)
    if method == "none":
        found = f"every DIMM of the host ({len(candidates)}) is a candidate"
    else:
        found = f"{len(candidates)} candidate{'s' if len(candidates) != 1 else ''} by {method}"
    reasons = "; ".join(why for why in (map_why, label_why, found) if why)
    note = f"{where} could not be mapped to a slot with certainty ({reasons}): {CONFIRM}."
    return DimmAttribution(certain=False, candidates=tuple(candidates), edac=location, method=method, note=note)


def attribute_signal(
    subject: str,
    detail: Mapping[str, Any] | None,
    dimms: Sequence[DimmInventory | Mapping[str, Any]],
    *,
    hardware_class: str | None = None,
    label_maps: DimmLabelMaps | None = None,
) -> DimmAttribution:
    """`attribute` for a signal's subject and detail (see `locate`)."""
    return attribute(locate(subject, detail), dimms, hardware_class=hardware_class, label_maps=label_maps)
