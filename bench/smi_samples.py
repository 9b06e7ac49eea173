"""Our two-socket Intel sysfs tree (tests/checker/fixtures/sysfs-smi-two-socket.ttar) in a snapshot, for the
smi and error_reporting collectors' tests, the rich snapshot and the bench."""

from __future__ import annotations

import re

from bench.samples import SnapshotBuilder, ours, read_ttar

SMI_TREE = "sysfs-smi-two-socket.ttar"
MSR_SMI_COUNT_OFFSET = 0x34


def install_smi_tree(b: SnapshotBuilder, *, counts: dict[int, int] | None = None, **files: str) -> dict[int, int]:
    """Our two-socket Intel tree (tests/checker/fixtures/sysfs-smi-two-socket.ttar) in a snapshot: text files
    as they are, each /dev/cpu/N/msr as the bytes a pread at 0x34 returns (MSR_SMI_COUNT per CPU from
    `counts`, else the fixture's); `files` replace the files whose path ends with the key ('__' for '/')."""
    text = ours(SMI_TREE)
    written: dict[int, int] = {}
    for path, content in read_ttar(text).items():
        for key, value in files.items():
            if path.endswith(key.replace("__", "/")):
                content = value
        msr = re.fullmatch(r"dev/cpu/(\d+)/msr", path)
        if msr is None:
            b.file("/" + path, content)
            continue
        cpu = int(msr.group(1))
        value = (counts or {}).get(cpu, int(content.strip() or "0", 16))
        target = b.path("/" + path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\0" * MSR_SMI_COUNT_OFFSET + value.to_bytes(8, "little"))
        written[cpu] = value
    for directory in re.findall(r"^Directory: (.+)$", text, flags=re.MULTILINE):
        b.directory_only("/" + directory)
    return written
