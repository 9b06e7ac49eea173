"""Snapshot directories built in tmp_path from the real samples, the way `fleetfix snapshot` lays them out.

They are defined in bench/samples.py, which the benches use too.
"""

from __future__ import annotations

from bench.samples import (
    BOOT_ID,
    BTIME,
    EDAC_ROOT,
    NUMA_CXL,
    RAS_DB,
    RAS_SCHEMA,
    REFERENCE,
    ZEN2_MCE_ADDR,
    ZEN2_MCE_ROWS,
    SnapshotBuilder,
    insert_zen2_mce_records,
    journal_records,
    kmsg_records,
    rich_snapshot,
    scan_open_json,
    signed64,
    ttar_files,
)

__all__ = [
    "BOOT_ID",
    "BTIME",
    "EDAC_ROOT",
    "NUMA_CXL",
    "RAS_DB",
    "RAS_SCHEMA",
    "REFERENCE",
    "ZEN2_MCE_ADDR",
    "ZEN2_MCE_ROWS",
    "SnapshotBuilder",
    "insert_zen2_mce_records",
    "journal_records",
    "kmsg_records",
    "rich_snapshot",
    "scan_open_json",
    "signed64",
    "ttar_files",
]
