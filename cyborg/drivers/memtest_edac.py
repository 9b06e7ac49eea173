"""Which DIMMs logged errors during a load test: EDAC's counts per DIMM read before and after the run.

A controller's total says that a DIMM on it erred, not which one; a load test after a repair must name
the DIMM, or a technician is sent to the one that was repaired while another failed. The kernel keeps
counts per DIMM (mcN/dimmM/dimm_ce_count, dimm_ue_count, dimm_label; rankM on drivers that count per
rank) and, on older kernels and drivers, per csrow channel (csrowN/chM_ce_count, chM_dimm_label); the
agent's own collector reads them (checker/collectors/edac.py) and its parser this module reuses. What
EDAC could not place on a DIMM (ce_noinfo_count, ue_noinfo_count) is reported as such, never guessed.
"""

from __future__ import annotations

from typing import Any

from checker.collectors.edac import SysfsReader, read_sysfs
from checker.parsers.edac import parse_edac_sysfs
from checker.schemas import EdacState


def edac_snapshot(system: SysfsReader) -> EdacState | None:
    """The EDAC counters now (every controller and its DIMMs); None on a host with no EDAC controller."""
    files = read_sysfs(system)
    if files is None:
        return None
    state = parse_edac_sysfs(files).value
    return state if state.controllers else None


def edac_changes(before: EdacState, after: EdacState) -> dict[str, Any]:
    """What rose between the two readings: per controller (`edac_new`, {'mc0_ce': 4}), per DIMM (`dimms`,
    label, mc, entry, location, ce, ue) and what EDAC could not place on a DIMM (`unplaced`)."""
    old_mcs = {c.mc: c for c in before.controllers}
    old_dimms = {(d.mc, d.name): d for c in before.controllers for d in c.dimms}
    controllers: dict[str, int] = {}
    dimms: list[dict[str, Any]] = []
    unplaced: dict[str, int] = {}
    for ctl in after.controllers:
        was = old_mcs.get(ctl.mc)
        for kind, now, then in (
            ("ce", ctl.ce_count, was.ce_count if was else 0),
            ("ue", ctl.ue_count, was.ue_count if was else 0),
            ("ce_noinfo", ctl.ce_noinfo_count, was.ce_noinfo_count if was else 0),
            ("ue_noinfo", ctl.ue_noinfo_count, was.ue_noinfo_count if was else 0),
        ):
            if now > then:
                (unplaced if kind.endswith("noinfo") else controllers)[f"mc{ctl.mc}_{kind}"] = now - then
        for dimm in ctl.dimms:
            old = old_dimms.get((dimm.mc, dimm.name))
            ce = dimm.ce_count - (old.ce_count if old else 0)
            ue = dimm.ue_count - (old.ue_count if old else 0)
            if ce > 0 or ue > 0:
                dimms.append(
                    {
                        "label": dimm.label or None,
                        "mc": dimm.mc,
                        "entry": dimm.name,
                        "location": dimm.location,
                        "ce": max(ce, 0),
                        "ue": max(ue, 0),
                    }
                )
    return {"edac_new": controllers, "dimms": dimms, "unplaced": unplaced}


def where(dimm: dict[str, Any]) -> str:
    """'CPU_SrcID#0_MC#0_Chan#0_DIMM#0 (mc0/dimm0)', or the sysfs entry alone when the DIMM has no label."""
    place = f"mc{dimm['mc']}/{dimm['entry']}"
    return f"{dimm['label']} ({place})" if dimm.get("label") else place


def describe(changes: dict[str, Any], target: str | None, labels: set[str]) -> tuple[list[str], bool | None]:
    """The failure lines for what rose, naming each DIMM, and whether the DIMM verified (`target`) is among
    them: True, False, or None when that cannot be told (no target, or it is not an EDAC label here, e.g. a
    slot's silkscreen locator: remediator/dimm_labels.yaml maps one to the other centrally)."""
    lines: list[str] = []
    dimms = changes["dimms"]
    if dimms:
        counts = ", ".join(
            f"{where(d)} " + " ".join(f"+{d[k]} {k.upper()}" for k in ("ce", "ue") if d[k]) for d in dimms
        )
        lines.append(f"new EDAC errors during the run on {counts}")
    placed = {f"mc{d['mc']}" for d in dimms}
    rest = {k: v for k, v in changes["edac_new"].items() if k.split("_")[0] not in placed}
    if rest:  # a controller's total rose and none of its DIMM counts did: no per-DIMM counts there
        lines.append(
            "new EDAC errors during the run: "
            + ", ".join(f"{k} +{v}" for k, v in sorted(rest.items()))
            + " (the controller keeps no per-DIMM counts: which DIMM is not told)"
        )
    if changes["unplaced"]:
        lines.append(
            "errors EDAC could not place on a DIMM: "
            + ", ".join(f"{k} +{v}" for k, v in sorted(changes["unplaced"].items()))
        )
    if target is None or target not in labels:
        return lines, None
    return lines, any(d.get("label") == target for d in dimms)
