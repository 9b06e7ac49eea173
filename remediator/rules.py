"""One file on purpose: it is the rule-pack format, whose models and loader change together (the loader
maps each model's errors to the file's lines).

Rule packs: YAML files validated into small declarative rules.

No text is ever evaluated: a condition is a signal kind, a comparison from a
fixed set, and a number. A broken file is refused with its path, line and
reason, and the pack that was active stays active (RuleRegistry.reload).
"""

from __future__ import annotations

import math
import operator
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from cyborg.actions import ActionRefused
from remediator.actions import ACTIONS
from remediator.signals import SignalValue

RULE_PACK_VERSION = 1
DEFAULT_PACK = Path(__file__).with_name("default_rules.yaml")

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}


class RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def _seconds(value: Any) -> Any:
    """Durations are numbers of seconds or text like 90s, 5m, 2h, 7d."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 2h, 7d)")
        return float(match.group(1)) * _UNITS[match.group(2)]
    return value


Duration = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]


class Condition(RuleModel):
    signal: str = Field(description="Signal kind, e.g. dimm_ce_rate.")
    op: Literal[">=", ">", "<=", "<", "=="] = ">="
    value: float
    subject_pattern: str | None = Field(None, description="Only signals whose subject contains this text.")
    below: float | None = Field(None, description="And the value is below this (a band: value <= v < below).")
    detail_matches: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Only signals whose detail[key], as text, contains one of these (e.g. mem_type: [DDR4, DDR5]).",
    )
    for_s: Duration = Field(0, alias="for", description="The condition must hold this long before the rule fires.")
    window_s: Duration = Field(
        0, alias="window", description="Compare an aggregate of the signal over this window, not its latest value."
    )
    aggregate: Literal["max", "min", "avg", "sum", "count"] = "max"

    @model_validator(mode="after")
    def _aggregate_needs_window(self) -> Condition:
        if self.aggregate != "max" and not self.window_s:
            raise ValueError("aggregate needs a window")
        return self

    def matches(self, signal: SignalValue) -> bool:
        """The signal is of this kind and subject (the comparison is made by the evaluator)."""
        if signal.kind != self.signal:
            return False
        if self.subject_pattern and self.subject_pattern not in signal.subject:
            return False
        for key, wanted in self.detail_matches.items():
            text = str(signal.detail.get(key, ""))
            if not any(w in text for w in wanted):
                return False
        return True

    def holds(self, value: float) -> bool:
        if self.below is not None and not value < self.below:
            return False
        return _OPS[self.op](value, self.value)


class Selector(RuleModel):
    hardware_class: list[str] = Field(default_factory=list)
    datacenter: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)

    def selects(self, *, hardware_class: str, datacenter: str, labels: dict[str, Any]) -> bool:
        if self.hardware_class and hardware_class not in self.hardware_class:
            return False
        if self.datacenter and datacenter not in self.datacenter:
            return False
        return all(str(labels.get(key)) == value for key, value in self.labels.items())


class Step(RuleModel):
    action: str
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("action")
    @classmethod
    def _known_action(cls, action: str) -> str:
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r} (known: {', '.join(sorted(ACTIONS))})")
        return action

    @model_validator(mode="after")
    def _ticket_params(self) -> Step:
        in_service = self.params.get("in_service")
        if self.action == "ticket" and in_service is not None and not isinstance(in_service, bool):
            raise ValueError(f"ticket param in_service must be true or false, not {in_service!r}")
        if self.action == "ticket" and "part" in self.params:
            _check_part(self.params["part"])
        if self.action == "power_cycle" and "if_off" in self.params:
            # as cyborg will parse it when the step runs: a typo (`power-on`) fails the pack's load, not the step
            try:
                CYBORG_ACTIONS["power_cycle"].parse({"if_off": self.params["if_off"]})
            except ActionRefused as error:
                raise ValueError(f"power_cycle param if_off: {error}") from None
        return self

    @property
    def leaves_host_in_service(self) -> bool:
        """A ticket for the owners of software, configuration or a class: the host keeps working."""
        return self.action == "ticket" and self.params.get("in_service") is True


_PART_FIELD = re.compile(r"\{([^{}]*)\}")
_PART_NAMES = ("subject", "hostname", "rule")


def _check_part(part: object) -> None:
    """A ticket step's `part` (the part its ticket is keyed by, in place of the subject): text, or a template
    naming {subject}, {hostname}, {rule} or {detail.KEY} (e.g. "{detail.dimm}": one DIMM, one ticket)."""
    if not isinstance(part, str) or not part.strip() or len(part) > 256:
        raise ValueError(f"ticket param part must be non-empty text of at most 256 characters, not {part!r}")
    for name in _PART_FIELD.findall(part):
        if name not in _PART_NAMES and not re.fullmatch(r"detail\.\w+", name):
            raise ValueError(
                f"ticket param part may name {{subject}}, {{hostname}}, {{rule}} or {{detail.KEY}}, not {{{name}}}"
            )


def _ticket_last(plan: list[Step]) -> list[Step]:
    for step in plan[:-1]:
        if step.action == "ticket":
            raise ValueError("a ticket step ends a plan; put it last")
    if plan and plan[-1].leaves_host_in_service and any(step.action == "drain" for step in plan):
        raise ValueError("a plan that drains the host cannot end in a ticket with in_service: true; choose one")
    return plan


Plan = Annotated[list[Step], Field(min_length=1), AfterValidator(_ticket_last)]


class Rung(RuleModel):
    """One step down the escalation ladder: the plan tried when the one before failed."""

    plan: Plan


class Breaker(RuleModel):
    """Pause the rule when it fires on too many hosts too fast: usually a bad check, not bad hardware."""

    max_hosts: int = Field(20, ge=1)
    max_percent: float = Field(5.0, gt=0, le=100)
    min_hosts: int = Field(3, ge=1, description="The percentage limit applies from this many hosts on.")
    window_s: Duration = Field(3600, alias="window")
    scope: Literal["fleet", "datacenter"] = "datacenter"


Wave = Annotated[str | int, Field(description="A count of hosts, or a percentage like '5%', of the class.")]


def _fraction(value: Any) -> Any:
    """A relative change: a number (0.1) or a percentage ("10%")."""
    if isinstance(value, str) and value.strip().endswith("%") and _PERCENT.match(value.strip()[:-1]):
        return float(value.strip()[:-1]) / 100
    return value


class Comparison(RuleModel):
    """A health signal compared between a rollout's upgraded hosts and the class's hosts not yet upgraded,
    over the same window (remediator/rollout_compare.py, docs/rules.md "Rollouts")."""

    signal: str = Field(description="Signal kind, e.g. cputime_exceeds_elapsed, kernel_event_count, benchmark_score.")
    subject_pattern: str | None = Field(None, description="Only signals whose subject contains this text (panic).")
    measure: Literal["share", "median"] = Field(
        "share", description="share: of hosts showing the signal (counts); median: of the hosts' values (scores)."
    )
    at_least: float = Field(1, description="share: a host shows the signal when its highest value reaches this.")
    population: Literal["reporting", "with_signal"] = Field(
        "reporting",
        description="share: which hosts count: every host that reported in the window (the signal is absent when "
        "nothing happened: kernel_event_count), or only those that gave the signal (it says 0 when checked and "
        "clean: cputime_exceeds_elapsed). A median always counts only hosts with a value.",
    )
    worse: Literal["higher", "lower"] = Field(
        "higher", description="Which way is worse on the upgraded side (a share: higher; a benchmark score: lower)."
    )
    min_change: Annotated[float, BeforeValidator(_fraction), Field(ge=0, le=10)] = Field(
        0.1, description="median: the relative difference of the medians that matters (0.1 or '10%')."
    )
    alpha: float = Field(0.01, gt=0, lt=0.5, description="One-sided significance level of the test.")
    min_baseline: int = Field(
        3, ge=1, description="Hosts not yet upgraded that must have reported within the window for any verdict."
    )
    min_hosts: int = Field(1, ge=1, description="share: upgraded hosts that must show the signal before a halt.")
    expect: Literal["no_worse", "better", "expected"] = Field(
        "no_worse",
        description="no_worse: halt on a difference for the worse. better (median only): once the upgraded hosts "
        "have baked, their median must be better than the others' by at least `min_change` (not judged without "
        "`min_baseline` old hosts with a value). expected (median of a benchmark_score only): once baked, their "
        "median must reach the class's expected score (firmware_baselines.yaml, performance.expected) within "
        "`min_change` (not judged for a class without one). Else the rollout halts: the change did not bring "
        "what it is for (a patched kernel that leaves a workaround on).",
    )

    @model_validator(mode="after")
    def _expectation_is_a_median(self) -> Comparison:
        if self.expect != "no_worse" and self.measure != "median":
            raise ValueError(f"expect: {self.expect} compares medians: set measure: median")
        if self.expect == "expected" and self.signal != "benchmark_score":
            raise ValueError("expect: expected judges benchmark_score against the class's expected scores")
        if self.expect == "expected" and self.min_change >= 1:
            raise ValueError("expect: expected takes min_change below 100% (a shortfall of all the score accepts any)")
        return self


def _default_waves() -> list[str | int]:
    return [1, "5%", "25%", "100%"]


class Rollout(RuleModel):
    """A fleet-wide change in waves per hardware class: a canary, then growing shares, each wave
    verified (every host of it succeeded and baked) before the next starts. A failure, a side
    effect on a host of the rollout, or a significant difference in a compared health signal halts
    the class's rollout (remediator.models.Rollout) until an operator resumes it."""

    waves: list[Wave] = Field(
        default_factory=_default_waves,
        min_length=1,
        max_length=10,
        description="Cumulative sizes per hardware class; the last one bounds the rollout.",
    )
    bake_s: Duration = Field(86400, alias="bake", description="After a wave's last success, before the next wave.")
    side_effects: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Rules whose firing on a host still being verified halts the rollout (a panic after a new kernel).",
    )
    compare: list[Comparison] = Field(
        default_factory=list,
        max_length=16,
        description="Health signals compared between upgraded and not-yet-upgraded hosts of the class: a "
        "significant difference halts the rollout and opens one ticket for the change's owners.",
    )

    @field_validator("waves")
    @classmethod
    def _waves_grow(cls, waves: list[str | int]) -> list[str | int]:
        for wave in waves:
            if isinstance(wave, str) and (not wave.strip().endswith("%") or not _PERCENT.match(wave.strip()[:-1])):
                raise ValueError(f"wave {wave!r} is neither a count nor a percentage like '5%'")
            if isinstance(wave, int) and wave < 1:
                raise ValueError(f"wave {wave} must be at least 1 host")
        return waves


class RuleSafety(RuleModel):
    requires_approval: bool = Field(False, description="Wait for a person before running (reimage always does).")
    cooldown_s: Duration = Field(86400, alias="cooldown", description="Not again on the same host within this.")
    settle_s: Duration = Field(1800, alias="settle", description="Healthy this long after the fix before it counts.")
    breaker: Breaker = Field(default_factory=Breaker)
    rollout: Rollout | None = Field(None, description="Go in waves per hardware class (firmware, kernels).")


class Rule(RuleModel):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9\-]*$", max_length=128)]
    description: str
    source: str = Field(
        "",
        max_length=2000,
        description="Where the decision comes from: a design document, a kernel or vendor doc, a peer's default.",
    )
    wrong_if: str = Field(
        "", max_length=2000, description="What would make the decision wrong, for the operator who doubts it."
    )
    when: Condition
    selector: Selector = Field(default_factory=Selector)
    plan: Plan
    escalation: list[Rung] = Field(default_factory=list, description="Tried in order when the plan fails.")
    priority: int = Field(3, ge=1, le=5)
    mode: Literal["active", "shadow"] = Field("active", description="shadow: decide and record, run nothing.")
    safety: RuleSafety = Field(default_factory=RuleSafety)

    @model_validator(mode="after")
    def _one_ticket_part(self) -> Rule:
        """Every ticket step, at every rung, keys its ticket by the same part (its `part`, or the subject when
        it names none): detections are routed by the rule's one part (remediator.repairs.named_part), so
        rungs naming different parts would send a fault's detections to another ticket than its own. No part
        and "{subject}" are the same part (the subject as it is), except for a GPU, whose ticket without a
        part is keyed by its address in one form (remediator.gpu_parts.ticket_part) and with "{subject}" as
        the signal gave it. A rung without a part followed by `part: host` stays refused: detections are
        routed by the first part a rule names, so the first rung's ticket (keyed by the subject) would never
        hear of them (docs/rules.md)."""
        steps = [s for plan in (self.plan, *(r.plan for r in self.escalation)) for s in plan if s.action == "ticket"]
        gpu = self.when.signal.startswith("gpu_") or any(s.params.get("part_type") == "gpu" for s in steps)
        same_as_none = set() if gpu else {"{subject}"}
        parts = list(
            dict.fromkeys(
                "" if "part" not in s.params or str(s.params["part"]) in same_as_none else str(s.params["part"])
                for s in steps
            )
        )
        if len(parts) > 1:
            named = ", ".join(repr(p) if p else "none (the subject)" for p in parts)
            raise ValueError(f"ticket steps name different parts ({named}): name the same part at every rung")
        return self

    def rung(self, index: int) -> list[Step] | None:
        """The plan at this rung of the ladder (0 is the rule's own plan)."""
        if index == 0:
            return list(self.plan)
        if 0 < index <= len(self.escalation):
            return list(self.escalation[index - 1].plan)
        return None

    @property
    def disruptive(self) -> bool:
        return any(ACTIONS[s.action].disruptive for s in self.plan)

    def needs_approval(self, steps: list[Step]) -> bool:
        return self.safety.requires_approval or any(ACTIONS[s.action].destructive for s in steps)


Cap = Annotated[str | int, Field(description="A count of hosts, or a percentage like '2%'.")]
Scope = Literal["rack", "cluster", "datacenter", "fleet"]


def _default_caps() -> dict[Scope, str | int]:
    return {"rack": 1, "cluster": "10%", "datacenter": "2%", "fleet": "1%"}


class PackSafety(RuleModel):
    """Fleet-wide limits on disruptive remediations at once, per scope."""

    caps: dict[Scope, Cap] = Field(default_factory=_default_caps)
    spacing_s: Duration = Field(300, alias="spacing", description="Between disruptive starts in the same rack.")
    flap_max: int = Field(3, ge=1, description="Remediations of one host within flap_window before a person decides.")
    flap_window_s: Duration = Field(7 * 86400, alias="flap_window")

    @field_validator("caps")
    @classmethod
    def _caps_parse(cls, caps: dict[str, str | int]) -> dict[str, str | int]:
        for scope, cap in caps.items():
            if isinstance(cap, str):
                text = cap.strip()
                if not text.endswith("%") or not _PERCENT.match(text[:-1]):
                    raise ValueError(f"cap for {scope}: {cap!r} is neither a count nor a percentage like '2%'")
        return caps


_PERCENT = re.compile(r"^\d+(\.\d+)?$")


def wave_limit(wave: str | int, hosts_in_class: int) -> int:
    """How many hosts of a class a cumulative wave covers (at least one)."""
    if isinstance(wave, int):
        return wave
    return max(1, math.ceil(hosts_in_class * float(wave.strip().rstrip("%")) / 100))


def cap_limit(cap: str | int, hosts_in_scope: int) -> int:
    """How many hosts a cap allows at once in a scope of this size (at least one)."""
    if isinstance(cap, int):
        return cap
    return max(1, int(hosts_in_scope * float(cap.strip().rstrip("%")) / 100))


class RulePack(RuleModel):
    version: Literal[1]
    safety: PackSafety | None = None
    rules: list[Rule]

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: list[Rule]) -> list[Rule]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} appears twice")
            seen.add(rule.id)
        return rules


class RulePackError(Exception):
    """A rule file is broken; the message says which file, which line, and why."""


def _node_line(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


MAX_PACK_BYTES = 1_048_576  # the default pack is ~60 KB
MAX_PACK_NODES = 100_000  # YAML nodes once every alias is expanded (an alias bomb is billions)
MAX_PACK_DEPTH = 32  # nesting of mappings and lists
NUL = b"\x00"


def _line_at(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


def _pack_text(path: Path) -> str:
    """The file as UTF-8 text, refused (file:line: reason) when too large, not UTF-8, or holding a NUL."""
    try:
        size = path.stat().st_size
        if size > MAX_PACK_BYTES:
            raise RulePackError(f"{path}:1: {size} bytes: a rule pack is at most {MAX_PACK_BYTES}")
        raw = path.read_bytes()
    except OSError as error:
        raise RulePackError(f"{path}: cannot read: {error.strerror}") from error
    if len(raw) > MAX_PACK_BYTES:  # it grew since the stat
        raise RulePackError(f"{path}:1: over {MAX_PACK_BYTES} bytes: a rule pack is at most that")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = raw[error.start]
        raise RulePackError(f"{path}:{_line_at(raw, error.start)}: not UTF-8 text (byte 0x{byte:02x})") from None
    if "\x00" in text:
        line = _line_at(raw, raw.index(NUL))
        raise RulePackError(f"{path}:{line}: a NUL character has no place in a rule pack")
    return text


def _check_shape(path: Path, root: yaml.Node | None) -> None:
    """Refuse nesting deeper than MAX_PACK_DEPTH and aliases that expand past MAX_PACK_NODES, before
    anything is built from the document (expanded sizes are counted once per distinct node)."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [part for pair in node.value for part in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    def walk(node: yaml.Node, depth: int) -> int:
        if depth > MAX_PACK_DEPTH:
            raise RulePackError(f"{path}:{node.start_mark.line + 1}: nested deeper than {MAX_PACK_DEPTH} levels")
        key = id(node)
        if key in sizes and depths[key] >= depth:
            return sizes[key]
        depths[key] = depth
        total = 1 + sum(walk(child, depth + 1) for child in children(node))
        if total > MAX_PACK_NODES:
            raise RulePackError(
                f"{path}:{node.start_mark.line + 1}: expands to more than {MAX_PACK_NODES} YAML nodes "
                "(anchors and aliases that multiply): refused"
            )
        sizes[key] = total
        return total

    if root is not None:
        walk(root, 0)


def load_pack(path: Path) -> RulePack:
    text = _pack_text(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_shape(path, root)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise RulePackError(f"{where}: not valid YAML: {error.problem}") from error
    except RecursionError:
        raise RulePackError(f"{path}:1: nested deeper than {MAX_PACK_DEPTH} levels") from None
    if not isinstance(data, dict):
        raise RulePackError(f"{path}:1: a rule pack is a mapping with 'version' and 'rules'")
    try:
        return RulePack.model_validate(data)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            loc = tuple(item["loc"])
            line = _node_line(root, loc)
            dotted = ".".join(str(p) for p in loc)
            problems.append(f"{path}:{line}: {dotted}: {item['msg']}")
        raise RulePackError("\n".join(problems)) from error


def _pack_files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in {".yaml", ".yml"}))
        else:
            files.append(path)
    return files


class RuleSet(BaseModel):
    """The active rules and the fleet-wide safety limits that go with them."""

    model_config = ConfigDict(frozen=True)

    rules: list[Rule]
    safety: PackSafety = Field(default_factory=PackSafety)

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)


def load_ruleset(paths: Iterable[Path], *, include_default: bool = True) -> RuleSet:
    """The default pack then each given file; a later rule with the same id replaces an earlier one,
    and the last pack that sets `safety` sets it for all."""
    files = ([DEFAULT_PACK] if include_default else []) + _pack_files(paths)
    by_id: dict[str, Rule] = {}
    where: dict[str, Path] = {}
    safety = PackSafety()
    for file in files:
        pack = load_pack(file)
        if pack.safety is not None:
            safety = pack.safety
        for rule in pack.rules:
            by_id[rule.id] = rule
            where[rule.id] = file
    problems = [
        f"{where[rule.id]}: rule {rule.id}: rollout side effect {name!r} is no rule of the active packs"
        for rule in by_id.values()
        for name in (rule.safety.rollout.side_effects if rule.safety.rollout else [])
        if name not in by_id
    ]
    if problems:
        raise RulePackError("\n".join(problems))
    return RuleSet(rules=list(by_id.values()), safety=safety)


def load_rules(paths: Iterable[Path], *, include_default: bool = True) -> list[Rule]:
    return load_ruleset(paths, include_default=include_default).rules


class RuleRegistry:
    """The active rules; a failed reload keeps the previous set."""

    def __init__(self, paths: Iterable[Path] = ()) -> None:
        self._paths = list(paths)
        self._lock = threading.Lock()
        self._ruleset = load_ruleset(self._paths)
        self.last_error: str | None = None

    @property
    def ruleset(self) -> RuleSet:
        with self._lock:
            return self._ruleset

    @property
    def rules(self) -> list[Rule]:
        return list(self.ruleset.rules)

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def reload(self) -> bool:
        try:
            ruleset = load_ruleset(self._paths)
        except RulePackError as error:
            self.last_error = str(error)
            return False
        with self._lock:
            self._ruleset = ruleset
        self.last_error = None
        return True
