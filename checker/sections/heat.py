"""The heat section of the report: the kernel's thermal-throttle counters per CPU package
(/sys/devices/system/cpu/cpuN/thermal_throttle/), read on one CPU of each package. Filled by
checker/collectors/thermal_throttle.py; the centre turns two reports into a rate.
"""

from __future__ import annotations

from pydantic import Field

from checker.report_types import Model, NonNegativeInt

MAX_PACKAGES = 64


class ThrottlePackage(Model):
    """One package's counters, as the kernel keeps them since boot (every CPU of the package shows the
    package's own counts; the core counts are the read CPU's core)."""

    package: NonNegativeInt = Field(description="physical_package_id.")
    cpu: NonNegativeInt = Field(description="The CPU whose thermal_throttle files were read.")
    package_throttle_count: NonNegativeInt = Field(description="Times the package went above its thermal threshold.")
    package_throttle_total_time_ms: NonNegativeInt | None = Field(
        None, description="Time the package spent throttled since boot (Linux 5.5 on; None: older kernel)."
    )
    core_throttle_count: NonNegativeInt | None = Field(None, description="The read CPU's core: times above threshold.")
    core_throttle_total_time_ms: NonNegativeInt | None = Field(None, description="The read CPU's core: time throttled.")
    package_power_limit_count: NonNegativeInt | None = Field(
        None, description="Power-limit notifications (old kernels only): a CPU at its RAPL limit, not a hot one."
    )


class ThermalThrottle(Model):
    packages: list[ThrottlePackage] = Field(default_factory=list, max_length=MAX_PACKAGES)
