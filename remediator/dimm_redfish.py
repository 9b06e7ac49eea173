"""Which DIMM, by the BMC's Redfish memory inventory: a serial on the ticket only when the match is certain.

A DIMM signal from the BMC names the DIMM its own way: a log entry's text ('[ OEM ] Correctable ECC
@DIMMB1' on Supermicro, '(Processor 1, DIMM 3)' on HPE: the SEL's component) or a Memory resource's
DeviceLocator (the bmc_dimm_* signals' subject, with the MemoryLocation beside it in the detail). The
same BMC's Memory resources (Systems/{id}/Memory, the report's `redfish.memory`) carry DeviceLocator,
MemoryLocation and SerialNumber. Certain only when:

1. exactly one DIMM module's DeviceLocator equals the name (spaces at the ends and case ignored); else
   exactly one equals it on letters and digits alone (Dell's log names 'DIMM_A1' the DIMM its R650
   DeviceLocator calls 'DIMM A1': one BMC, two spellings; remediator.evidence._norm's rule), no other
   module's locator being the same on letters and digits; or
2. the signal's detail gives socket, channel and slot with the base they count from (`location_base`,
   as the collector read it off MemoryLocation), and exactly one module served a MemoryLocation with the
   same numbers and the same base (and the same memory controller where both give one).

A locator two modules share, a location without a known base, or Dell's socket-only hint (no
MemoryLocation: Links.Oem.Dell.CPUAffinity) give candidates, never a serial. GPU HBM modules are the
GPU's and never match. Pure: stdlib and the stored report's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

MAX_CANDIDATES = 24
_LOCATION = ("socket", "channel", "slot")


class RedfishDimmMatch(BaseModel):
    """The module a DIMM signal names in the BMC's inventory (`module` only when certain), or candidates."""

    model_config = ConfigDict(frozen=True)

    certain: bool
    module: dict[str, Any] | None = None
    candidates: tuple[dict[str, Any], ...] = ()
    method: str
    note: str

    def summary(self) -> dict[str, Any]:
        """The part evidence's `redfish` entry (docs/tickets.md, "Which DIMM")."""
        return {
            "certain": self.certain,
            "module": _brief(self.module) if self.module is not None else None,
            "candidates": [_brief(m) for m in self.candidates][:MAX_CANDIDATES],
            "method": self.method,
            "note": self.note,
        }


def _brief(module: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("uri", "device_locator", "socket", "memory_controller", "channel", "slot", "location_base", "serial")
    return {k: module.get(k) for k in (*keys, "manufacturer", "part_number", "capacity_mib", "device_type")}


def _same(a: object, b: object) -> bool:
    return isinstance(a, str) and isinstance(b, str) and a.strip().casefold() == b.strip().casefold() != ""


def _letters_digits(text: object) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum()) if isinstance(text, str) else ""


def _alike(a: object, b: object) -> bool:
    return _letters_digits(a) == _letters_digits(b) != ""


def modules_of(observations: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The DIMM modules of a stored report's Redfish section ([] when it was not read in that report)."""
    memory = (observations.get("redfish") or {}).get("memory") or []
    return [m for m in memory if isinstance(m, dict) and m.get("kind") == "dimm"]


def bmc_counts(subject: str, observations: Mapping[str, Any], serial: str | None = None) -> list[dict[str, Any]]:
    """The BMC's own counts of the DIMM named `subject` (by DeviceLocator), or of the DIMM with `serial` (the
    host's certain attribution of an EDAC-named DIMM: the BMC's count joins the EDAC ticket, the review's
    finding 4), in one stored report, for the ticket's counter history: `bmc_ce`/`bmc_ue` and which counter
    they are (null where not served)."""
    found = []
    for module in modules_of(observations):
        if not _same(module.get("device_locator"), subject) and not (serial and _same(module.get("serial"), serial)):
            continue
        lifetime = module.get("ce_lifetime") is not None or module.get("ue_lifetime") is not None
        counter = "lifetime" if lifetime else "current_period"
        ce, ue = module.get(f"ce_{counter}"), module.get(f"ue_{counter}")
        if ce is not None or ue is not None:
            found.append({"bmc_ce": ce, "bmc_ue": ue, "bmc_counter": counter})
    return found


def latest_modules(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The newest stored report's DIMM modules: the collector re-reads the inventory once an hour, so the
    latest report usually has none."""
    for body in reversed(reports):
        if found := modules_of(body.get("observations") or {}):
            return found
    return []


def inventory_of_this_boot(reports: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the newest inventory read (latest_modules) was made during the newest report's boot. One read
    before it may list a DIMM swapped while the host was down: its serial is then a candidate, never
    certain (the review's note 13). Unknown boot ids count as this boot."""
    now = ((reports[-1].get("host") or {}).get("boot_id")) if reports else None
    for body in reversed(reports):
        if modules_of(body.get("observations") or {}):
            read = (body.get("host") or {}).get("boot_id")
            return now is None or read is None or read == now
    return True


def before_this_boot(found: RedfishDimmMatch | None) -> RedfishDimmMatch | None:
    """A match made on an inventory read before the host's current boot: candidates only."""
    if found is None or not found.certain or found.module is None:
        return found
    note = f"{found.note}; but the BMC's inventory was read before the host's current boot (a swap since?): confirm"
    return RedfishDimmMatch(
        certain=False, candidates=(found.module,), method=f"{found.method} — read before this boot", note=note
    )


def match_module(
    subject: str, detail: Mapping[str, Any] | None, modules: Sequence[Mapping[str, Any]]
) -> RedfishDimmMatch | None:
    """The module the signal names (module docstring); None when the BMC's inventory says nothing of it."""
    dimms = [dict(m) for m in modules if m.get("kind", "dimm") == "dimm"]
    if not dimms:
        return None
    named = [m for m in dimms if _same(m.get("device_locator"), subject)]
    alike = [m for m in dimms if _alike(m.get("device_locator"), subject)] if not named else []
    if len(alike) > 1:
        note = f"{len(alike)} of the BMC's DIMMs have a DeviceLocator spelled like {subject!r}: confirm the slot"
        return RedfishDimmMatch(
            certain=False, candidates=tuple(alike), method="Redfish DeviceLocator repeats", note=note
        )
    if len(alike) == 1:
        locator = alike[0].get("device_locator")
        note = (
            f"the BMC's Memory resource {alike[0].get('uri')} has DeviceLocator {locator!r}, the name {subject!r} "
            "in other spelling (letters and digits the same, no other DIMM's)"
        )
        return RedfishDimmMatch(
            certain=True, module=alike[0], method="Redfish DeviceLocator, letters and digits", note=note
        )
    if len(named) == 1:
        locator = named[0].get("device_locator")
        note = f"the BMC's Memory resource {named[0].get('uri')} has DeviceLocator {locator!r}, as the signal names it"
        return RedfishDimmMatch(certain=True, module=named[0], method="Redfish DeviceLocator", note=note)
    if len(named) > 1:
        note = f"{len(named)} of the BMC's DIMMs have DeviceLocator {subject!r}: confirm the slot before pulling"
        return RedfishDimmMatch(
            certain=False, candidates=tuple(named), method="Redfish DeviceLocator repeats", note=note
        )
    return _by_location(detail or {}, dimms)


def _by_location(detail: Mapping[str, Any], dimms: list[dict[str, Any]]) -> RedfishDimmMatch | None:
    wanted = {k: detail.get(k) for k in _LOCATION}
    if any(not isinstance(v, int) or isinstance(v, bool) for v in wanted.values()):
        return None
    base = detail.get("location_base")
    where = ", ".join(f"{k} {v}" for k, v in wanted.items())
    fits = [m for m in dimms if all(m.get(k) == v for k, v in wanted.items())]
    controller = detail.get("memory_controller")
    if controller is not None:
        fits = [m for m in fits if m.get("memory_controller") in (None, controller)]
    served = [m for m in fits if m.get("location_source") == "memory_location" and m.get("location_base") == base]
    certain = served if base in (0, 1) and len(fits) == 1 else []
    if len(certain) == 1:
        note = f"the BMC's MemoryLocation {where} (counted from {base}) is {certain[0].get('uri')}, and no other DIMM's"
        return RedfishDimmMatch(certain=True, module=certain[0], method="Redfish MemoryLocation", note=note)
    if not fits:
        return None
    why = "no base known" if base not in (0, 1) else f"{len(fits)} modules at it"
    note = f"MemoryLocation {where} fits {len(fits)} of the BMC's DIMMs ({why}): confirm the slot before pulling"
    return RedfishDimmMatch(
        certain=False, candidates=tuple(fits), method="Redfish MemoryLocation — unconfirmed", note=note
    )


def _as_candidate(module: Mapping[str, Any]) -> dict[str, Any]:
    """A Redfish module in the shape of the host attribution's candidates (remediator.dimms), marked as the BMC's."""
    return {
        "locator": module.get("device_locator"),
        "bank_locator": None,
        "serial": module.get("serial"),
        "manufacturer": module.get("manufacturer"),
        "part_number": module.get("part_number"),
        "size_mb": module.get("capacity_mib"),
        "source": "redfish",
    }


def _union(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Both lists of candidates, a DIMM listed once (by serial where both give one, else by locator)."""
    out: list[dict[str, Any]] = []
    for candidate in (*first, *second):
        key = candidate.get("serial") or candidate.get("locator")
        if not any((c.get("serial") or c.get("locator")) == key and key for c in out):
            out.append(dict(candidate))
    return out[:MAX_CANDIDATES]


def _host_choice(part: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("locator", "bank_locator", "serial", "manufacturer", "part_number", "size_mb")
    return {**{k: part.get(k) for k in keys}, "source": "host"}


def merge_part(part: dict[str, Any], found: RedfishDimmMatch | None, *, bmc_named: bool = False) -> dict[str, Any]:
    """The DIMM part evidence (remediator.dimms DimmAttribution.evidence()) with what the BMC's inventory
    adds. The host's own attribution (EDAC and dmidecode) stands where it is certain; two certain answers
    with different serials make it uncertain, listing both DIMMs.

    A certain Redfish match fills in an uncertain host attribution only when the BMC named the DIMM
    (`bmc_named`: a sel_memory_ecc or bmc_dimm_* signal, the BMC's own name for its own inventory). An
    EDAC-named subject is the EDAC label, which the host attribution may have refused on purpose (a label
    map and EDAC label that disagree: a stale label, the outside review's case); the same text as a
    DeviceLocator proves nothing about which DIMM erred, so the Redfish module joins the candidates only."""
    if found is None:
        return part
    merged = {**part, "redfish": found.summary()}
    module = found.module if found.certain else None
    redfish_candidates = [_as_candidate(m) for m in ([module] if module is not None else found.candidates)]
    if module is None:
        if part.get("certain"):
            return merged
        return {**merged, "candidates": _union(part.get("candidates") or [], redfish_candidates)}
    serial = module.get("serial")
    if part.get("certain"):
        if part.get("serial") and serial and not _same(part.get("serial"), serial):
            note = (
                f"the host's attribution says serial {part.get('serial')} ({part.get('method')}), the BMC's inventory "
                f"says {serial} ({found.method}): confirm the slot before pulling"
            )
            both = _union([_host_choice(part)], redfish_candidates)
            return {
                **merged,
                "certain": False,
                "serial": None,
                "locator": None,
                "candidates": both,
                "method": "disagree",
                "note": note,
            }
        return merged
    refused = "disagree" in str(part.get("method") or "")
    if not bmc_named or refused:
        return {**merged, "candidates": _union(part.get("candidates") or [], redfish_candidates)}
    return {
        **merged,
        "certain": True,
        "locator": module.get("device_locator"),
        "bank_locator": None,
        "size_mb": module.get("capacity_mib"),
        "mem_type": module.get("device_type"),
        "manufacturer": module.get("manufacturer"),
        "part_number": module.get("part_number"),
        "serial": serial,
        "vendor": module.get("manufacturer"),
        "model": module.get("part_number"),
        "candidates": [],
        "method": found.method,
        "note": found.note,
    }
