"""Rows of rasdaemon's mce_record table, written in rasdaemon's schema and modelled on real decoded machine
checks of the corpus (registers stored as signed 64-bit integers, as rasdaemon's sqlite3_bind_int64 leaves
them). The Zen 2 rows every snapshot database starts with are bench/samples.py's."""

from __future__ import annotations

from bench.samples import signed64

MCE_INSERT = (
    "INSERT INTO mce_record (id, timestamp, mcgcap, mcgstatus, status, addr, misc, tsc, walltime, cpu, cpuid, apicid,"
    " socketid, bank, cpuvendor, bank_name, error_msg, mcgstatus_msg, mcistatus_msg, mc_location)"
    " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, '', ?, ?)"
)


def icelake_row(row_id: int) -> tuple[object, ...]:
    """Event 112 of rasdaemon/ras-mc-ctl-errors-icelake-mce-memctrl-sddc-wrapped.txt as an mce_record row."""
    return (
        row_id,
        "2023-05-31 10:06:19 -0400",
        0x0F000C1C,
        signed64(0x8C00004200800090),
        0x1EFA4C7CC40,
        signed64(0x0D03451DE4819486),
        0x1DDBF37A52D71,
        0x6477545B,
        0x20,
        0x606A6,
        0x80,
        1,
        0x0D,
        "",
        "MEMORY CONTROLLER RD_CHANNEL0_ERR Transaction: Memory read error",
        "Corrected_error",
        "memory_channel=0",
    )


def skylake_l2_row(row_id: int) -> tuple[object, ...]:
    """mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt's L2 error as an mce_record row: its
    MCi_STATUS has bit 63 set, so rasdaemon stores it negative."""
    return (
        row_id,
        "2016-03-23 12:20:06 -0400",
        0x6000C14,
        signed64(0xAE2000000003110A),
        0xFFFC4B00,
        0x229AA040900086,
        0,
        1458750006,
        0,
        0x50654,
        0,
        0,
        11,
        "",
        "Generic CACHE Level-2 Generic Error",
        "Uncorrected_error",
        "",
    )
