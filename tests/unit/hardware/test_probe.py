"""The probe of the live device: its capabilities and its host's cost per kernel."""

from __future__ import annotations

import torch

from amp_suite.hardware.backends.cpu import _cpuinfo
from amp_suite.hardware.probe import probe
from amp_suite.records.machine import cpu_caps


def test_a_cpus_probe_carries_the_capability_rule_and_a_timed_host_figure():
    caps = probe(torch.device("cpu"))
    name, flags = _cpuinfo()
    rule = cpu_caps(name, flags)
    assert (caps.type, caps.name, caps.fast_bf16, caps.fast_fp16) == ("cpu", name, rule.fast_bf16, rule.fast_fp16)
    assert caps.host_us_per_kernel is not None and 0 < caps.host_us_per_kernel < 1000
    # cell.run describes its record's machine from this probe: the figure goes with it (records' test_machine)

