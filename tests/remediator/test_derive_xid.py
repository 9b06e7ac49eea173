"""gpu_xid and gpu_sxid from the corpus's real GPU kernel logs (gpu/dmesg-*), through derive(): classified by
NVIDIA's Xid catalog, per GPU and action class, incidents (not per-channel lines) counted once."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import Gpu, GpuState, KernelLogState
from remediator.derive.xid import DAY_S
from remediator.signals import SignalValue
from remediator.xid_catalog import XID_CODES, classify, classify_line
from tests.builders.observations import Deriver, at, of, report

GSP = "gpu/dmesg-T-xid-119-gsp-rpc-timeout-h100-dell-xe9680.log"
DBE = "gpu/dmesg-iso-xid-48-dbe-63-row-remap-94-contained-peermem.log"
OFF_BUS = "gpu/dmesg-nvrm-fallen-off-bus-multiline-no-xid-10de-26b5-570.log"
APP = "gpu/dmesg-xid-31-mmu-fault-priv-violation-62-45-preemptive-cleanup.log"


def klog(name: str, *, when: dt.datetime, first_seq: int = 100) -> KernelLogState:
    """The sample's events as this boot's news: stamped at `when`, numbered from first_seq."""
    state = parse_kernel_log(sample(name), "dmesg").value
    base = next((e.timestamp for e in state.events if e.timestamp), None)
    events = []
    for n, e in enumerate(state.events):
        stamp = when + (e.timestamp - base) if base and e.timestamp else when
        events.append(e.model_copy(update={"seq": first_seq + n, "timestamp": stamp}))
    return state.model_copy(update={"events": events, "boot_id": "boot-1", "last_seq": first_seq + len(events) - 1})


def xids(signals: list[SignalValue]) -> dict[str, SignalValue]:
    return {s.detail["action"]: s for s in of(signals, "gpu_xid")}


def test_every_row_of_the_catalog_is_consistent() -> None:
    for code, row in XID_CODES.items():
        assert row.code == code
        assert all((row.mnemonic, row.meaning, row.bucket, row.source))
    assert classify(None).action == classify(79).action == "off_bus"
    assert classify(9999).action == "unlisted"
    assert {classify(c).action for c in (13, 31, 43, 45)} == {"application"}
    # 48: NVIDIA's WORKFLOW_XID_48 resets (the remap takes effect at the reset); only 64 (the repair failed) is RMA
    assert (classify(48).action, classify(64).action, classify(63).action) == ("ecc_dbe", "rma", "row_remap")
    assert (classify(94).action, classify(95).action, classify(74).action) == ("contained", "reset", "nvlink")


def test_dbe_sample_gives_a_dbe_to_reset_a_row_remap_and_one_contained_incident() -> None:
    signals = Deriver()(report(at(0), kernel_log=klog(DBE, when=at(0))))
    found = xids(signals)
    assert set(found) == {"ecc_dbe", "row_remap", "contained"}
    dbe = found["ecc_dbe"]
    assert (dbe.subject, dbe.value, dbe.detail["code"], dbe.detail["mnemonic"]) == (
        "0000:19:00.0",
        1.0,
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
    )
    assert "row_remap_logged" not in dbe.detail  # review #9: a one-report flag no rule needs any more
    assert dbe.detail["resettable"] is False  # nvidia-smi does not list 0000:19:00.0 here: no index to reset by
    contained = found["contained"]
    # nine lines (the headline, then one per channel) within a fraction of a second: one incident
    assert (contained.value, contained.detail["new"], contained.detail["incidents_new"]) == (1.0, 9, 1)
    assert (contained.detail["pid"], contained.detail["process"]) == (1248209, "python3.10")
    assert contained.detail["window_s"] == DAY_S


def test_gsp_timeouts_are_reset_class_and_carry_uuid_and_serial() -> None:
    (signal,) = of(Deriver()(report(at(30), kernel_log=klog(GSP, when=at(0)))), "gpu_xid")
    assert (signal.subject, signal.detail["action"], signal.detail["codes"]) == ("0000:9b:00.0", "reset", [119])
    assert signal.detail["uuid"] == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert signal.detail["serial"] == "1650124014249"
    assert signal.detail["nvidia_action"] == "RESET_GPU"
    # five lines over six minutes: three incidents (16:24:18-16:24:30 is one, 6 s apart)
    assert (signal.value, signal.detail["new"]) == (3.0, 5)
    assert (signal.detail["pid"], signal.detail["process"]) == (1240590, "gpud")


def test_fallen_off_the_bus_message_is_the_off_bus_class() -> None:
    (signal,) = of(Deriver()(report(at(0), kernel_log=klog(OFF_BUS, when=at(0)))), "gpu_xid")
    assert (signal.subject, signal.detail["action"], signal.detail["code"]) == ("0000:b3:00.0", "off_bus", None)
    assert (signal.detail["fallen_off_bus"], signal.detail["pci_id"]) == (True, "10de:26b5")


def test_application_xids_are_counted_as_such_and_62_is_a_reset() -> None:
    found = xids(Deriver()(report(at(0), kernel_log=klog(APP, when=at(0)))))
    assert set(found) == {"application", "reset"}
    assert found["application"].detail["codes"] == [31, 45]
    assert found["application"].value == 2.0  # the MMU fault, then one run of cleanups
    assert found["reset"].detail["code"] == 62


def test_nvidia_smi_names_the_gpu_when_it_has_it() -> None:
    gpu = Gpu(index=4, bdf="00000000:9B:00.0", uuid="GPU-509665ad-b600-ac93-3616-d754b23d636d", serial="1650124014249")
    state = GpuState(gpus=[gpu])
    (signal,) = of(Deriver()(report(at(30), kernel_log=klog(GSP, when=at(0)), gpu=state)), "gpu_xid")
    assert signal.subject == "gpu4 00000000:9B:00.0"  # remediator/gpu_parts.py's subject, as nvidia-smi's rules
    assert (signal.detail["index"], signal.detail["bdf"]) == (4, "00000000:9B:00.0")
    assert signal.detail["resettable"] is True


def test_xid_154_takes_the_recovery_action_its_line_names() -> None:
    """Review #6: 154 was `watch` whatever it said. NVIDIA's wording: 'GPU recovery action changed from 0x0 (None)
    to 0xN (<action>)' (ours: the corpus has no 154 line)."""

    def line(to: str) -> str:
        return f"GPU recovery action changed from 0x0 (None) to {to}"

    assert classify_line(154, line("0x1 (GPU Reset Required)")).action == "reset"
    assert classify_line(154, line("0x4 (Drain and Reset)")).action == "reset"
    assert classify_line(154, line("0x2 (Node Reboot Required)")).action == "reboot"
    assert classify_line(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)").action == (
        "watch"
    )
    assert classify_line(154, line("0x3 (Drain P2P)")).action == "watch"
    assert classify_line(48, line("0x1 (GPU Reset Required)")).action == "ecc_dbe"  # only 154 reads its text
    text = "[ 9000.000000] NVRM: Xid (PCI:0000:9b:00): 154, " + line("0x1 (GPU Reset Required)") + "\n"
    state = parse_kernel_log(text, "dmesg").value
    event = state.events[0].model_copy(update={"seq": 5, "timestamp": at(0)})
    gpu = Gpu(index=2, bdf="00000000:9B:00.0")
    update = {"events": [event], "boot_id": "boot-1"}
    (signal,) = of(
        Deriver()(report(at(0), kernel_log=state.model_copy(update=update), gpu=GpuState(gpus=[gpu]))), "gpu_xid"
    )
    assert (signal.detail["action"], signal.detail["code"], signal.detail["resettable"]) == ("reset", 154, True)


def test_counted_once_across_reports_and_the_serial_is_remembered() -> None:
    run = Deriver()
    run(report(at(30), kernel_log=klog(GSP, when=at(0))))
    again = run(report(at(31), kernel_log=klog(GSP, when=at(0))))  # the same records re-read
    assert of(again, "gpu_xid") == []
    later = parse_kernel_log(
        "[ 9000.000000] NVRM: Xid (PCI:0000:9b:00): 119, pid=77, name=train, Timeout after 6s of waiting for RPC\n",
        "dmesg",
    ).value
    event = later.events[0].model_copy(update={"seq": 900, "timestamp": at(60)})
    (signal,) = of(
        run(report(at(60), kernel_log=later.model_copy(update={"events": [event], "boot_id": "boot-1"}))), "gpu_xid"
    )
    assert (signal.value, signal.detail["serial"], signal.detail["process"]) == (4.0, "1650124014249", "train")


def test_sxid_fatal_and_non_fatal_per_switch() -> None:
    text = (
        "[ 3094.573453] nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted"
        " PRIV error (First)\n"
        "[ 3101.000001] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 20 LTSSM Fault Up\n"
    )  # ours, in nvidia-nvswitch's wording (the corpus has no SXid)
    state = parse_kernel_log(text, "dmesg").value
    events = [e.model_copy(update={"seq": 10 + n, "timestamp": at(0)}) for n, e in enumerate(state.events)]
    signals = Deriver()(report(at(0), kernel_log=state.model_copy(update={"events": events, "boot_id": "boot-1"})))
    found = {(s.subject, s.detail["severity"]) for s in of(signals, "gpu_sxid")}
    assert found == {("0000:88:00.0", "non-fatal"), ("0000:05:00.0", "fatal")}
    assert of(signals, "gpu_xid") == []


def test_a_gpu_tickets_kernel_log_finds_its_xids_by_pci_address() -> None:
    """A ticket on nvidia-smi's subject (`gpu4 00000000:9B:00.0`) quotes the driver's lines of that GPU only."""
    from remediator.evidence import _kernel_events

    state = klog(GSP, when=at(0))
    other = state.events[-1].model_copy(update={"subject": "0000:4e:00.0", "seq": 999})
    body = {"observations": {"kernel_log": state.model_copy(update={"events": [*state.events, other]}).model_dump()}}
    found = _kernel_events("gpu", "gpu4 00000000:9B:00.0", [body])
    assert {e["subject"] for e in found} == {"0000:9b:00.0"}
    assert {e["kind"] for e in found} == {"gpu_identity", "gpu_xid"}
