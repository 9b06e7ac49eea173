"""Every checker parser behind one text interface, with its sample folders and its contract check.

The fuzz tests and bench/parser_fuzz.py share this table. Parsers that take a file tree or rows
of rasdaemon's database are fed through the text formats those arrive in elsewhere: a Prometheus
ttar archive for sysfs trees, `sqlite3 -line` output for rows. Formats the sample corpus lacks
carry a few seed texts written in the real format here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from checker.parsers.common import INTERNAL_ERROR, Parsed, parse_cpu_list
from checker.parsers.dcgmi_diag import parse_dcgmi_diag
from checker.parsers.dmi import (
    parse_dmi_id,
    parse_dmidecode_firmware,
    parse_dmidecode_memory,
    parse_dmidecode_structures,
)
from checker.parsers.edac import parse_edac_poll_msec, parse_edac_sysfs, parse_edac_util
from checker.parsers.firmware import parse_ethtool_driver, parse_fwupd_devices
from checker.parsers.identity import parse_cmdline, parse_cpuinfo
from checker.parsers.interrupts import parse_affinity_list, parse_interrupts, parse_irq_affinities
from checker.parsers.ipmi import parse_mc_info, parse_sdr, parse_sel_info
from checker.parsers.ipmi_sel import parse_freeipmi_sel, parse_ipmitool_sel, parse_sel
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.kernel_log import parse_journal_json, parse_kmsg, parse_log_lines
from checker.parsers.mce import parse_mcelog, parse_mcelog_client_memory, parse_ras_mc_ctl_errors
from checker.parsers.memory_tiers import parse_memory_tiers
from checker.parsers.mountinfo import parse_mountinfo
from checker.parsers.network import parse_ethtool_stats, parse_lldpctl_json
from checker.parsers.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from checker.parsers.pcie import parse_aer_counters, parse_lspci_vvv, parse_pcie_sysfs
from checker.parsers.rasdaemon import (
    parse_aer_event_rows,
    parse_dimm_total_rows,
    parse_mc_event_rows,
    parse_mce_record_rows,
    parse_memory_failure_rows,
    parse_ras_error_count,
    parse_ras_summary,
)
from checker.parsers.smart import parse_scan_open_json, parse_scan_open_text, parse_smartctl_json
from checker.parsers.smart_text import parse_nvme_smart_log, parse_smartctl_text
from checker.parsers.task_stat import parse_task_stat
from checker.parsers.time_sync import parse_chronyc_tracking, parse_timedatectl_show
from checker.parsers.xid import gpu_lines

TextParser = Callable[[str], Parsed[Any]]
MAX_PROBLEM_CHARS = 420
_LINES = re.compile(r"Lines: ([0-9]{1,6})")
_INTEGER = re.compile(r"-?[0-9]{1,20}")


class Entry(NamedTuple):
    """A parser as the fuzzers call it, the sample folders whose files it reads, and seed texts
    in its real format where the corpus has no sample."""

    parse: TextParser
    folders: tuple[str, ...] = ()
    seeds: tuple[str, ...] = ()


# -- adapters: the text formats file trees and database rows arrive in ---------------------------


def files_from_ttar(text: str) -> dict[str, str]:
    """Files of a ttar archive ('Path: p', 'Lines: n', n lines of content, 'Mode: m'); a content
    whose last line ends in 'EOF' had no trailing newline. Broken records are skipped."""
    files: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        count = _LINES.fullmatch(lines[i + 1])
        if not lines[i].startswith("Path: ") or count is None:
            i += 1
            continue
        body = lines[i + 2 : i + 2 + int(count.group(1))]
        files[lines[i][len("Path: ") :]] = "\n".join(body) + "\n"
        if body and body[-1].endswith("EOF"):
            files[lines[i][len("Path: ") :]] = "\n".join([*body[:-1], body[-1][: -len("EOF")]])
        i += 2 + len(body)
    return files


def rows_from_sqlite_lines(text: str) -> list[dict[str, object]]:
    """Rows as `sqlite3 -line` prints them ('column = value', a blank line between rows), with
    values typed as SQLite returns them: integers, reals, NULL (an empty value) or text."""
    rows: list[dict[str, object]] = [{}]
    for line in text.splitlines():
        key, found, value = line.partition(" = ")
        if not line.strip():
            rows.append({})
        elif found:
            rows[-1][key.strip()] = _sqlite_value(value)
    return [row for row in rows if row]


def _sqlite_value(text: str) -> object:
    if not text:
        return None
    if _INTEGER.fullmatch(text):
        number = int(text)
        return number if -(2**63) <= number < 2**63 else text
    try:
        return float(text) if text.isascii() and any(c.isdigit() for c in text) else text
    except ValueError:
        return text


def _memory_tiers(text: str) -> Parsed[Any]:
    files = files_from_ttar(text)
    names = {path.rstrip("/").rsplit("/", 1)[-1]: content for path, content in files.items()}
    weights = {path: content for path, content in files.items() if "weighted_interleave/" in path}
    return parse_memory_tiers(files, names.get("demotion_enabled"), names.get("numa_balancing"), weights)


def _rows(parser: Callable[[list[dict[str, object]]], Parsed[Any]]) -> TextParser:
    return lambda text: parser(rows_from_sqlite_lines(text))


# -- seeds for formats the sample corpus lacks ---------------------------------------------------

KMSG = (
    "6,1203,4999000,-;EDAC MC0: Giving out device to module skx_edac controller Skylake Socket#0 IMC#0\n"
    " SUBSYSTEM=edac\n"
    "4,1204,5000000,-;EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0"
    " page:0x3a2e offset:0x0 grain:32 syndrome:0x0)\n"
    "3,1205,5000100,c;mce: [Hardware Error]: Machine check events logged\n"
)
JOURNAL = (
    '{"__CURSOR":"s=7c;i=4a1;b=0f;m=12a;t=5f;x=9e","__REALTIME_TIMESTAMP":"1700000000000000",'
    '"_BOOT_ID":"0f3b","PRIORITY":"4","SYSLOG_IDENTIFIER":"kernel","_SOURCE_MONOTONIC_TIMESTAMP":"593024485",'
    '"MESSAGE":"EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0"}\n'
    '{"__CURSOR":"s=7c;i=4a2","__REALTIME_TIMESTAMP":"1700000001000000","PRIORITY":"3",'
    '"MESSAGE":[109,99,101,58,32,91,72,97,114,100,119,97,114,101,32,69,114,114,111,114,93]}\n'
)
SCAN_JSON = (
    '{"json_format_version":[1,0],"smartctl":{"version":[7,3],"exit_status":0},"devices":['
    '{"name":"/dev/sda","info_name":"/dev/sda [SAT]","type":"sat","protocol":"ATA"},'
    '{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_00]","type":"megaraid,0","protocol":"SCSI"},'
    '{"name":"/dev/nvme0","info_name":"/dev/nvme0","type":"nvme","protocol":"NVMe"}]}\n'
)
SCAN_TEXT = (
    "/dev/sda -d sat # /dev/sda [SAT], ATA device\n/dev/bus/0 -d megaraid,0 # /dev/bus/0 [megaraid_disk_00],"
    " SCSI device\n/dev/nvme0 -d nvme # /dev/nvme0, NVMe device\n"
)
CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=UUID=3f1c ro quiet isolcpus=nohz,domain,managed_irq,2-7"
    " nohz_full=2-7 rcu_nocbs=2-7 mce=ignore_ce edac_core.edac_mc_panic_on_ue=1 intel_iommu=on\n"
)
TASK_STAT = (
    "4242 (worker (io) 3) R 1 4242 4242 0 -1 4194560 5120 0 0 0 812 93 0 0 20 0 17 0 12345 1073741824"
    " 25600 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
)
IRQ_TTAR = (
    "Path: proc/irq/24/smp_affinity_list\nLines: 1\n0-3\nMode: 644\n# ttar - - -\n"
    "Path: proc/irq/25/smp_affinity_list\nLines: 1\n2,6-7:1/2\nMode: 644\n"
)
TIERS_TTAR = (
    "Path: sys/devices/system/node/node0/cpulist\nLines: 1\n0-15\nMode: 444\n"
    "Path: sys/devices/system/node/node0/meminfo\nLines: 2\nNode 0 MemTotal:       65536000 kB\n"
    "Node 0 MemFree:        1024000 kB\nMode: 444\n"
    "Path: sys/devices/system/node/node1/cpulist\nLines: 1\nEOF\nMode: 444\n"
    "Path: sys/devices/system/node/node1/meminfo\nLines: 1\nNode 1 MemTotal:      262144000 kB\nMode: 444\n"
    "Path: sys/kernel/mm/numa/demotion_enabled\nLines: 1\ntrue\nMode: 644\n"
    "Path: proc/sys/kernel/numa_balancing\nLines: 1\n2\nMode: 644\n"
    "Path: sys/kernel/mm/mempolicy/weighted_interleave/node0\nLines: 1\n3\nMode: 644\n"
    "Path: sys/kernel/mm/mempolicy/weighted_interleave/node1\nLines: 1\n1\nMode: 644\n"
)
CHRONYC = (
    "A9FEA97B,169.254.169.123,4,1764220680.123456789,-0.000012345,0.000003210,0.000021987,-12.345,-0.001,0.012,"
    "0.000512345,0.000234567,64.4,Normal\n"
)
MOUNTINFO = (
    "22 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/rhel-root rw,attr2,inode64,noquota\n"
    "310 22 8:49 / /media/backup\\040disk rw,nosuid,nodev,relatime shared:160 - ext4 /dev/sdd1 ro,errors=remount-ro\n"
)
ROWS = (
    "id = 17\ntimestamp = 2023-10-27 10:00:00 +0200\nerr_count = 1\nerr_type = Corrected\n"
    "err_msg = memory read error\nlabel = CPU_SrcID#0_MC#0_Chan#1_DIMM#0\nmc = 0\ntop_layer = 1\n"
    "middle_layer = 0\nlower_layer = -1\naddress = -8070450532247928832\n\n"
    "id = 18\ntimestamp = 2023-10-27 10:00:05 +0200\ncpu = 3\nsocketid = 0\nbank = 7\n"
    "bank_name = Memory Controller 0\nstatus = -7998392938210000000\naddr = 4294967296\ncpuvendor = 0\n"
    "error_msg = memory read error\nmcistatus_msg = Corrected_error\nmc_location = CPU_SrcID#0\n\n"
    "id = 19\ntimestamp = 2023-10-27 10:01:00 +0200\ndev_name = 0000:00:1c.0\nerr_type = Corrected\n"
    "err_msg = Receiver Error\npfn = 0x3a2e1\npage_type = dirty LRU page\naction_result = Recovered\n"
)

# the kernel's CXL messages and a firmware-first CXL Protocol Error record (checker/parsers/cxl_log.py)
CXL_LINES = (
    "[86625.641210] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"
    "[87001.512771] cxl_pci 0000:35:00.0: mailbox timeout (opcode: 0x4300), device state  fatal\n"
    "[90001.100001] {3}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1\n"
    "[90001.100004] {3}[Hardware Error]:  Error 0, type: recoverable\n"
    "[90001.100006] {3}[Hardware Error]:   section_type: CXL Protocol Error\n"
    "[90001.100009] {3}[Hardware Error]:    agent_address: 0000:35:00.0\n"
    "[90001.100018] {3}[Hardware Error]:    cxl_ras_uncor_status: 0x00000080\n"
)

# `ethtool -S` (mlx5's names, bnxt_en's per-ring prefix) and `lldpctl -f json` (lldpd 1.0): the corpus has neither
ETHTOOL_S = "NIC statistics:\n     rx_packets: 9184227361\n     rx_crc_errors_phy: 1843\n     [0]: rx_discards: 0\n"
LLDP_JSON = (
    '{"lldp": {"interface": [{"eth0": {"via": "LLDP", "chassis": {"tor1": {"id": {"type": "mac", "value": '
    '"b8:59:9f:3a:10:00"}, "mgmt-ip": ["10.40.7.1", "fe80::1"]}}, "port": {"id": {"type": "ifname", "value": '
    '"Ethernet12"}, "descr": "Servers7", "ttl": "120"}}}]}}\n'
)

# parser name -> how the fuzzers call it, the sample folders whose files it reads, seed texts
TEXT_PARSERS: dict[str, Entry] = {
    "edac_util": Entry(parse_edac_util, ("edac-util",)),
    "edac_poll_msec": Entry(parse_edac_poll_msec, (), ("1000\n",)),
    "edac_sysfs_ttar": Entry(lambda t: parse_edac_sysfs(files_from_ttar(t)), ("edac-sysfs",)),
    "kmsg": Entry(parse_kmsg, (), (KMSG,)),
    "log_lines": Entry(parse_log_lines, ("kernel-log",)),
    "kernel_log_file": Entry(lambda t: parse_kernel_log(t, "file"), ("kernel-log", "edac-sysfs")),
    "kernel_log_kmsg": Entry(lambda t: parse_kernel_log(t, "kmsg"), (), (KMSG,)),
    "kernel_log_dmesg": Entry(lambda t: parse_kernel_log(t, "dmesg"), ("os-faults", "pcie", "gpu")),
    "kernel_log_cxl": Entry(lambda t: parse_kernel_log(t, "dmesg"), (), (CXL_LINES,)),
    "gpu_kernel_lines": Entry(lambda t: gpu_lines(parse_kernel_log(t, "dmesg").value), ("gpu", "kernel-log")),
    "journal_json": Entry(parse_journal_json, (), (JOURNAL,)),
    "kernel_log_journal": Entry(lambda t: parse_kernel_log(t, "journal"), ("kernel-log",), (JOURNAL,)),
    "sel": Entry(parse_sel, ("ipmi-sel",)),
    "ipmitool_sel": Entry(parse_ipmitool_sel, ("ipmi-sel",)),
    "freeipmi_sel": Entry(parse_freeipmi_sel, ("ipmi-sel",)),
    "sel_info": Entry(parse_sel_info, ("ipmi-sel",)),
    "sdr": Entry(parse_sdr, ("ipmi-sdr",)),
    "mc_info": Entry(parse_mc_info, ("ipmi-mc",)),
    "smartctl_json": Entry(parse_smartctl_json, ("smartctl-json",)),
    "scan_open_json": Entry(parse_scan_open_json, (), (SCAN_JSON,)),
    "scan_open_text": Entry(parse_scan_open_text, (), (SCAN_TEXT,)),
    "smartctl_text": Entry(parse_smartctl_text, ("smartctl-text",)),
    "nvme_smart_log": Entry(parse_nvme_smart_log, ("nvme-cli",)),
    "mcelog": Entry(parse_mcelog, ("mcelog",)),
    "mcelog_client_memory": Entry(parse_mcelog_client_memory, ("mcelog",)),
    "ras_errors": Entry(parse_ras_mc_ctl_errors, ("rasdaemon",)),
    "ras_error_count": Entry(parse_ras_error_count, ("rasdaemon",)),
    "ras_summary": Entry(parse_ras_summary, ("rasdaemon",)),
    "mc_event_rows": Entry(_rows(parse_mc_event_rows), (), (ROWS,)),
    "dimm_total_rows": Entry(_rows(parse_dimm_total_rows), (), (ROWS,)),
    "aer_event_rows": Entry(_rows(parse_aer_event_rows), (), (ROWS,)),
    "pcie_sysfs_ttar": Entry(lambda t: parse_pcie_sysfs(files_from_ttar(t)), ("pcie",)),
    "lspci_vvv": Entry(parse_lspci_vvv, ("pcie",)),
    "aer_dev_counters": Entry(parse_aer_counters, (), ("RxErr 3\nBadTLP 0\nBadDLLP 1\nTOTAL_ERR_COR 4\n",)),
    "memory_failure_rows": Entry(_rows(parse_memory_failure_rows), (), (ROWS,)),
    "mce_record_rows": Entry(_rows(parse_mce_record_rows), (), (ROWS,)),
    "cpuinfo": Entry(parse_cpuinfo, ("cpuinfo",)),
    "cmdline": Entry(parse_cmdline, (), (CMDLINE,)),
    "cpu_list": Entry(parse_cpu_list, (), ("0-3,8,10-15:2/4\n",)),
    "dmidecode_structures": Entry(parse_dmidecode_structures, ("dmi",)),
    "dmidecode_memory": Entry(parse_dmidecode_memory, ("dmi",)),
    "dmidecode_firmware": Entry(parse_dmidecode_firmware, ("dmi",)),
    "dmi_id_ttar": Entry(lambda t: parse_dmi_id(files_from_ttar(t)), ("dmi",)),
    "ethtool_driver": Entry(lambda t: parse_ethtool_driver(t, "eth0"), ("firmware",)),
    "fwupd": Entry(parse_fwupd_devices, ("firmware",)),
    "ethtool_stats": Entry(parse_ethtool_stats, (), (ETHTOOL_S,)),
    "lldpctl_json": Entry(parse_lldpctl_json, (), (LLDP_JSON,)),
    "interrupts": Entry(parse_interrupts, ("proc-interrupts",)),
    "affinity_list": Entry(parse_affinity_list, (), ("0-3,8\n",)),
    "irq_affinities_ttar": Entry(lambda t: parse_irq_affinities(files_from_ttar(t)), (), (IRQ_TTAR,)),
    "memory_tiers_ttar": Entry(_memory_tiers, (), (TIERS_TTAR,)),
    "task_stat": Entry(parse_task_stat, (), (TASK_STAT,)),
    "chronyc_tracking": Entry(parse_chronyc_tracking, (), (CHRONYC,)),
    "timedatectl_show": Entry(parse_timedatectl_show, (), ("NTP=yes\nNTPSynchronized=no\n",)),
    "mountinfo": Entry(parse_mountinfo, (), (MOUNTINFO,)),
    "nvidia_smi_xml": Entry(parse_nvidia_smi_xml, ("gpu",)),
    "nvidia_smi_text": Entry(parse_nvidia_smi_text, ("gpu",)),
    "dcgmi_diag": Entry(parse_dcgmi_diag, ("gpu",)),
}


# -- the contract every result keeps -------------------------------------------------------------


def revalidate(value: object) -> None:
    """Raise ValidationError if a model in the result no longer satisfies its own schema
    (parsers fill some fields after construction, which pydantic does not check)."""
    if isinstance(value, BaseModel):
        type(value).model_validate(value.model_dump())
    elif isinstance(value, list | tuple):
        for item in value:
            revalidate(item)
    elif isinstance(value, dict):
        for item in value.values():
            revalidate(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            revalidate(getattr(value, f.name))


def contract_violation(result: object) -> str | None:
    """What is wrong with a parser's answer, or None: it must be a Parsed whose models re-validate
    and whose problems are short strings, none of them an internal parser error."""
    if not isinstance(result, Parsed):
        return f"returned {type(result).__name__}, not Parsed"
    try:
        revalidate(result.value)
    except ValidationError as error:
        return f"invalid model: {error}"
    for p in result.problems:
        if not isinstance(p, str):
            return f"problem is {type(p).__name__}, not str"
        if INTERNAL_ERROR in p:
            return p
        if len(p) > MAX_PROBLEM_CHARS:
            return f"problem of {len(p)} characters: {p[:200]}"
    return None


def run_checked(parser: TextParser, text: str) -> str | None:
    """Call a parser and check its answer; an exception is a violation too (parsers never raise)."""
    try:
        result = parser(text)
    except Exception as error:
        return f"raised {type(error).__name__}: {error}"
    return contract_violation(result)
