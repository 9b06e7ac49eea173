"""A load test names the DIMMs that logged errors during its run, from EDAC's per-DIMM counts read before and
after (real trees from $FLEETFIX_TEST_SAMPLES: the i10nm dimmN layout and the legacy csrow layout), and
says so when EDAC cannot tell which DIMM; the simulated host names them the same way."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.samples import listing_to_files, read_ttar, sample
from cyborg.drivers.memtest_edac import describe, edac_changes, edac_snapshot
from cyborg.envelope import Signer
from cyborg.host.executor import RESULT_TASK
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import RecordedSystem, sim_executor

EDAC = "/sys/devices/system/edac/mc"


def tree(relative: dict[str, str]) -> RecordedSystem:
    """A recorded host whose EDAC tree holds these files (paths relative to EDAC), directories listed."""
    system = RecordedSystem(files={f"{EDAC}/{path}": text for path, text in relative.items()})
    for path in relative:
        parts = path.split("/")
        for depth in range(len(parts)):
            folder = "/".join([EDAC, *parts[:depth]])
            entries = system.dirs.setdefault(folder, [])
            if parts[depth] not in entries:
                entries.append(parts[depth])
    return system


def bump(system: RecordedSystem, relative: str, by: int) -> None:
    path = f"{EDAC}/{relative}"
    system.files[path] = f"{int(system.files.get(path, '0').strip() or 0) + by}\n"


def test_the_dimm_that_erred_is_named_and_told_apart_from_the_one_verified() -> None:
    files = listing_to_files(sample("edac-sysfs/i10nm-mc7-dimm0-ce4.txt"), f"{EDAC}/")
    # ours, beside the real entry: a second DIMM on the same controller, the one that was repaired
    files |= {"mc7/dimm1/dimm_label": "CPU_SrcID#1_MC#3_Chan#1_DIMM#0\n", "mc7/dimm1/dimm_ce_count": "0\n"}
    system = tree(files)
    before = edac_snapshot(system)
    assert before is not None
    bump(system, "mc7/dimm0/dimm_ce_count", 5)
    after = edac_snapshot(system)
    assert after is not None
    changes = edac_changes(before, after)
    assert changes["dimms"] == [
        {"label": "CPU_SrcID#1_MC#3_Chan#0_DIMM#0", "mc": 7, "entry": "dimm0", "location": None, "ce": 5, "ue": 0}
    ]
    labels = {"CPU_SrcID#1_MC#3_Chan#0_DIMM#0", "CPU_SrcID#1_MC#3_Chan#1_DIMM#0"}
    lines, target_erred = describe(changes, "CPU_SrcID#1_MC#3_Chan#1_DIMM#0", labels)
    assert lines == ["new EDAC errors during the run on CPU_SrcID#1_MC#3_Chan#0_DIMM#0 (mc7/dimm0) +5 CE"]
    assert target_erred is False
    # a slot's silkscreen name is not an EDAC label: whether it erred is not told here
    assert describe(changes, "DIMM_A1", labels)[1] is None


def test_the_legacy_csrow_layout_names_the_channel_and_what_edac_could_not_place() -> None:
    system = tree(read_ttar(sample("edac-sysfs/node-exporter-legacy-csrow-layout.ttar"), "sys/devices/system/edac/mc/"))
    before = edac_snapshot(system)
    assert before is not None
    bump(system, "mc0/csrow1/ch1_ce_count", 3)
    bump(system, "mc0/ce_count", 4)
    bump(system, "mc0/ce_noinfo_count", 1)
    after = edac_snapshot(system)
    assert after is not None
    changes = edac_changes(before, after)
    assert changes["edac_new"] == {"mc0_ce": 4}
    assert changes["unplaced"] == {"mc0_ce_noinfo": 1}
    lines, _ = describe(changes, None, set())
    assert lines == [
        "new EDAC errors during the run on mc0csrow1channel1 (mc0/csrow1/ch1) +3 CE",
        "errors EDAC could not place on a DIMM: mc0_ce_noinfo +1",
    ]


def test_a_controller_with_no_dimm_counts_says_which_dimm_is_not_told() -> None:
    text = sample("edac-sysfs/csrow-ce-ue-count-two-servers.txt").split("# server B")[0]
    system = tree(listing_to_files(text, f"{EDAC}/"))
    before = edac_snapshot(system)
    assert before is not None
    bump(system, "mc0/ce_count", 2)
    after = edac_snapshot(system)
    assert after is not None
    lines, _ = describe(edac_changes(before, after), None, set())
    assert lines == [
        "new EDAC errors during the run: mc0_ce +2 (the controller keeps no per-DIMM counts: which DIMM is not told)"
    ]


def test_no_edac_tree_is_none() -> None:
    assert edac_snapshot(RecordedSystem()) is None


def test_the_simulated_host_names_the_dimm_that_erred() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, driver, reports = sim_executor(signer, faults=("dimm_ce_moderate",))
    [fault] = driver.host.faults
    faulty = driver.host.dimms[fault.dimm_index]
    other = next(d for d in driver.host.dimms if d is not faulty)
    params = {"dimm": other.label, "seconds": 60, "drained": True}
    assert (
        executor.handle(signer.sign(envelope("verify_memory_under_load", params)).model_dump())["outcome"] == "failed"
    )
    [result] = reports.of(RESULT_TASK)
    changed = result["changed"]
    assert changed["verdict"] == "fail"
    assert [(d["label"], d["mc"], d["entry"]) for d in changed["dimms_erred"]] == [
        (faulty.label, faulty.mc, faulty.name)
    ]
    assert changed["dimm_erred"] is False
    assert f"on {faulty.label} (mc{faulty.mc}/{faulty.name}) +" in result["error"]
    assert f"not the DIMM verified ({other.label})" in result["error"]
