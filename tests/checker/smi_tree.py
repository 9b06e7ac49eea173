"""Our two-socket Intel sysfs tree (tests/checker/fixtures/sysfs-smi-two-socket.ttar) put into a snapshot:
text files as they are, the MSR device files as the 8 bytes a pread at 0x34 returns (bench.samples)."""

from __future__ import annotations

from bench.samples import SnapshotBuilder
from bench.smi_samples import install_smi_tree
from checker.collectors.smi import MSR_SMI_COUNT


def msr_bytes(value: int) -> bytes:
    return b"\0" * MSR_SMI_COUNT + value.to_bytes(8, "little")


def install(snap: SnapshotBuilder, *, counts: dict[int, int] | None = None, **files: str) -> dict[int, int]:
    return install_smi_tree(snap, counts=counts, **files)
