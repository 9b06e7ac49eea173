"""Rule packs: validated on load, refused with file and line, never half-applied."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remediator.rules import DEFAULT_PACK, RulePackError, RuleRegistry, cap_limit, load_pack, load_ruleset

GOOD = """\
version: 1
rules:
  - id: nvme-test
    description: test rule
    when: {signal: dimm_ce_rate, op: ">=", value: 5}
    selector: {datacenter: [ams1]}
    plan:
      - action: ticket
        params: {part_type: dimm}
    priority: 4
"""


def write(tmp_path: Path, text: str, name: str = "pack.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_default_pack_loads() -> None:
    pack = load_pack(DEFAULT_PACK)
    ids = {r.id for r in pack.rules}
    assert {"dimm-ce-storm", "dimm-uncorrectable"} <= ids


def test_bad_value_is_reported_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("value: 5", "value: lots"))
    with pytest.raises(RulePackError) as caught:
        load_pack(path)
    message = str(caught.value)
    assert f"{path}:5:" in message
    assert "rules.0.when.value" in message


def test_unknown_key_and_bad_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("    priority: 4", "    priority: 4\n    eval: os.system('x')"))
    with pytest.raises(RulePackError, match=r":11: rules\.0\.eval: Extra inputs"):
        load_pack(path)
    path = write(tmp_path, "version: 1\nrules: [\n", "broken.yaml")
    with pytest.raises(RulePackError, match=r"broken\.yaml:3: not valid YAML"):
        load_pack(path)


def test_ticket_must_end_the_plan_and_ids_are_unique(tmp_path: Path) -> None:
    bad = GOOD.replace("      - action: ticket\n", "      - action: ticket\n      - action: reboot\n")
    with pytest.raises(RulePackError, match="ticket step ends a plan"):
        load_pack(write(tmp_path, bad))
    twice = GOOD + GOOD.split("rules:\n")[1]
    with pytest.raises(RulePackError, match="appears twice"):
        load_pack(write(tmp_path, twice))


def test_failed_reload_keeps_the_active_rules(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    registry = RuleRegistry([path])
    assert registry.get("nvme-test") is not None
    path.write_text(GOOD.replace('op: ">="', 'op: "=~"'))
    assert registry.reload() is False
    assert registry.last_error is not None
    assert "rules.0.when.op" in registry.last_error
    assert registry.get("nvme-test") is not None
    path.write_text(GOOD.replace("nvme-test", "renamed"))
    assert registry.reload() is True
    assert registry.get("renamed") is not None


def test_durations_caps_and_actions(tmp_path: Path) -> None:
    text = GOOD.replace("value: 5}", "value: 5, for: 5m, window: 1h, aggregate: avg}")
    text = text.replace("version: 1\n", "version: 1\nsafety: {caps: {rack: 2, datacenter: '3%'}, spacing: 90s}\n")
    path = write(tmp_path, text)
    pack = load_pack(path)
    (rule,) = pack.rules
    assert (rule.when.for_s, rule.when.window_s, rule.when.aggregate) == (300, 3600, "avg")
    assert pack.safety is not None
    assert pack.safety.spacing_s == 90
    assert cap_limit(pack.safety.caps["datacenter"], 1000) == 30
    assert cap_limit(pack.safety.caps["datacenter"], 10) == 1  # a cap always lets one through
    assert load_ruleset([path]).safety.caps["rack"] == 2


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("action: ticket", "action: rm_rf", "unknown action 'rm_rf'"),
        ("value: 5}", "value: 5, for: soon}", "not a duration"),
        ("value: 5}", "value: 5, aggregate: sum}", "aggregate needs a window"),
        ("version: 1\n", "version: 1\nsafety: {caps: {rack: 'lots'}}\n", "neither a count nor a percentage"),
    ],
)
def test_bad_rule_details_are_refused(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(RulePackError, match=message):
        load_pack(write(tmp_path, GOOD.replace(old, new)))


def test_cli_validate(tmp_path: Path) -> None:
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, GOOD.replace("version: 1", "version: 7"), "bad.yaml")
    ok = subprocess.run([sys.executable, "-m", "api", "rules", "validate", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0
    assert "1 rules ok" in ok.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "api", "rules", "validate", str(good), str(bad)], capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert f"{bad}:1: version" in failed.stderr


def test_cli_doc_prints_a_pack_with_its_sources(tmp_path: Path) -> None:
    why = '    source: "seed 000: swap at 10s of CE/s"\n    wrong_if: "EDAC counts ranks"\n'
    sourced = GOOD.replace("    description:", why + "    description:", 1)
    good = write(tmp_path, sourced, "good.yaml")
    shown = subprocess.run([sys.executable, "-m", "api", "rules", "doc", str(good)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    header, rule = shown.stdout.splitlines()[0], shown.stdout.splitlines()[2]
    assert header.endswith("| source | wrong if |")
    assert rule.endswith("| seed 000: swap at 10s of CE/s | EDAC counts ranks |")
    bad = write(tmp_path, GOOD.replace("version: 1", "version: 7"), "bad.yaml")
    failed = subprocess.run([sys.executable, "-m", "api", "rules", "doc", str(bad)], capture_output=True, text=True)
    assert failed.returncode == 1
    assert f"{bad}:1: version" in failed.stderr


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs, inside a step's params: each anchor lists the one before it `width` times."""
    lines = ["    plan:", "      - action: ticket", "        params:", '          a0: &a0 "lol"']
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"          a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            GOOD.replace("    plan:\n      - action: ticket\n        params: {part_type: dimm}\n", alias_bomb()),
            "expands to more than 100000 YAML nodes",
        ),
        (GOOD + "x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 32 levels"),
        (GOOD.replace("description: test rule", "description: 'a\x00b'"), ":4: a NUL character has no place"),
        (
            GOOD.encode().replace(b"description: test rule", b"description: \xff\xfe"),
            r":4: not UTF-8 text \(byte 0xff\)",
        ),
        ("x" * 1_048_577, "a rule pack is at most 1048576"),
    ],
    ids=["alias-bomb", "deep-nesting", "nul", "not-utf8", "too-large"],
)
def test_hostile_packs_are_refused_with_file_line_and_reason(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    """The outside review's alias bomb exhausted memory when the rule was serialised; a 30 MB pack took
    5 minutes and 5.4 GB. Each is now refused before anything is built, with file:line: reason."""
    path = tmp_path / "hostile.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(RulePackError, match=message) as refused:
        load_pack(path)
    assert str(refused.value).startswith(f"{path}:")
