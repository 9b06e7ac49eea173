"""The DIMM label-map file: which board slot each EDAC location is, per hardware class (docs/tickets.md).

rasdaemon's `dimm_labels` database (what `ras-mc-ctl --register-labels` writes into sysfs) ties a
board's silkscreen names to EDAC coordinates `<mc>.<top>.<mid>[.<low>]`, by dmidecode vendor and
product. This file does the same by hardware class, naming dmidecode's type 17 Locator (and Bank
Locator where Locators repeat across sockets), so a hit names the record whose serial goes on the
ticket. A broken file is refused as `file:line: field: reason`, like the firmware baselines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from remediator.baselines import _line_of

DEFAULT_DIMM_LABELS = Path(__file__).with_name("dimm_labels.yaml")
LayerName = Literal["branch", "channel", "slot", "csrow", "memory"]  # the kernel's edac_layer_name
_COORDINATES = re.compile(r"\d+(?:[.:]\d+){1,3}")


def _norm(text: str | None) -> str:
    return "".join(ch for ch in (text or "").lower() if ch.isalnum())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabeledSlot(_Strict):
    """One slot of a board: its dmidecode names and the EDAC locations that are it."""

    locator: str = Field(min_length=1, max_length=128, description="dmidecode type 17 Locator (the silkscreen).")
    bank_locator: str | None = Field(
        None, max_length=128, description="Its Bank Locator too, needed where Locators repeat (across sockets)."
    )
    edac: tuple[tuple[int, ...], ...] = Field(
        min_length=1,
        description="EDAC coordinates <mc>.<top>[.<mid>[.<low>]] as the kernel numbers them in sysfs (mcN and "
        "dimm_location's positions): one, or several for a DIMM the driver sees as several csrows or ranks.",
    )

    @field_validator("edac", mode="before")
    @classmethod
    def _coordinates(cls, value: object) -> object:
        out: list[tuple[int, ...]] = []
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                raise ValueError(f"{item!r}: quote EDAC coordinates, e.g. '0.2.0' (YAML reads 0.2 as a number)")
            for text in filter(None, re.split(r"[,;\s]+", item)):
                if not _COORDINATES.fullmatch(text):
                    raise ValueError(f"{text!r} is not EDAC coordinates <mc>.<top>[.<mid>[.<low>]]")
                out.append(tuple(int(n) for n in re.split(r"[.:]", text)))
        return out

    @property
    def name(self) -> str:
        return f"{self.locator} ({self.bank_locator})" if self.bank_locator else self.locator


class BoardLabels(_Strict):
    """The label map of one hardware class: where each EDAC location sits on its board."""

    board: str | None = Field(None, max_length=256, description="Whose silkscreen this is, for people.")
    edac_driver: str | None = Field(None, max_length=64, description="The EDAC driver whose numbering it uses.")
    layers: tuple[LayerName, ...] | None = Field(
        None, min_length=1, max_length=3, description="What the numbers after mc are, as dimm_location names them."
    )
    dimms: list[LabeledSlot] = Field(min_length=1, max_length=512)

    def slot_at(self, coordinates: tuple[int, ...]) -> LabeledSlot | None:
        depth = len(self.dimms[0].edac[0])
        if len(coordinates) > depth and not any(coordinates[depth:]):
            coordinates = coordinates[:depth]  # a layer the map does not use, at 0
        return next((slot for slot in self.dimms if coordinates in slot.edac), None)


class DimmLabelMaps(_Strict):
    version: Literal[1]
    classes: dict[str, BoardLabels] = Field(default_factory=dict)


class DimmLabelsError(Exception):
    """The label-map file is broken; the message names the file, the line and the field."""


def _consistency(maps: DimmLabelMaps) -> Iterable[tuple[tuple[int | str, ...], str]]:
    """What pydantic cannot see: one depth per class, layers that fit it, no location or slot twice."""
    for name, board in maps.classes.items():
        depth = len(board.dimms[0].edac[0])
        if board.layers is not None and len(board.layers) != depth - 1:
            yield ("classes", name, "layers"), f"{len(board.layers)} layers, but coordinates have {depth - 1} after mc"
        owner: dict[tuple[int, ...], str] = {}
        slots: set[tuple[str, str]] = set()
        for index, slot in enumerate(board.dimms):
            key = (_norm(slot.locator), _norm(slot.bank_locator))
            if key in slots:
                yield ("classes", name, "dimms", index, "locator"), f"{slot.name} is listed twice"
            slots.add(key)
            for coordinates in slot.edac:
                dotted = ".".join(map(str, coordinates))
                if len(coordinates) != depth:
                    yield ("classes", name, "dimms", index, "edac"), f"{dotted}: every slot needs {depth} numbers"
                elif coordinates in owner:
                    yield ("classes", name, "dimms", index, "edac"), f"{dotted} is already {owner[coordinates]}"
                owner.setdefault(coordinates, slot.name)


def parse_label_maps(text: str, source: str = "<dimm labels>") -> DimmLabelMaps:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        raise DimmLabelsError(f"{source}:{mark.line + 1 if mark else 1}: not valid YAML: {error.problem}") from error
    try:
        maps = DimmLabelMaps.model_validate(data)
    except ValidationError as error:
        problems = [
            f"{source}:{_line_of(root, tuple(item['loc']))}: {'.'.join(map(str, item['loc']))}: {item['msg']}"
            for item in error.errors()
        ]
        raise DimmLabelsError("\n".join(problems)) from error
    problems = [f"{source}:{_line_of(root, loc)}: {'.'.join(map(str, loc))}: {why}" for loc, why in _consistency(maps)]
    if problems:
        raise DimmLabelsError("\n".join(problems))
    return maps


def load_label_maps(path: Path = DEFAULT_DIMM_LABELS) -> DimmLabelMaps:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise DimmLabelsError(f"{path}: cannot read: {error.strerror}") from error
    return parse_label_maps(text, str(path))
