"""Kernel log classifier: a table of (kind, needle, regex, subject) rules that turns log lines into KernelEvent.

Throughput: every rule has a literal needle; a line is only matched against a rule's regex when the
needle occurs in it. The needles (and the literals the other per-line checks need) are found by one
str.find pass each over all the messages joined, so a line without any costs no Python code at all,
and a line with one tries only the rules whose needle holds what was found. Issue 17 asked for at
least half the speed of one bare `re` scan of the needles over the same text (bench/checker_cycle.py
--part classify; docs/performance.md has the figures). Multi-line blocks (MCE prints, sb_edac
"HANDLING MCE MEMORY ERROR" dumps, GHES records, call traces, AER records) are kept together, at
most MAX_LINES_PER_EVENT lines each.
"""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate, compress
from operator import add
from typing import Literal

from checker.parsers.common import Parsed, clip, guarded
from checker.parsers.cxl_log import CXL_RULES, cxl_protocol_records
from checker.parsers.event_draft import EventDraft
from checker.parsers.kernel_log import LogLine, parse_journal_json, parse_kmsg, parse_log_lines
from checker.parsers.os_events import JOINED_KINDS, OS_RULES, fold_suppressed, joins, oom_joins, oom_subject
from checker.parsers.xid import GPU_RULES, drop_unconfirmed
from checker.schemas import MAX_EVENTS, MAX_LINES_PER_EVENT, KernelEvent, KernelEventKind, KernelLogState

K = KernelEventKind
Block = Literal["none", "trace", "prefix", "ghes", "mce", "ata", "edac_pre", "clocksource", "nvrm", "oom"]
Subject = Callable[[re.Match[str]], str | None]

BURST_S = 2.0  # continuation lines of one block are printed within this many seconds
LINE_CHARS = 4096  # the schema's Line bound


def _group(name: str, fmt: str = "{}") -> Subject:
    def subject(m: re.Match[str]) -> str | None:
        value = m.group(name)
        return fmt.format(value) if value else None

    return subject


def _edac_label(m: re.Match[str]) -> str | None:
    label = (m.group("label") or "").strip()
    if label in ("", "-") or label.startswith("unknown"):  # ghes_edac: 'unknown label', 'unknown memory'
        return f"MC{m.group('mc')}"
    return label


def _cpu_bank(m: re.Match[str]) -> str | None:
    return f"CPU {m.group('cpu')} Bank {m.group('bank')}"


@dataclass(frozen=True)
class Rule:
    kind: KernelEventKind
    needle: str
    pattern: re.Pattern[str]
    subject: Subject | None = None
    block: Block = "none"
    count_group: str | None = None


def _rule(kind: K, needle: str, regex: str, subject: Subject | None = None, block: Block = "none") -> Rule:
    pattern = re.compile(regex)
    count = "count" if "count" in pattern.groupindex else None
    return Rule(kind, needle, pattern, subject, block, count)


_EDAC_MODERN = (
    r"EDAC (?:\w+ )?MC(?P<mc>\d{1,20}): (?P<count>\d{1,18}) TYPE (?:(?P<what>.*?) )?"
    r"on (?P<label>.+?)(?: \((?P<detail>.*)\))?\s*$"
)
_EDAC_LEGACY = r"EDAC (?:\w+ )?MC(?P<mc>\d{1,20}): TYPE (?:page|row) .*?\"(?P<label>[^\"]*)\""
_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_AER = r"^\s*(?P<prefix>\S+ (?P<dev>" + _BDF + r"): )(?:AER: )?PCIe Bus Error: severity=SEVERITY"
# Linux 6.16 renamed the severities (drivers/pci/pcie/aer.c): "Corrected" became "Correctable" and
# "Uncorrected (Non-Fatal)/(Fatal)" "Uncorrectable (…)"; both wordings are in the field.
_AER_CORRECTED = "(?:Corrected|Correctable)"
# A port's link down as drivers word it: "NIC Link is Down" (e1000e, igb, ixgbe, i40e, ice, bnxt_en),
# "Link down" (mlx5e_update_carrier), "Link Down" (mlx4_en), "Link is down." (tg3). The subject is a whole
# token (never the "Slot(1)" of pciehp's "Slot(1): Link Down", nor "PCIe" of a PCIe link).
_LINK_DOWN = r"(?<![\w.\-@()])(?!PCIe?\b)(?P<iface>[\w.\-@]+?):? (?:NIC )?Link (?:is )?[Dd]own\b"
_AER_UNCORRECTED = "Uncorrect(?:ed|able)"
# From 6.16 the AER prints are rate-limited per device and class (10 per 5 s): when the device's next
# record is allowed, the kernel first prints how many it suppressed ("aer_ratelimit: N callbacks
# suppressed", lib/ratelimit.c). Those errors happened: they are added to the next corrected record's
# count, when it follows within a burst.
_AER_RATELIMIT = re.compile(r"aer_ratelimit: (?P<n>\d{1,18}) callbacks suppressed")
# What follows or precedes an uncorrected record and says what it was (remediator/derive/aer_disposition.py):
# the kernel's recovery outcome, and pciehp's hot-unplug of the slot. Kept on the record as extra lines.
_AER_AFTER = re.compile(r"AER: device recovery (?:successful|failed)|AER: can't recover")
_HOTPLUG = re.compile(r"pciehp.*(?:Link Down|Card not present)", re.IGNORECASE)
AER_KINDS = frozenset({K.pcie_aer_corrected, K.pcie_aer_uncorrected})

_MCE_CPU = (
    r"(?<!\})\[Hardware Error\]: CPU (?P<cpu>\d{1,20}): Machine Check(?: Exception)?: \S+ "
    r"Bank (?P<bank>\d{1,20}): (?P<status>[0-9a-fA-F]+)"
)
_NVME_RESET = (
    r"^\s*(?P<prefix>nvme (?P<dev>nvme\d{1,20}): )(?:controller is down; will reset|Device not ready; aborting reset"
    r"|Removing after probe failure|resetting controller)"
)
_TX_TIMEOUT_NEW = (
    r"^\s*(?P<prefix>(?:\S+ )*?(?P<iface>[^\s:]+): )NETDEV WATCHDOG: CPU: \d{1,20}: transmit queue \d{1,20} timed out"
)
_TX_TIMEOUT_OLD = r"NETDEV WATCHDOG: (?P<iface>\S+) \([^)]*\): transmit queue \d{1,20} timed out"
_THROTTLE = r"CPU(?P<cpu>\d{1,20}): (?:Core|Package) temperature above threshold, cpu clock throttled"
_CPU = _group("cpu", "CPU {}")
# Before Linux 6.8 (arch/x86/kernel/cpu/mce/intel.c): "CMCI storm detected: switching to poll mode", at 15
# CMCIs within a second on a CPU; from 6.8 (mce/threshold.c, per bank): "CPU%d BANK%d CMCI storm detected".
_CMCI_STORM = r"(?:CPU ?(?P<cpu>\d{1,20}):? (?:BANK ?(?P<bank>\d{1,20}) )?)?CMCI storm detected"


def _cpu_maybe_bank(m: re.Match[str]) -> str | None:
    if m.group("cpu") is None:
        return None
    return f"CPU {m.group('cpu')}" + (f" Bank {m.group('bank')}" if m.group("bank") else "")


# Order matters: the first rule whose needle and regex match a line wins.
RULES: tuple[Rule, ...] = (
    _rule(K.mce_hardware_error, "HANDLING MCE MEMORY ERROR",
          r"EDAC (?P<drv>\w+) MC(?P<mc>\d{1,20}): HANDLING MCE MEMORY ERROR", _group("mc", "MC{}"), "edac_pre"),
    _rule(K.edac_ce, "EDAC", _EDAC_MODERN.replace("TYPE", "CE"), _edac_label),
    _rule(K.edac_ue, "EDAC", _EDAC_MODERN.replace("TYPE", "UE"), _edac_label),
    _rule(K.edac_ce, "EDAC", _EDAC_LEGACY.replace("TYPE", "CE"), _edac_label),
    _rule(K.edac_ue, "EDAC", _EDAC_LEGACY.replace("TYPE", "UE"), _edac_label),
    _rule(K.mce_logged, "Machine check events logged", r"Machine check events logged"),
    _rule(K.ghes_error, "[Hardware Error]", r"^\s*\{(?P<n>\d{1,20})\}\[Hardware Error\]: ", None, "ghes"),
    _rule(K.mce_hardware_error, "[Hardware Error]", _MCE_CPU, _cpu_bank, "mce"),
    _rule(K.cmci_storm, "CMCI storm detected", _CMCI_STORM, _cpu_maybe_bank),
    _rule(K.memory_failure, "emory failure", r"[Mm]emory failure: (?P<pfn>0x[0-9a-fA-F]+|\S+?): ", _group("pfn")),
    _rule(K.memory_failure, "hardware memory corruption",
          r"Killing (?P<task>\S+) due to hardware memory corruption(?: fault at (?P<addr>\S+))?", _group("addr")),
    _rule(K.soft_lockup, "soft lockup", r"BUG: soft lockup - CPU#(?P<cpu>\d{1,20}) stuck for", _CPU, "trace"),
    _rule(K.hard_lockup, "hard LOCKUP", r"[Hh]ard LOCKUP on cpu (?P<cpu>\d{1,20})", _CPU, "trace"),
    _rule(K.hung_task, "blocked for more than", r"INFO: task (?P<task>.+:\d+) blocked for more than \d+ seconds",
          _group("task"), "trace"),
    _rule(K.oops, "BUG: unable to handle", r"BUG: unable to handle (?P<what>.+?)(?: at | \(|$)", None, "trace"),
    _rule(K.oops, "Unable to handle kernel", r"Unable to handle kernel (?P<what>.+?) at", None, "trace"),
    _rule(K.oops, "kernel BUG at", r"kernel BUG at (?P<where>\S+?)!?$", _group("where"), "trace"),
    _rule(K.oops, "general protection fault", r"general protection fault", None, "trace"),
    _rule(K.oops, "Oops", r"(?:^|Internal error: )Oops(?: - \w+)?: [0-9a-fx]+ \[#\d{1,20}\]", None, "trace"),
    _rule(K.panic, "Kernel panic - not syncing", r"Kernel panic - not syncing: ?(?P<why>.*?)\s*$",
          _group("why"), "trace"),
    _rule(K.block_io_error, "exception Emask", r"^\s*(?P<prefix>ata\d{1,20}(?:\.\d{1,20})?): exception Emask",
          _group("prefix"), "ata"),
    _rule(K.block_io_error, "error, dev ", r"error, dev (?P<dev>[^\s,]+), sector (?P<sector>\d{1,20})", _group("dev")),
    _rule(K.block_io_error, "Buffer I/O error", r"Buffer I/O error on dev(?:ice)? (?P<dev>[^\s,]+)", _group("dev")),
    _rule(K.block_io_error, "I/O Cmd(", r"(?P<dev>nvme\d+n\d+): I/O Cmd\(0x[0-9a-fA-F]+\) .*I/O Error", _group("dev")),
    _rule(K.nvme_timeout, "QID", r"(?P<dev>nvme\d+): I/O .*?QID \d+ timeout", _group("dev")),
    _rule(K.nvme_reset, "nvme", _NVME_RESET, _group("dev"), "prefix"),
    _rule(K.nic_tx_timeout, "NETDEV WATCHDOG", _TX_TIMEOUT_NEW, _group("iface"), "prefix"),
    _rule(K.nic_tx_timeout, "NETDEV WATCHDOG", _TX_TIMEOUT_OLD, _group("iface"), "trace"),
    _rule(K.nic_link_down, "Link ", _LINK_DOWN, _group("iface")),
    _rule(K.nic_link_up, "Link is Up", r"(?P<iface>[\w.\-@]+?):? (?:NIC )?Link is Up", _group("iface")),
    _rule(K.pcie_aer_corrected, "PCIe Bus Error", _AER.replace("SEVERITY", _AER_CORRECTED), _group("dev"), "prefix"),
    _rule(K.pcie_aer_uncorrected, "PCIe Bus Error", _AER.replace("SEVERITY", _AER_UNCORRECTED), _group("dev"),
          "prefix"),
    _rule(K.thermal_throttle, " above threshold", _THROTTLE, _CPU),
    # "Core/Package power limit notification" is the CPU holding to its power limit (RAPL PL1/PL2), not
    # heat: the corpus's Xeon E5-2430 logs it at ordinary load. It is no thermal_throttle, and no event.
    *(_rule(kind, needle, regex, subject, block) for kind, needle, regex, subject, block in OS_RULES),
    *(_rule(kind, needle, regex, subject, block) for kind, needle, regex, subject, block in GPU_RULES),
    *(_rule(kind, needle, regex, subject, block) for kind, needle, regex, subject, block in CXL_RULES),
)  # fmt: skip

NEEDLES = re.compile("|".join(sorted({re.escape(r.needle) for r in RULES}, key=len, reverse=True)))
"""Every rule's needle in one pattern: a line it does not find is an ordinary line (the benches time it too)."""
_RULE_BITS = (1 << len(RULES)) - 1
_OTHER = 1 << len(RULES)  # a line classify's other checks read: a rate limit's count, an AER outcome, pciehp
# _AER_RATELIMIT's literal, the one both branches of _AER_AFTER start with, and "hp" in every case: what any
# match of _HOTPLUG ("pciehp" ignoring case) holds (no character but h, H, p and P matches h or p ignoring case)
_OTHER_LITERALS = ("callbacks suppressed", "AER: ", "hp", "hP", "Hp", "HP")


def _prefilter() -> tuple[tuple[str, int], ...]:
    """The literals to find, each with the rules it stands for (bit i: RULES[i]): every needle that holds no
    other needle ("Link is Up" holds "Link "), standing for the rules whose needle holds it; a line that
    holds a needle holds one of these. Then the other checks' literals."""
    needles = {rule.needle for rule in RULES}
    kept = sorted(n for n in needles if not any(other != n and other in n for other in needles))
    found = [(n, sum(1 << i for i, rule in enumerate(RULES) if n in rule.needle)) for n in kept]
    return (*found, *((literal, _OTHER) for literal in _OTHER_LITERALS))


PREFILTER = _prefilter()
_TRACE_LINE = re.compile(
    r"^(?:\s|<|\?|Modules linked in|CPU: |Hardware name|IP: |PGD |P[UM4]D |PTE |#PF: |Thread overran"
    r"|RIP|RSP|R[A-Z]{2}:|R\d\d?:|FS: |CS: |CR2"
    r"|DR\d|Call [Tt]race"
    r"|Code: |Stack:|Workqueue|task: |Tainted|irq event stamp|hardirqs|softirqs|PKRU|Kernel Offset|---\[ |-+\[ cut"
    r"|WARNING: |pc : |lr : |sp : |x\d+ ?: |Process |NMI backtrace|Sending NMI|\"echo 0 > |Showing |Mem abort|ESR = )"
)
_MODULE_WRAP = re.compile(r"^[\w\s().,\[\]\-]+$")
_GHES_SUBJECTS = (  # each with the literal its matches hold: a cheap test first
    ("DIMM location: ", re.compile(r"DIMM location: (?P<v>.+?)\s*$")),
    ("fru_text: ", re.compile(r"fru_text: (?P<v>.+?)\s*$")),
    ("physical_address: ", re.compile(r"physical_address: (?P<v>0x[0-9a-fA-F]+)")),
)


@dataclass
class _Open:
    rule: Rule
    match: re.Match[str]
    lines: list[LogLine]
    prefix: str = ""
    in_modules: bool = False
    dropped: int = 0  # continuation lines beyond MAX_LINES_PER_EVENT
    suppressed: int = 0  # AER records the kernel's rate limit did not print just before this one


def match_line(message: str) -> tuple[Rule, re.Match[str]] | None:
    """The first rule of RULES that matches one message, with its match; None for ordinary lines."""
    if NEEDLES.search(message) is None:
        return None
    for rule in RULES:
        if rule.needle in message and (m := rule.pattern.search(message)) is not None:
            return rule, m
    return None


def _first_rule(message: str, bits: int) -> tuple[Rule, re.Match[str]] | None:
    """match_line, trying only the rules in `bits` (in RULES' order): the others' needles are not in the line."""
    while bits:
        low = bits & -bits
        rule = RULES[low.bit_length() - 1]
        if rule.needle in message and (m := rule.pattern.search(message)) is not None:
            return rule, m
        bits ^= low
    return None


def _marks(messages: list[str]) -> list[int]:
    """Per line, the rules (bits of RULES) and other checks (_OTHER) it may need. A line whose mark is 0 holds
    no needle and nothing the other checks look for: one str.find pass per PREFILTER literal over the
    joined messages finds them, at C speed, instead of a regex search per line."""
    joined = "\n".join(messages)  # no literal holds a line break, so none is found across two messages
    # where each message begins in `joined`: the lengths before it, and a line break after each
    starts = [0, *map(add, accumulate(map(len, messages)), range(1, len(messages) + 1))]
    marks = [0] * len(messages)
    for literal, bits in PREFILTER:
        at = joined.find(literal)
        while at >= 0:
            line = bisect_right(starts, at) - 1
            marks[line] |= bits
            at = joined.find(literal, starts[line + 1])  # the line is marked: on from the next one
    return marks


def _burst(last: LogLine, line: LogLine) -> bool:
    if last.monotonic_s is not None and line.monotonic_s is not None:
        return abs(line.monotonic_s - last.monotonic_s) <= BURST_S
    if last.timestamp is not None and line.timestamp is not None:
        return abs((line.timestamp - last.timestamp).total_seconds()) <= BURST_S
    return True


def _accepts(block: _Open, line: LogLine, hit: tuple[Rule, re.Match[str]] | None) -> bool:
    msg = line.message
    mode = block.rule.block
    if not _burst(block.lines[-1], line):
        return False
    if mode == "ghes":
        return msg.lstrip().startswith(block.prefix) and "Hardware error from APEI" not in msg
    if mode == "oom" and (hit is None or hit[0].kind is K.oom_kill):  # one OOM's report (os_events.py)
        return oom_joins(msg, [kept.message for kept in block.lines])
    if hit is not None:
        # An oops prints several oops-shaped lines ("BUG: unable to handle", then "Oops: ...").
        if hit[0].kind is block.rule.kind and block.rule.kind in JOINED_KINDS:
            return joins(mode, block.prefix, msg, len(block.lines))  # checker/parsers/os_events.py
        return mode == "trace" and hit[0].kind is block.rule.kind is K.oops
    if mode == "trace":
        # A terminal-wrapped "Modules linked in:" list continues on lines of bare module names.
        if block.in_modules and ":" not in msg and _MODULE_WRAP.match(msg) is not None:
            return True
        if _TRACE_LINE.match(msg):
            block.in_modules = msg.startswith("Modules linked in")
            return True
        return False
    if mode == "clocksource":
        return joins(mode, block.prefix, msg, len(block.lines))
    if mode == "nvrm":  # the NVIDIA driver's lines after an Xid or a GPU's name (checker/parsers/xid.py)
        return msg.lstrip().startswith("NVRM:")
    if mode == "mce":
        return "[Hardware Error]:" in msg and "{" not in msg[:4]
    if mode in ("prefix", "edac_pre"):
        return msg.lstrip().startswith(block.prefix)
    if mode == "ata":
        port = block.prefix.split(".")[0]
        return msg.lstrip().startswith((port + ":", port + ".")) or msg[:1].isspace()
    return False


def _open(rule: Rule, m: re.Match[str], line: LogLine) -> _Open:
    block = _Open(rule, m, [line])
    if rule.block == "ghes":
        block.prefix = "{" + m.group("n") + "}[Hardware Error]:"
    elif rule.block == "edac_pre":
        block.prefix = f"EDAC {m.group('drv')} MC{m.group('mc')}: "
    elif rule.block in ("prefix", "ata"):
        block.prefix = m.group("prefix")
    return block


def _line(text: str) -> str:
    """A log line cut to the schema's 4,096 characters, ending in a marker that says how much was cut."""
    if len(text) <= LINE_CHARS:
        return text
    kept = LINE_CHARS - 40
    return f"{text[:kept]} …[{len(text) - kept} more chars]"


def _event(rule: Rule, m: re.Match[str], lines: list[LogLine], dropped: int = 0, suppressed: int = 0) -> EventDraft:
    subject = rule.subject(m) if rule.subject is not None else None
    if rule.block == "ghes":
        subject = _ghes_subject(lines)
    elif rule.kind is K.oom_kill:
        subject = oom_subject([line.message for line in lines])  # its memory cgroup, or host
    count = 1 + suppressed
    if rule.count_group is not None and (value := m.group(rule.count_group)) is not None:
        count = int(value)
    first = lines[0]
    return EventDraft(  # positional, in the order of its fields: a storm makes tens of thousands
        rule.kind,
        first.seq,
        first.timestamp,
        clip(subject, 256) if subject else None,
        count,
        [
            text if len(text := line.raw or line.message) <= LINE_CHARS else _line(text)
            for line in lines[:MAX_LINES_PER_EVENT]
        ],
        dropped + max(0, len(lines) - MAX_LINES_PER_EVENT),
    )


def _ghes_subject(lines: list[LogLine]) -> str | None:
    for literal, pattern in _GHES_SUBJECTS:
        for line in lines:
            if literal in line.message and (m := pattern.search(line.message)) is not None:
                return m.group("v")
    return None


def _attach(events: list[EventDraft], line: LogLine) -> None:
    """A recovery outcome or a hot-unplug line onto the uncorrected AER records it concerns."""
    for event in events:
        if event.kind is K.pcie_aer_uncorrected and len(event.lines) < MAX_LINES_PER_EVENT:
            event.lines.append(_line(line.raw or line.message))


def classify(lines: Iterable[LogLine]) -> list[KernelEvent]:
    """Kernel events in log order. Lines from other programs (syslog tag not 'kernel') are ignored."""
    return [draft.event() for draft in _drafts(list(lines))]


def _drafts(lines: list[LogLine]) -> list[EventDraft]:
    """classify's events, not yet validated."""
    events: list[EventDraft] = []
    block: _Open | None = None
    ratelimited: tuple[int, LogLine] | None = None  # the last "aer_ratelimit: N callbacks suppressed"
    handled = 0  # events before this one had their AER recovery outcome logged
    hotplug: LogLine | None = None  # the last pciehp link-down / card-not-present line
    marks = _marks([line.message for line in lines])
    marked = list(compress(range(len(marks)), marks))
    after = 0  # the next line to read
    next_mark = 0  # index into `marked`
    while True:
        if block is None:
            # Outside a block a line that is not marked changes nothing: on to the next marked one.
            while next_mark < len(marked) and marked[next_mark] < after:
                next_mark += 1
            if next_mark == len(marked):
                break
            after = marked[next_mark]
        elif after == len(lines):
            break
        index, after = after, after + 1
        line = lines[index]
        if line.tag is not None and line.tag != "kernel":
            continue
        bits = marks[index]
        # Without _OTHER the line holds none of what the checks below look for (each is False at once).
        other = bits & _OTHER
        if block is not None and block.rule.block == "ghes" and not other and _accepts(block, line, None):
            # A GHES record's line is judged by its prefix alone (_accepts does not look at the rule it
            # matches), and without "callbacks suppressed" nothing else reads that rule: none is tried.
            if len(block.lines) < MAX_LINES_PER_EVENT:
                block.lines.append(line)
            else:
                block.dropped += 1
            continue
        hit = _first_rule(line.message, bits & _RULE_BITS) if bits else None
        limit = (
            _AER_RATELIMIT.search(line.message)
            if other and hit is None and "callbacks suppressed" in line.message
            else None
        )
        if limit is not None:
            ratelimited = (int(limit.group("n")), line)
        if block is not None:
            if _accepts(block, line, hit):
                if block.rule.block == "oom" and hit is None and "memory.oom.group" not in line.message:
                    block.dropped += 1  # an OOM report's task table and stats: counted, not kept
                elif len(block.lines) < MAX_LINES_PER_EVENT:
                    block.lines.append(line)
                else:
                    block.dropped += 1
                continue
            if block.rule.block == "edac_pre" and hit is not None and hit[0].kind in (K.edac_ce, K.edac_ue):
                # sb_edac/skx dump their decoding first; the EDAC CE/UE line that follows is the event.
                events.append(_event(hit[0], hit[1], [*block.lines, line][-MAX_LINES_PER_EVENT:]))
                block = None
                continue
            events.append(_event(block.rule, block.match, block.lines, block.dropped, block.suppressed))
            block = None
        if hit is None:
            if other and (_AER_AFTER.search(line.message) or _HOTPLUG.search(line.message)):
                _attach(events[handled:], line)
                handled = len(events) if "recovery" in line.message else handled
                hotplug = line if _HOTPLUG.search(line.message) else hotplug
            continue
        rule, m = hit
        if rule.block == "none":
            events.append(_event(rule, m, [line]))
        else:
            block = _open(rule, m, line)
            if rule.kind is K.pcie_aer_uncorrected and hotplug is not None and _burst(hotplug, line):
                block.lines.insert(0, hotplug)  # the slot's card went away just before
            if rule.kind in AER_KINDS and ratelimited is not None:
                # Only a corrected record takes the count: the kernel keeps one limit per device for
                # corrected and one for non-fatal errors, and the line does not say whose it is; a
                # storm is corrected errors, while one uncorrected error already drains the host.
                if rule.kind is K.pcie_aer_corrected and _burst(ratelimited[1], line):
                    block.suppressed = ratelimited[0]
                    block.lines.insert(0, ratelimited[1])
                ratelimited = None
    if block is not None:
        events.append(_event(block.rule, block.match, block.lines, block.dropped, block.suppressed))
    # a probe message about anything but a GPU fallen off the bus; ext4's suppressed errors onto their device;
    # a GHES record of a CXL Protocol Error named by its agent (checker/parsers/cxl_log.py)
    return cxl_protocol_records(fold_suppressed(drop_unconfirmed(events)))


Source = Literal["kmsg", "journal", "dmesg", "file"]


def parse_kernel_log(
    text: str,
    source: Source,
    reference: dt.datetime | None = None,
    tz: dt.tzinfo = dt.UTC,
    boot_time: dt.datetime | None = None,
) -> Parsed[KernelLogState]:
    """Text of a kernel log in any supported format -> KernelLogState with classified events.

    source 'kmsg' reads /dev/kmsg records, 'journal' `journalctl -o json` records (or its text
    outputs); every other source reads dmesg/syslog lines.
    boot_time (aware) turns printk times into timestamps when a line has no wall-clock time.
    Only the newest MAX_EVENTS events are kept; `truncated` counts the dropped ones.
    """
    run = guarded(lambda: KernelLogState(source=source))(_parse_kernel_log)
    return run(text, source, reference, tz, boot_time)


def _parse_kernel_log(
    text: str, source: Source, reference: dt.datetime | None, tz: dt.tzinfo, boot_time: dt.datetime | None
) -> Parsed[KernelLogState]:
    if source == "kmsg":
        parsed = parse_kmsg(text, boot_time=boot_time)
    elif source == "journal" and text.lstrip()[:1] == "{":
        parsed = parse_journal_json(text)
    else:
        parsed = parse_log_lines(text, reference=reference, tz=tz, boot_time=boot_time)
    return state_from_lines(parsed.value, source, parsed.problems)


def state_from_lines(lines: list[LogLine], source: Source, problems: list[str] | None = None) -> Parsed[KernelLogState]:
    """Classify already-parsed lines into a KernelLogState, keeping the newest MAX_EVENTS events."""
    drafts = _drafts(lines)
    dropped = max(0, len(drafts) - MAX_EVENTS)
    seqs = [line.seq for line in lines if line.seq is not None]
    state = KernelLogState(
        source=source,
        first_seq=min(seqs) if seqs else None,
        last_seq=max(seqs) if seqs else None,
        lines_read=len(lines),
        events=[draft.event() for draft in drafts[dropped:]],  # only the kept ones are validated
        truncated=dropped,
    )
    return Parsed(state, list(problems or []))
