"""One file on purpose: it walks remediator.dimms' rules of certainty in order, on one set of
inventories.

Which DIMM an EDAC location is (remediator.dimms): EDAC references parsed into topology, the label-map
file, and the rules of certainty — a serial goes on a ticket only when the slot is certain."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from bench.samples import sample
from checker.parsers.dmi import parse_dmidecode_memory
from checker.schemas import DimmInventory, EdacDimm, RasMemoryEvent
from checker.sim import HARDWARE_CLASSES
from checker.sim.standalone import standalone_host
from remediator import dimm_labels as dimm_labels_module
from remediator import dimms as dimms_module
from remediator import edac_locations as edac_locations_module
from remediator.dimms import (
    DEFAULT_DIMM_LABELS,
    DimmLabelsError,
    EdacLocation,
    attribute,
    attribute_signal,
    board_position,
    load_label_maps,
    locate,
    locate_edac_dimm,
    locate_in_observations,
    locate_ras_event,
    parse_label_maps,
)

FIXTURES = Path(__file__).with_name("fixtures")
MAPS = load_label_maps()


def x9drt() -> list[DimmInventory]:
    """The Supermicro X9DRT-P's 16 populated DIMMs (P1-DIMMA1 … P2-DIMMH2), read in place."""
    parsed = parse_dmidecode_memory(sample("dmi/dmidecode-full-supermicro-ami-3.0b.txt"))
    assert not parsed.problems
    return parsed.value


def amd_2s() -> list[DimmInventory]:
    """Our fixture: DIMM_A1 … DIMM_D1 on both sockets, told apart by Bank Locator P0/P1 CHANNEL x."""
    parsed = parse_dmidecode_memory((FIXTURES / "dmidecode-t-memory-amd-2s-repeated-locators.txt").read_text())
    assert not parsed.problems
    return parsed.value


def dimm(locator: str, bank: str | None = None, serial: str = "") -> DimmInventory:
    return DimmInventory(locator=locator, bank_locator=bank, size_mb=32768, serial=serial or f"SN-{locator}-{bank}")


def serials(found: Any) -> list[str | None]:
    return [d.serial for d in found.candidates]


# -- EDAC references into topology -----------------------------------------------


@pytest.mark.parametrize(
    ("subject", "detail", "expected"),
    [
        # skx_edac / i10nm_edac default label, mc from the signal's detail
        (
            "CPU_SrcID#1_MC#1_Chan#2_DIMM#0",
            {"mc": 3, "entry": "dimm4", "label": "CPU_SrcID#1_MC#1_Chan#2_DIMM#0"},
            (3, 1, 1, (("channel", 2), ("slot", 0)), "3.2.0"),
        ),
        # sb_edac: Ha# instead of MC#
        ("CPU_SrcID#0_Ha#1_Chan#3_DIMM#1", {"mc": 1}, (1, 0, 1, (("channel", 3), ("slot", 1)), "1.3.1")),
        # i7core_edac
        ("CPU#0Channel#2_DIMM#0", {"mc": 0}, (0, 0, None, (("channel", 2), ("slot", 0)), "0.2.0")),
        # the EDAC core's default: legacy csrow drivers and amd64
        ("mc#0csrow#1channel#3", {}, (0, None, None, (("csrow", 1), ("channel", 3)), "0.1.3")),
        # ghes_edac's default
        ("mc#0memory#3", {}, (0, None, None, (("memory", 3),), "0.3")),
        # dimm_location wins over a label that is not the kernel's
        (
            "DIMM_B2",
            {"mc": 2, "location": "channel 1 slot 0 "},
            (2, None, None, (("channel", 1), ("slot", 0)), "2.1.0"),
        ),
        ("mc0/csrow2/ch1", {}, (0, None, None, (("csrow", 2), ("channel", 1)), "0.2.1")),  # unlabelled csrow entry
        ("mc1/dimm3", {}, (1, None, None, (), None)),  # a dimm index alone says no channel
        ("mc2", {"mc_name": "Skylake Socket#1 IMC#0"}, (2, 1, 0, (), None)),  # edac_noinfo: the controller
        ("mc0:2:0:-", {}, (0, None, None, (("top", 2), ("middle", 0)), "0.2.0")),  # rasdaemon, no label
        ("CPU 0 DIMM 8", {}, (None, None, None, (), None)),  # the BMC's name: no EDAC topology
    ],
)
def test_edac_references_parse_into_topology(subject: str, detail: dict[str, Any], expected: tuple[Any, ...]) -> None:
    where = locate(subject, detail)
    coordinates = ".".join(map(str, where.coordinates)) if where.coordinates else None
    assert (where.mc, where.socket, where.controller, where.layers, coordinates) == expected


def test_edac_entries_rasdaemon_rows_and_stored_reports_locate_the_same_dimm() -> None:
    entry = EdacDimm(
        mc=3,
        name="dimm4",
        layout="dimm",
        label="CPU_SrcID#1_MC#1_Chan#2_DIMM#0",
        location="channel 2 slot 0",
        ce_count=5,
        ue_count=0,
    )
    from_sysfs = locate_edac_dimm(entry, "Skylake Socket#1 IMC#1")
    assert (from_sysfs.coordinates, from_sysfs.socket, from_sysfs.entry) == ((3, 2, 0), 1, "dimm4")
    assert from_sysfs.describe() == "EDAC mc3 (socket 1, MC#1) channel 2 slot 0"

    unlabelled = RasMemoryEvent(id=7, err_type="Corrected", label="unknown memory", mc=3, top_layer=2, middle_layer=0)
    from_ras = locate_ras_event(unlabelled)
    assert (from_ras.subject, from_ras.coordinates, from_ras.label) == ("mc3:2:0:-", (3, 2, 0), "")
    labelled = RasMemoryEvent(id=8, err_type="Corrected", label=entry.label, mc=3, top_layer=2, middle_layer=0)
    assert locate_ras_event(labelled).coordinates == (3, 2, 0)

    # A cmci_storm's or rasdaemon's signal carries no mc: the stored report's EDAC entry supplies it.
    observations = {
        "edac": {"controllers": [{"mc": 3, "mc_name": "Skylake Socket#1 IMC#1", "dimms": [entry.model_dump()]}]}
    }
    stored = locate_in_observations(entry.label, observations, {"source": "rasdaemon"})
    assert (stored.mc, stored.location, stored.coordinates, stored.socket) == (3, "channel 2 slot 0", (3, 2, 0), 1)
    ras_only = {"rasdaemon": {"memory_events": [{"label": "DIMM_B6", "mc": 3, "top_layer": 2, "middle_layer": 0}]}}
    assert locate_in_observations("DIMM_B6", ras_only).coordinates == (3, 2, 0)


def test_what_bank_locators_and_locators_suggest() -> None:
    assert board_position(dimm("P1-DIMMA1", "P0_Node0_Channel0_Dimm0")) == (0, 0, 0)
    assert board_position(dimm("P2-DIMMF2", "P1_Node1_Channel1_Dimm1")) == (1, 1, 1)
    assert board_position(dimm("DIMM_A1", "P1 CHANNEL A")) == (1, 0, None)
    assert board_position(dimm("A5", "NODE 1 CHANNEL 2 DIMM 0")) == (1, 2, 0)
    assert board_position(dimm("CPU2_DIMM_B1", "Not Specified")) == (1, None, None)
    assert board_position(dimm("PROC 1 DIMM 1")) == (0, None, None)
    assert board_position(dimm("P4-DIMM2B", "BANK1")) == (3, None, None)
    assert board_position(dimm("B3", "Not Specified")) == (None, None, None)  # Dell: the label map knows
    assert board_position(dimm("P1-DIMMA1", "P1_Node1_Channel0_Dimm0")) == (None, 0, 0)  # they disagree


# -- the old bug ------------------------------------------------------------------


def old_substring_match(subject: str, records: list[DimmInventory]) -> DimmInventory | None:
    """What remediator.service._dimm did before: the first locator found inside the label."""

    def norm(text: str | None) -> str:
        return "".join(ch for ch in (text or "").lower() if ch.isalnum())

    return next((d for d in records if norm(d.locator) and norm(d.locator) in norm(subject)), None)


def test_regression_a_socket_1_label_never_names_a_socket_0_dimm() -> None:
    """A repair ticket named the wrong DIMM: `DIMM0` is inside CPU_SrcID#1_MC#1_Chan#2_DIMM#0, so the old
    substring match picked socket 0's DIMM0 and a technician pulled a healthy DIMM."""
    label = "CPU_SrcID#1_MC#1_Chan#2_DIMM#0"
    records = [dimm(f"DIMM{n}", f"CPU{socket + 1}", f"S{socket}D{n}") for socket in (0, 1) for n in range(6)]
    assert old_substring_match(label, records) == records[0]  # socket 0's DIMM0: the bug
    found = attribute_signal(label, {"mc": 3, "label": label}, records, hardware_class="unknown", label_maps=MAPS)
    assert not found.certain
    assert found.dimm is None
    assert serials(found) == [f"S1D{n}" for n in range(6)]  # socket 1's, by the EDAC label and the bank locators
    assert "confirm the slot before pulling" in found.note
    assert found.evidence()["serial"] is None

    unique = [dimm(f"DIMM{n}", serial=f"S{n}") for n in range(12)]  # no bank locators at all
    assert old_substring_match(label, unique) == unique[0]
    found = attribute_signal(label, {"mc": 3}, unique, hardware_class="unknown", label_maps=MAPS)
    assert (found.certain, found.method, len(found.candidates)) == (False, "none", 12)


# -- rule 1: the class's label map --------------------------------------------------


def test_the_shipped_label_maps_name_every_simulated_dimm_with_its_serial() -> None:
    """Every DIMM of every simulated class, through its EDAC entry, reaches its own dmidecode record."""
    # every simulated class, and the decision scenarios' X9DRT-P (tests/decisions: a real dmidecode)
    assert set(MAPS.classes) == {hw.name for hw in HARDWARE_CLASSES} | {"x9drt-lab"}
    assert load_label_maps(DEFAULT_DIMM_LABELS) == MAPS
    for hw in HARDWARE_CLASSES:
        host = standalone_host("sim-1", hardware_class=hw.name)
        observations = host.report(dt.datetime(2026, 3, 1, tzinfo=dt.UTC)).observations
        assert observations.edac is not None
        assert observations.identity is not None
        named = 0
        for controller in observations.edac.controllers:
            for entry in controller.dimms:
                [sim] = [d for d in host.dimms if (d.mc, d.name) == (entry.mc, entry.name)]
                found = attribute(
                    locate_edac_dimm(entry, controller.mc_name),
                    observations.identity.dimms,
                    hardware_class=hw.name,
                    label_maps=MAPS,
                )
                assert found.certain, (hw.name, found.note)
                assert found.dimm is not None
                assert (found.dimm.locator, found.dimm.serial) == (sim.locator, sim.serial)
                assert found.method == f"label map {hw.name}"
                named += 1
        assert named == len(host.dimms)


def test_skx_socket_1_imc_1_channel_2_is_b6() -> None:
    records = [dimm(f"{'AB'[s]}{n}", "Not Specified", f"S{s}{n}") for s in (0, 1) for n in range(1, 7)]
    detail = {"mc": 3, "entry": "dimm4", "location": "channel 2 slot 0"}
    found = attribute_signal(
        "CPU_SrcID#1_MC#1_Chan#2_DIMM#0", detail, records, hardware_class="compute-skx-2s", label_maps=MAPS
    )
    assert (found.certain, found.dimm.locator if found.dimm else None, found.candidates) == (True, "B6", ())
    assert found.note == "EDAC mc3 (socket 1, MC#1) channel 2 slot 0 is slot B6 by the compute-skx-2s label map."


def test_a_label_map_slot_the_host_does_not_list_is_not_certain() -> None:
    records = [dimm(f"A{n}", serial=f"S{n}") for n in (1, 2)]  # A3 is missing (or the class is wrong)
    found = attribute_signal(
        "CPU_SrcID#0_MC#0_Chan#2_DIMM#0", {"mc": 0}, records, hardware_class="compute-skx-2s", label_maps=MAPS
    )
    assert not found.certain
    assert (
        "the compute-skx-2s label map puts EDAC 0.2.0 in slot A3; this host's dmidecode does not list it" in found.note
    )
    assert serials(found) == ["S1", "S2"]


def test_a_label_map_needs_coordinates_and_a_map_for_the_class() -> None:
    records = [dimm("A3", serial="S3")]
    no_mc = attribute_signal(
        "CPU_SrcID#0_MC#0_Chan#2_DIMM#0", {}, records, hardware_class="compute-skx-2s", label_maps=MAPS
    )
    assert not no_mc.certain
    assert "needs the EDAC controller and layers" in no_mc.note
    no_map = attribute_signal(
        "mc0/dimm4", {"location": "channel 2 slot 0"}, records, hardware_class="rack-9000", label_maps=MAPS
    )
    assert not no_map.certain
    assert "no label map for hardware class rack-9000" in no_map.note
    unmapped = attribute_signal("mc9:0:0:-", {}, records, hardware_class="compute-skx-2s", label_maps=MAPS)
    assert "has no slot at EDAC 9.0.0" in unmapped.note


BOARD = """
version: 1
classes:
  amd-2s:
    board: an EPYC board whose Locators repeat across sockets
    layers: [csrow, channel]
    dimms:
      - {locator: DIMM_A1, bank_locator: P0 CHANNEL A, edac: "0.0.0, 0.1.0"}
      - {locator: DIMM_A1, bank_locator: P1 CHANNEL A, edac: ["1.0.0", "1.1.0"]}
  amd-2s-locators-only:
    dimms:
      - {locator: DIMM_A1, edac: "1.0.0"}
  x9drt:
    board: Supermicro X9DRT-P
    layers: [channel, slot]
    dimms:
      - {locator: P1-DIMMA1, edac: "0.0.0"}
      - {locator: P2-DIMME1, edac: "1.0.0"}
"""


def test_a_label_map_with_bank_locators_tells_repeated_locators_apart() -> None:
    maps = parse_label_maps(BOARD)
    records = amd_2s()
    found = attribute_signal("mc#1csrow#1channel#0", {}, records, hardware_class="amd-2s", label_maps=maps)
    assert (found.certain, found.dimm.serial if found.dimm else None) == (True, "8130D2F0")
    assert found.note == "EDAC mc1 csrow 1 channel 0 is slot DIMM_A1 (P1 CHANNEL A) by the amd-2s label map."
    # The same map without bank locators names a locator the host lists twice: both are candidates.
    found = attribute_signal(
        "mc#1csrow#0channel#0", {}, records, hardware_class="amd-2s-locators-only", label_maps=maps
    )
    assert not found.certain
    assert serials(found) == ["8030D2F0", "8130D2F0"]
    assert "lists it 2 times" in found.note


def test_a_label_map_confirms_the_x9drt_slot_the_bank_locators_only_suggest() -> None:
    records = x9drt()
    detail = {"mc": 1, "label": "CPU_SrcID#1_Ha#0_Chan#0_DIMM#0"}
    suggested = attribute_signal(detail["label"], detail, records, hardware_class="x9drt-unmapped", label_maps=MAPS)
    assert (suggested.certain, suggested.method) == (False, "bank locator topology — unconfirmed")
    assert [d.locator for d in suggested.candidates] == ["P2-DIMME1"]  # not socket 0's P1-DIMMA1 (Channel0_Dimm0 too)
    confirmed = attribute_signal(
        detail["label"], detail, records, hardware_class="x9drt", label_maps=parse_label_maps(BOARD)
    )
    assert (confirmed.certain, confirmed.dimm.serial if confirmed.dimm else None) == (True, "45402C7A")


def test_a_label_map_and_an_equal_label_that_disagree_are_not_certain() -> None:
    records = x9drt()
    # ras-mc-ctl registered P2-DIMMF1 as mc1's channel 0 slot 0 label; the class map says P2-DIMME1.
    detail = {"mc": 1, "location": "channel 0 slot 0", "label": "P2-DIMMF1"}
    found = attribute_signal("P2-DIMMF1", detail, records, hardware_class="x9drt", label_maps=parse_label_maps(BOARD))
    assert (found.certain, found.method) == (False, "label map and EDAC label disagree")
    assert [d.locator for d in found.candidates] == ["P2-DIMME1", "P2-DIMMF1"]


# -- rules 2 and 3: an EDAC label equal to a locator --------------------------------


def test_an_edac_label_equal_to_a_unique_locator_is_certain() -> None:
    records = x9drt()
    found = attribute_signal("P2-DIMME1", {"mc": 1}, records, label_maps=MAPS)  # ras-mc-ctl --register-labels
    assert (found.certain, found.method, found.dimm.serial if found.dimm else None) == (
        True,
        "EDAC label equals a unique locator",
        "45402C7A",
    )
    assert attribute_signal("p2 dimme1", {}, records).certain  # letters and digits, case ignored
    # ghes_edac writes "<bank locator> <locator>"
    ghes = attribute_signal("P1_Node1_Channel0_Dimm0 P2-DIMME1", {}, records)
    assert (ghes.certain, ghes.method) == (True, "EDAC label equals a unique bank locator and locator")


def test_an_edac_label_equal_to_a_repeated_locator_is_ambiguous_unless_the_socket_is_known() -> None:
    records = amd_2s()
    found = attribute_signal("DIMM_A1", {"mc": 1}, records)
    assert (found.certain, found.method) == (False, "EDAC label equals a repeated locator — unconfirmed")
    assert [(d.locator, d.bank_locator, d.serial) for d in found.candidates] == [
        ("DIMM_A1", "P0 CHANNEL A", "8030D2F0"),
        ("DIMM_A1", "P1 CHANNEL A", "8130D2F0"),
    ]
    assert "the EDAC label 'DIMM_A1' is the locator of 2 DIMMs" in found.note
    # The controller's name says socket 1; the bank locator says which DIMM_A1 is on it.
    on_socket = attribute_signal("DIMM_A1", {"mc": 2, "mc_name": "Skylake Socket#1 IMC#0"}, records)
    assert (on_socket.certain, on_socket.dimm.bank_locator if on_socket.dimm else None) == (True, "P1 CHANNEL A")
    assert on_socket.method == "EDAC label equals a locator that repeats; the bank locator gives socket 1"
    # A socket no bank locator names decides nothing.
    assert not attribute_signal("DIMM_A1", {"socket": 3}, records).certain


def test_the_amd_kernel_label_against_repeated_locators_gives_candidates() -> None:
    """amd64_edac's default label names mc, csrow and channel, never the board: channel A of either socket."""
    found = attribute_signal("mc#1csrow#0channel#0", {}, amd_2s(), hardware_class="unknown", label_maps=MAPS)
    assert (found.certain, found.method) == (False, "bank locator topology — unconfirmed")
    assert serials(found) == ["8030D2F0", "8130D2F0"]
    part = found.evidence()
    assert (part["certain"], part["locator"], part["serial"], part["vendor"], part["model"]) == (
        False,
        None,
        None,
        "Samsung",
        "M393A4K40DB3-CWE",
    )
    assert [c["bank_locator"] for c in part["candidates"]] == ["P0 CHANNEL A", "P1 CHANNEL A"]


# -- rule 4 and 5: inference and substrings never make it certain ----------------------


def test_bank_locator_topology_alone_is_never_certain_even_with_one_candidate() -> None:
    records = x9drt()
    found = attribute_signal("CPU_SrcID#0_Ha#0_Chan#1_DIMM#1", {"mc": 0}, records, label_maps=MAPS)
    assert not found.certain
    assert [d.locator for d in found.candidates] == ["P1-DIMMB2"]
    assert found.note.endswith(
        "(no label map for hardware class unknown; 1 candidate by bank locator topology — unconfirmed): "
        "confirm the slot before pulling."
    )
    # Channels count per controller on iMC 2, so only the slot is compared: slot 0 of socket 1's channels.
    other_imc = attribute_signal("CPU_SrcID#1_MC#2_Chan#1_DIMM#0", {"mc": 5}, records)
    assert [d.locator for d in other_imc.candidates] == ["P2-DIMME1", "P2-DIMMF1", "P2-DIMMG1", "P2-DIMMH1"]
    # The socket alone (errors EDAC could not pin on a DIMM) narrows to that socket's DIMMs.
    socket_only = attribute_signal("mc1", {"mc_name": "Ivy Bridge SrcID#1_Ha#0"}, records)
    assert (socket_only.certain, socket_only.method) == (False, "socket 1 from EDAC — slot unconfirmed")
    assert [d.locator[:2] for d in socket_only.candidates] == ["P2"] * 8


@pytest.mark.parametrize("label", ["CPU1_P1-DIMMA1", "P1-DIMMA1-LEFT", "DIMMA1", "P1"])
def test_a_locator_inside_the_label_or_the_label_inside_a_locator_is_never_certain(label: str) -> None:
    found = attribute_signal(label, {}, x9drt(), label_maps=MAPS)
    assert not found.certain
    assert found.dimm is None


def test_no_inventory_and_the_evidence_shape() -> None:
    nothing = attribute_signal(
        "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", {"mc": 0}, [], hardware_class="compute-skx-2s", label_maps=MAPS
    )
    assert (nothing.certain, nothing.candidates) == (False, ())
    assert "reported no DIMM inventory" in nothing.note
    keys = {
        "certain", "locator", "bank_locator", "size_mb", "mem_type", "speed_mts", "manufacturer", "part_number",
        "serial", "non_volatile", "vendor", "model", "edac", "candidates", "method", "note",
    }  # fmt: skip
    assert set(nothing.evidence()) == keys
    assert set(nothing.evidence()["edac"]) == {
        "subject", "mc", "entry", "label", "location", "socket", "controller", "channel", "slot", "csrow",
        "coordinates", "text",
    }  # fmt: skip
    # Stored reports hand over JSON: the same answer from dicts.
    records = [d.model_dump(mode="json") for d in x9drt()]
    assert attribute_signal("P2-DIMME1", {}, records).certain
    assert isinstance(locate(""), EdacLocation)


# -- the label-map file -------------------------------------------------------------


def test_broken_label_map_files_are_refused_with_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "labels.yaml"
    bad.write_text("version: 1\nclasses:\n  c1:\n    dimms:\n      - {locator: A1, edac: 0.3}\n")
    with pytest.raises(DimmLabelsError, match=r"labels\.yaml:5: classes\.c1\.dimms\.0\.edac: .*quote EDAC coordinates"):
        load_label_maps(bad)
    with pytest.raises(DimmLabelsError, match=r"<dimm labels>:4: classes\.c1\.dimms\.1\.edac: .*'0\.x' is not EDAC"):
        parse_label_maps(
            'version: 1\nclasses:\n  c1:\n    dimms: [{locator: A1, edac: "0.1"}, {locator: A2, edac: "0.x"}]\n'
        )
    with pytest.raises(DimmLabelsError, match=r":4: classes\.c1\.slots: Extra inputs are not permitted"):
        parse_label_maps('version: 1\nclasses:\n  c1:\n    slots: {}\n    dimms: [{locator: A1, edac: "0.1"}]\n')
    with pytest.raises(DimmLabelsError, match=r"version"):
        parse_label_maps("version: 2\nclasses: {}\n")
    with pytest.raises(DimmLabelsError, match=r"<dimm labels>:3: not valid YAML"):
        parse_label_maps("version: 1\nclasses: [\n")
    with pytest.raises(DimmLabelsError, match=r"cannot read"):
        load_label_maps(tmp_path / "missing.yaml")


def test_label_maps_that_contradict_themselves_are_refused() -> None:
    text = """version: 1
classes:
  c1:
    layers: [channel, slot]
    dimms:
      - {locator: A1, edac: "0.0.0"}
      - {locator: A2, edac: "0.0.0"}
      - {locator: A1, edac: "0.1.0"}
      - {locator: A4, edac: "0.2"}
  c2:
    layers: [channel]
    dimms:
      - {locator: B1, edac: "0.0.0"}
"""
    with pytest.raises(DimmLabelsError) as refused:
        parse_label_maps(text, "labels.yaml")
    assert str(refused.value).splitlines() == [
        "labels.yaml:7: classes.c1.dimms.1.edac: 0.0.0 is already A1",
        "labels.yaml:8: classes.c1.dimms.2.locator: A1 is listed twice",
        "labels.yaml:9: classes.c1.dimms.3.edac: 0.2: every slot needs 3 numbers",
        "labels.yaml:11: classes.c2.layers: 1 layers, but coordinates have 2 after mc",
    ]


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        (dimms_module, {"checker.schemas", "remediator.dimm_labels", "remediator.edac_locations"}),
        (dimm_labels_module, {"remediator.baselines"}),
        (edac_locations_module, {"checker.schemas"}),
    ],
)
def test_the_modules_are_pure(module: Any, allowed: set[str]) -> None:
    """No database, web or task code: stdlib, pydantic, PyYAML, the report's types and the baselines' helper."""
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    project = {name for name in imported if name.split(".")[0] in {"core", "checker", "remediator", "ticketing", "api"}}
    assert project == allowed
    assert not {name.split(".")[0] for name in imported} & {"sqlalchemy", "celery", "fastapi", "httpx"}
