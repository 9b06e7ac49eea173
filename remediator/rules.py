"""Rule packs: YAML files validated into small declarative rules.

No text is ever evaluated: a condition is a signal kind, a comparison from a
fixed set, and a number. A broken file is refused with its path, line and
reason, and the pack that was active stays active (RuleRegistry.reload).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(RuleModel):
    signal: str = Field(description="Signal kind, e.g. dimm_ce_rate.")
    op: Literal[">=", ">", "<=", "<", "=="] = ">="
    value: float
    subject_pattern: str | None = Field(None, description="Only signals whose subject contains this text.")

    def matches(self, signal: SignalValue) -> bool:
        if signal.kind != self.signal:
            return False
        if self.subject_pattern and self.subject_pattern not in signal.subject:
            return False
        return _OPS[self.op](signal.value, self.value)


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
    action: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    params: dict[str, Any] = Field(default_factory=dict)


class Rule(RuleModel):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9\-]*$", max_length=128)]
    description: str
    when: Condition
    selector: Selector = Field(default_factory=Selector)
    plan: list[Step] = Field(min_length=1)
    priority: int = Field(3, ge=1, le=5)

    @field_validator("plan")
    @classmethod
    def _ticket_last(cls, plan: list[Step]) -> list[Step]:
        for step in plan[:-1]:
            if step.action == "ticket":
                raise ValueError("a ticket step ends a plan; put it last")
        return plan


class RulePack(RuleModel):
    version: Literal[1]
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


def load_pack(path: Path) -> RulePack:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise RulePackError(f"{path}: cannot read: {error.strerror}") from error
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise RulePackError(f"{where}: not valid YAML: {error.problem}") from error
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


def load_rules(paths: Iterable[Path], *, include_default: bool = True) -> list[Rule]:
    """The default pack then each given file; a later rule with the same id replaces an earlier one."""
    files = ([DEFAULT_PACK] if include_default else []) + _pack_files(paths)
    by_id: dict[str, Rule] = {}
    for file in files:
        for rule in load_pack(file).rules:
            by_id[rule.id] = rule
    return list(by_id.values())


class RuleRegistry:
    """The active rules; a failed reload keeps the previous set."""

    def __init__(self, paths: Iterable[Path] = ()) -> None:
        self._paths = list(paths)
        self._lock = threading.Lock()
        self._rules: list[Rule] = load_rules(self._paths)
        self.last_error: str | None = None

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def reload(self) -> bool:
        try:
            rules = load_rules(self._paths)
        except RulePackError as error:
            self.last_error = str(error)
            return False
        with self._lock:
            self._rules = rules
        self.last_error = None
        return True


def matching_rules(
    rules: Iterable[Rule],
    signals: list[SignalValue],
    *,
    hardware_class: str,
    datacenter: str,
    labels: dict[str, Any],
) -> list[tuple[Rule, SignalValue]]:
    """Each rule that fires, with the signal that fired it, highest priority first."""
    fired: list[tuple[Rule, SignalValue]] = []
    for rule in rules:
        if not rule.selector.selects(hardware_class=hardware_class, datacenter=datacenter, labels=labels):
            continue
        hit = max((s for s in signals if rule.when.matches(s)), key=lambda s: s.value, default=None)
        if hit is not None:
            fired.append((rule, hit))
    fired.sort(key=lambda pair: pair[0].priority)
    return fired


_registry: RuleRegistry | None = None
_registry_lock = threading.Lock()


def get_registry(paths: Iterable[Path] | None = None) -> RuleRegistry:
    """The process's active rules, loaded once (from settings' rules_paths unless given)."""
    global _registry
    with _registry_lock:
        if _registry is None:
            if paths is None:
                from core.settings import get_settings

                paths = get_settings().rules_paths
            _registry = RuleRegistry(paths)
        return _registry


def set_registry(registry: RuleRegistry | None) -> None:
    global _registry
    _registry = registry
