"""NVIDIA Xid, SXid and fallen-off-the-bus lines: the corpus's real GPU kernel logs (gpu/dmesg-*), read in
place, through the kernel-log classifier and back out as records (checker/parsers/xid.py).

The corpus has no SXid line, no run-time "GPU has fallen off the bus" line and no /dev/kmsg record of the
multi-line probe message: those tests use lines written here in the driver's wording (nvidia-nvswitch's
"SXid (PCI:…): code, Non-fatal|Fatal, …" and its Severity/Data lines; /dev/kmsg escapes a record's
newlines as \\x0a) and say so.
"""

from __future__ import annotations

import pytest

from bench.samples import kmsg_records, sample
from checker.parsers.catalog import TEXT_PARSERS, run_checked
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.xid import GpuIdentity, gpu_bdf, gpu_lines
from checker.schemas import KernelEventKind, KernelLogState

K = KernelEventKind
GSP = "gpu/dmesg-T-xid-119-gsp-rpc-timeout-h100-dell-xe9680.log"
DBE = "gpu/dmesg-iso-xid-48-dbe-63-row-remap-94-contained-peermem.log"
OFF_BUS = "gpu/dmesg-nvrm-fallen-off-bus-multiline-no-xid-10de-26b5-570.log"
APP = "gpu/dmesg-xid-31-mmu-fault-priv-violation-62-45-preemptive-cleanup.log"


def state_of(name: str) -> KernelLogState:
    parsed = parse_kernel_log(sample(name), "dmesg")
    assert parsed.problems == []
    return parsed.value


@pytest.mark.parametrize(
    ("text", "bdf"),
    [("PCI:0000:9b:00", "0000:9b:00.0"), ("00000000:9B:00.0", "0000:9b:00.0"), ("0000:b3:00.0", "0000:b3:00.0"),
     ("0001:0A:00.1", "0001:0a:00.1"), ("not an address", None), (None, None)],
)  # fmt: skip
def test_gpu_bdf_is_the_kernels_form(text: str | None, bdf: str | None) -> None:
    assert gpu_bdf(text) == bdf


def test_xid_119_gsp_timeout_keeps_its_rpc_history_and_names_the_gpu() -> None:
    state = state_of(GSP)
    kinds = [(e.kind, e.subject) for e in state.events if e.kind.value.startswith("gpu_")]
    assert kinds == [(K.gpu_identity, "0000:9b:00.0")] + [(K.gpu_xid, "0000:9b:00.0")] * 5
    first = next(e for e in state.events if e.kind is K.gpu_xid)
    assert len(first.lines) == 22  # the headline and the GSP RPC history the driver printed with it
    assert "GPU4 RPC history" in "\n".join(first.lines)
    gpu = gpu_lines(state).value
    assert [x.code for x in gpu.xids] == [119] * 5
    assert [(x.pid, x.process) for x in gpu.xids][-2:] == [(1263500, "cache_mgr_main"), (1240590, "gpud")]
    assert gpu.xids[0].text.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert gpu.identities == [GpuIdentity("0000:9b:00.0", "GPU-509665ad-b600-ac93-3616-d754b23d636d", "1650124014249")]


def test_xid_48_dbe_then_63_row_remap_then_94_per_channel() -> None:
    state = state_of(DBE)
    assert {e.kind for e in state.events} == {K.gpu_xid}  # the nvidia-peermem noise is no event
    gpu = gpu_lines(state).value
    assert [x.code for x in gpu.xids] == [48, 63] + [94] * 9
    dbe, remap, contained = gpu.xids[:3]
    assert (dbe.bdf, dbe.pid, dbe.process) == ("0000:19:00.0", None, None)  # pid='<unknown>', name=<unknown>
    assert "double bit error (DBE)" in dbe.text
    assert "physAddr 0x12bac1c3e0" in dbe.text
    assert "reset gpu to activate" in remap.text
    assert contained.text == "Contained: SM (0x1). RST: No, D-RST: No"
    assert {(x.pid, x.process) for x in gpu.xids[3:]} == {(1248209, "python3.10")}
    assert state.events[-1].timestamp is not None


def test_fallen_off_the_bus_without_xid_79_over_three_lines() -> None:
    state = state_of(OFF_BUS)
    (event,) = state.events
    assert (event.kind, event.subject) == (K.gpu_fallen_off_bus, "0000:b3:00.0")
    assert "fallen off the bus" in event.lines[2]  # the continuation lines have no timestamp
    (record,) = gpu_lines(state).value.xids
    assert (record.code, record.fallen_off_bus, record.pci_id) == (None, True, "10de:26b5")


def test_fallen_off_the_bus_as_dev_kmsg_gives_it_one_record() -> None:
    """/dev/kmsg keeps the probe's one printk as one record, its newlines escaped (ours, in that format)."""
    record = (
        "3,812,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this"
        " system has\\x0aNVRM: fallen off the bus and is not responding to commands.\n"
    )
    state = parse_kernel_log(record, "kmsg").value
    (xid,) = gpu_lines(state).value.xids
    assert (xid.bdf, xid.fallen_off_bus, xid.pci_id) == ("0000:b3:00.0", True, "10de:26b5")
    # the corpus's dmesg lines, turned into /dev/kmsg records one per line, say the same
    state = parse_kernel_log(kmsg_records(sample(OFF_BUS)), "kmsg").value
    assert [x.bdf for x in gpu_lines(state).value.xids] == ["0000:b3:00.0"]


def test_a_probe_message_about_anything_else_is_no_event() -> None:
    """The same printk prefix says a GPU is unsupported by this driver (ours, in the driver's wording)."""
    text = (
        "[    5.100000] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80)\n"
        "               NVRM: installed in this system is not supported by the\n"
        "               NVRM: NVIDIA 535.129.03 driver release.\n"
    )
    assert parse_kernel_log(text, "dmesg").value.events == []


def test_app_xids_31_62_45_on_a_consumer_gpu() -> None:
    state = state_of(APP)
    gpu = gpu_lines(state).value
    assert [x.code for x in gpu.xids] == [31, 62] + [45] * 8
    assert (gpu.xids[0].pid, gpu.xids[0].process) == (13332, "cuda_plot_k32_v")
    assert "FAULT_PRIV_VIOLATION" in gpu.xids[0].text
    assert gpu.identities == [GpuIdentity("0000:0a:00.0", "GPU-760d0170-b7c5-6817-9414-6cc7112645de", None)]


def test_sxid_headline_takes_its_severity_and_data_lines() -> None:
    """Ours, in nvidia-nvswitch's wording: a headline, then its Severity and Data lines."""
    text = (
        "[ 3094.573453] nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted"
        " PRIV error (First)\n"
        "[ 3094.573472] nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Severity 0 Engine instance 32"
        " Sub-engine instance 00\n"
        "[ 3094.573497] nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Data {0x00000000, 0x00000000}\n"
        "[ 3101.000001] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 20 LTSSM Fault Up\n"
    )
    state = parse_kernel_log(text, "dmesg").value
    assert [(e.kind, e.subject, len(e.lines)) for e in state.events] == [
        (K.gpu_sxid, "0000:88:00.0", 3),
        (K.gpu_sxid, "0000:05:00.0", 1),
    ]
    first, second = gpu_lines(state).value.sxids
    assert (first.code, first.fatal, first.switch) == (12028, False, "nvidia-nvswitch2")
    assert (second.code, second.fatal, second.text) == (20034, True, "Link 20 LTSSM Fault Up")
    assert gpu_lines(state).value.xids == []  # an SXid is never read as an Xid


def test_older_driver_xid_without_pci_prefix_or_pid() -> None:
    """Drivers before ~450 print "Xid (0000:01:00): 31, Ch …" (ours, in that wording)."""
    text = "[  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000\n"
    (xid,) = gpu_lines(parse_kernel_log(text, "dmesg").value).value.xids
    assert (xid.bdf, xid.code, xid.pid, xid.text) == (
        "0000:01:00.0",
        31,
        None,
        "Ch 0000000b, engmask 00000120, intr 10000000",
    )


def test_gpu_lines_keeps_the_parser_contract_on_every_gpu_sample() -> None:
    for name in (GSP, DBE, OFF_BUS, APP):
        assert run_checked(TEXT_PARSERS["gpu_kernel_lines"].parse, sample(name)) is None


def test_xid_with_a_pid_but_no_name_and_with_neither() -> None:
    """R470-era lines: "79, pid=0, GPU has fallen off the bus." and "13, 0003 …" (ours, in that wording)."""
    text = (
        "[    5.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
        "[    6.000001] NVRM: Xid (PCI:0000:02:00): 13, 0003 00000000 0000a097 000019a4 00000000 00000000\n"
    )
    off, app = gpu_lines(parse_kernel_log(text, "dmesg").value).value.xids
    assert (off.code, off.pid, off.process, off.text, off.fallen_off_bus) == (
        79,
        0,
        None,
        "GPU has fallen off the bus.",
        True,
    )
    assert (app.bdf, app.code, app.pid, app.text) == (
        "0000:02:00.0",
        13,
        None,
        "0003 00000000 0000a097 000019a4 00000000 00000000",
    )
