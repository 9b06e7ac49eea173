"""Drivers turn an allowed action into what happens on a host.

`linux` builds argv lists for the real tools (fwupd, kexec, the package managers, ipmitool,
sysfs); `simulated` acts on a virtual host of the simulated fleet and can be told to fail, hang
or leave the host down; `bmc` is the central side's out-of-band power control (ipmitool, or the
simulated fleet's BMCs); `hooks` take hosts out of and back into their workload scheduler.
"""
