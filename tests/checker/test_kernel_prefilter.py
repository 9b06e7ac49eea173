"""The kernel-log classifier's prefilter (issue 17): faster, and every classification as it was.

kernel_classifications.json is what the classifier gave before the prefilter (checker/parsers/kernel_events.py
as of commit 87c5542, run through `recorded_outputs` below): per sample of the folders the classifier reads
and per source, the lines read, the events truncated, and each event's kind, subject, count, seq, timestamp,
number of lines, lines dropped and a hash of its lines; and the same for three logs made of all those
samples' lines (in turn, round robin, and as syslog lines of two programs). Regenerate it only for a change
of classification meant as one, and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.samples import sample
from checker.parsers.common import Parsed
from checker.parsers.kernel_events import _RULE_BITS, _first_rule, _marks, classify, match_line, parse_kernel_log
from checker.parsers.kernel_log import LogLine
from checker.schemas import MAX_EVENTS, KernelEvent, KernelEventKind, KernelLogState

K = KernelEventKind
RECORDED: dict[str, Any] = json.loads((Path(__file__).parent / "kernel_classifications.json").read_text())
SAMPLES = sorted({key.split(":", 1)[1] for key in RECORDED if not key.startswith("mix:")})
_PREFIX = re.compile(r"^(\[[^\]]*\]|\S+ +\d+ [\d:]+ \S+ kernel:|[\d\-T:.+]+ \S+ kernel:)\s*")  # bench.samples_bodies'
STEPS = (0.000001, 0.000001, 0.4, 2.5)  # printk time between lines: two within a burst, then a gap that ends it
ParseKernelLog = Callable[..., Parsed[KernelLogState]]


def digest(state: KernelLogState) -> list[Any]:
    return [
        state.lines_read,
        state.truncated,
        [
            [
                e.kind.value, e.subject, e.count, e.seq, e.timestamp.isoformat() if e.timestamp else None,
                len(e.lines), e.lines_dropped, hashlib.sha256("\n".join(e.lines).encode()).hexdigest()[:12],
            ]
            for e in state.events
        ],
    ]  # fmt: skip


def mixes(names: list[str]) -> dict[str, tuple[str, str]]:
    """Three logs of every named sample's lines, re-stamped: one sample after another, round robin (a line of
    each in turn: blocks cut by other samples' lines), and as syslog lines where every seventh is another
    program's (ignored, without closing a block)."""
    bodies = [[_PREFIX.sub("", line) for line in sample(name).splitlines() if line.strip()] for name in names]
    in_turn = [line for body in bodies for line in body]
    robin = [body[i] for i in range(max(map(len, bodies))) for body in bodies if i < len(body)]

    def dmesg(lines: list[str]) -> str:
        times = [sum(STEPS[: n % 4 + 1]) + 3 * (n // 4) for n in range(len(lines))]
        return "".join(f"[{t:12.6f}] {line}\n" for t, line in zip(times, lines, strict=True))

    syslog = "".join(
        f"Nov 27 10:{n // 60 % 60:02d}:{n % 60:02d} host {'systemd' if n % 7 == 6 else 'kernel'}: {line}\n"
        for n, line in enumerate(in_turn)
    )
    return {"mix:in-turn": (dmesg(in_turn), "dmesg"), "mix:round-robin": (dmesg(robin), "dmesg"),
            "mix:syslog": (syslog, "file")}  # fmt: skip


def recorded_outputs(parse: ParseKernelLog, names: list[str]) -> dict[str, list[Any]]:
    """What `parse` (the classifier's parse_kernel_log, then or now) gives for every input of the recording."""
    inputs: dict[str, tuple[str, str]] = {}
    for name in names:
        text = sample(name)
        inputs[f"dmesg:{name}"] = (text, "dmesg")
        if text.lstrip().startswith("{"):
            inputs[f"journal:{name}"] = (text, "journal")
    inputs.update(mixes(names))
    return {key: digest(parse(text, source).value) for key, (text, source) in inputs.items()}


def test_every_recorded_classification_is_unchanged() -> None:
    now = recorded_outputs(parse_kernel_log, SAMPLES)
    assert now.keys() == RECORDED.keys()
    changed = [key for key in RECORDED if now[key] != RECORDED[key]]
    assert changed == []
    assert sum(len(value[2]) for value in RECORDED.values()) > 400  # the recording is of something


def test_the_prefilter_never_misses_a_rule() -> None:
    """A line's mark names every rule whose needle it holds: the first rule it tries is match_line's."""
    raw = [line for name in SAMPLES for line in sample(name).splitlines()]
    for message in [*raw, *(_PREFIX.sub("", line) for line in raw)]:
        expected, found = match_line(message), _first_rule(message, _marks([message])[0] & _RULE_BITS)
        assert (None if expected is None else (expected[0], expected[1].span())) == (
            None if found is None else (found[0], found[1].span())
        ), message


def journal(*messages: str) -> str:
    return "".join(
        json.dumps({"MESSAGE": m, "_SOURCE_MONOTONIC_TIMESTAMP": str(1_000_000 + n), "SYSLOG_IDENTIFIER": "kernel"})
        + "\n"
        for n, m in enumerate(messages)
    )


def test_a_journal_message_of_several_lines_is_one_line_of_the_log() -> None:
    """The journal keeps a message's line breaks; the prefilter joins messages with line breaks too, and must
    still put what it finds on the right message."""
    text = journal(
        "usb 1-1: new high-speed USB device\nusb 1-1: New USB device found\nusb 1-1: Product: hub",
        "EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 page:0x1 offset:0x0 grain:8)",
        "intel_rapl_common: Found RAPL domain package\nmlx5_core 0000:3b:00.0 ens1f0np0: Link up",
        "e1000e 0000:00:1f.6 eno1: NIC Link is Down",
    )
    state = parse_kernel_log(text, "journal").value
    assert [(e.kind, e.subject) for e in state.events] == [(K.edac_ce, "DIMM_A1"), (K.nic_link_down, "eno1")]


@pytest.mark.parametrize("hotplug", ["pciehp 0000:00:1c.0:pcie004: Slot(1): Link Down",
                                     "PCIEHP 0000:00:1c.0: Slot(1): LINK DOWN",
                                     "pc\u0131ehp 0000:00:1c.0: Slot(1): Card not present"])  # fmt: skip
def test_a_hot_unplug_line_is_found_in_any_case(hotplug: str) -> None:
    """_HOTPLUG ignores case, as Python's re does: the dotless i (U+0131) matches i. The line goes with the uncorrected
    AER record that follows it."""
    aer = "pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer"
    state = parse_kernel_log(f"[  10.000001] {hotplug}\n[  10.000002] {aer}\n", "dmesg").value
    (event,) = state.events
    assert event.kind is K.pcie_aer_uncorrected
    assert event.lines[0].endswith(hotplug)


def test_only_the_newest_events_are_kept_and_each_is_validated() -> None:
    lines = [f"[{n:6d}.000000] EDAC MC0: 1 CE memory read error on DIMM_{n} (channel:0 slot:0)" for n in range(600)]
    state = parse_kernel_log("\n".join(lines), "dmesg").value
    assert (len(state.events), state.truncated) == (MAX_EVENTS, 100)
    assert [e.subject for e in state.events[:2]] == ["DIMM_100", "DIMM_101"]
    assert all(type(e) is KernelEvent for e in state.events)


def test_lines_of_another_program_are_skipped_inside_a_block() -> None:
    text = (
        "[  5.000000] BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:123]\n"
        "[  5.000001] Modules linked in: xfs\n"
        "[  5.000002] CPU: 3 PID: 123 Comm: kworker/3:1 Not tainted 5.15.0 #1\n"
    )
    lines = [LogLine(message=line.split("] ", 1)[1], monotonic_s=5.0, tag="kernel") for line in text.splitlines()]
    lines.insert(1, LogLine(message="systemd[1]: Started Session 3 of user root.", monotonic_s=5.0, tag="systemd"))
    (event,) = classify(lines)
    assert (event.kind, event.subject, len(event.lines)) == (K.soft_lockup, "CPU 3", 3)
