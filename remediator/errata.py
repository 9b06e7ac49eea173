"""CPU errata that software can work around, and how to tell an affected host from a fixed one.

An erratum names the CPUs it affects by CPUID vendor, family, model and stepping (and, when
a microcode update fixes it, the newest microcode that is still affected). Hosts are matched on
those numbers alone, never on marketing names, as the field learned (docs/signals.md). Which
kernel build fixes it on a hardware class, and which builds were withdrawn, is configuration
(remediator/firmware_baselines.yaml, `kernels`), never a substring of a release name: the first
patched build of the INFN study carried the fix and a cputime bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from checker.schemas import CpuIdentity


@dataclass(frozen=True)
class Erratum:
    id: str  # "AMD-298": the signal's subject
    vendor: str  # CPUID vendor string: GenuineIntel, AuthenticAMD
    family: int
    model: int
    stepping: int | None  # None: every stepping of the model
    max_microcode: int | None  # newest affected microcode revision; None: no microcode fixes it
    affected: str
    remediation: str  # the remediation a rule plans, e.g. "patched_kernel"
    source: str = ""

    def affects(self, cpu: CpuIdentity) -> bool:
        if (cpu.vendor, cpu.family, cpu.model) != (self.vendor, self.family, self.model):
            return False
        if self.stepping is not None and cpu.stepping != self.stepping:
            return False
        # Unknown microcode on a matching stepping counts as affected: better a check than a miss.
        return self.max_microcode is None or cpu.microcode is None or cpu.microcode <= self.max_microcode


AMD_298 = Erratum(
    id="AMD-298",
    vendor="AuthenticAMD",
    family=0x10,
    model=2,
    stepping=2,
    max_microcode=None,  # a hardware defect: the paper notes a microcode update at boot cannot fix it
    affected=(
        "Quad-Core AMD Opteron 83xx/23xx revision B2 (Barcelona, e.g. Opteron 8356): TLB erratum; sporadic "
        "crashes under load. The vendors' BIOS fix disables the TLB and roughly halves throughput."
    ),
    remediation="patched_kernel",  # which build, per hardware class, is configuration (firmware_baselines.yaml)
    source=(
        "D. Fabiani, E. Mazzoni, 'Interventi su kernel e microcode per adeguare il processore AMD 8356 rev. B2 "
        "all'ambiente GRID', INFN/CCR-11/01 (CCR-41/2011/P), INFN Sezione di Pisa, 26 August 2011, Tables 1 and 4: "
        "with the BIOS fix an 8356 (16,2,2) node scored HEP-SPEC06 30.54 (1.660 normalised per core and clock), an "
        "8356 without it 62.23 (3.382) and a 2358SE rev. B3 68.04 (3.562); vanilla 2.6.23.17 with AMD's patch "
        "restored 68.57 (3.727)"
    ),
)

ERRATA: tuple[Erratum, ...] = (AMD_298,)


def matching_errata(
    cpus: Sequence[CpuIdentity], errata: Sequence[Erratum] = ERRATA
) -> list[tuple[Erratum, CpuIdentity]]:
    """Each erratum that affects one of the CPUs, with the first affected CPU."""
    found = []
    for erratum in errata:
        cpu = next((c for c in cpus if erratum.affects(c)), None)
        if cpu is not None:
            found.append((erratum, cpu))
    return found
