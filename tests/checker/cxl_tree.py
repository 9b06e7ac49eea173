"""A host with two CXL memory expanders for tests: /sys/bus/cxl/devices (memN with serial, firmware,
capacity, beside the ports, decoders and regions the bus also lists) and a rasdaemon database with
the cxl_* tables, from the project's own fixtures (tests/checker/fixtures/cxl: no real CXL RAS sample
is public yet; README.md there)."""

from __future__ import annotations

import json
import sqlite3

from bench.samples import RAS_DB, RAS_SCHEMA, SnapshotBuilder, ours

DEVICES = "/sys/bus/cxl/devices"
MEMDEVS = {"mem0": ("0x5a17c0de", "0000:35:00.0"), "mem1": ("0x5a17c0df", "0000:36:00.0")}


def rows() -> list[str]:
    """The INSERT statements of the fixture, in order: 0 threshold (mem0), 1 uncorrectable read (mem0),
    2 corrected DRAM (mem1), 3 poison (mem0), 4 poison injected (mem1, an Inject record), 5 AER UE (mem1),
    6 AER CE (mem1), 7 row 3's poison listed again (mem0), 8 that poison cleared (mem0), 9 the injected
    poison listed (mem1, source Injected), 10 External poison, list overflowed (mem1), 11 AER UE Received
    Poison From Peer (mem1), 12 AER UE Memory Data Parity + IDE Rx, first error the parity (mem1),
    13 a General Media record of a host-injected poison (mem0), 14 Memory Module: life used Critical and
    Maintenance Needed (mem0), 15 Memory Module: temperature Critical (mem1), 16 Memory Module: Performance
    Degraded only, temperature and life used not implemented (mem1), 17 Memory Module: Memory Media FRU Error
    with Hardware Replacement Needed and component 'DIMM-B2' (mem0), 18 Memory Module: All Data Lost (mem1),
    19 Memory Module: Memory Capacity Degraded and an unnamed bit (mem0), 20 Memory Module: 78 C Warning (mem0)."""
    return [line for line in ours("cxl/rasdaemon-cxl-rows.sql").splitlines() if line.startswith("INSERT")]


def install(snap: SnapshotBuilder, *, tables: bool = True) -> None:
    for name, (serial, _bdf) in MEMDEVS.items():
        snap.file(f"{DEVICES}/{name}/serial", f"{serial}\n")
        snap.file(f"{DEVICES}/{name}/firmware_version", "FW 2.1.4\n")
        snap.file(f"{DEVICES}/{name}/ram/size", "0x2000000000\n")
    for other in ("root0", "port1", "decoder0.0", "endpoint2", "region0"):
        snap.directory_only(f"{DEVICES}/{other}")
    # where each memN links: under its PCI function (recorded as a snapshot records its resolve() calls)
    links = {
        f"{DEVICES}/{name}": f"/sys/devices/pci0000:34/0000:34:0{i + 1}.0/{bdf}/{name}"
        for i, (name, (_serial, bdf)) in enumerate(MEMDEVS.items())
    }
    (snap.directory / "realpaths.json").write_text(json.dumps(links))
    target = snap.path(RAS_DB)
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(target) as conn:
        conn.executescript(RAS_SCHEMA)
        if tables:
            conn.executescript(ours("cxl/rasdaemon-cxl-schema.sql"))
    conn.close()


def add_rows(snap: SnapshotBuilder, *indexes: int) -> None:
    statements = rows()
    with sqlite3.connect(snap.path(RAS_DB)) as conn:
        for index in indexes:
            conn.execute(statements[index])
    conn.close()
