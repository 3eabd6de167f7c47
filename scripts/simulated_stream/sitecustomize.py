"""A stand-in for a GPU's stream behind a host that launches slowly, on a CPU, loaded as sitecustomize
by every process of a run (PYTHONPATH=scripts/simulated_stream): while a cell measures, every op the
host issues first costs SIMULATED_LAUNCH_US of host time (the launch), then runs (the kernel: the
CPU's own work stands for the device's). The device is busy while ops run and idle while the host is
launching, as a GPU is behind a slow host, so the GPU-work trace (instruments.diagnostics.gpu_work)
records the ops' intervals, and the cell's bound follows from what the step did: launches of 2 ms
make a small MLP host-bound, none leave a large one's matmuls setting the pace. Used by
tests/e2e/test_host_bound.py and by `scripts/gpu-check.sh --rehearse`.
"""

import os
import sys
import time
from contextlib import contextmanager

from torch.utils._python_dispatch import TorchDispatchMode

import amp_suite.cell.run
from amp_suite.instruments.diagnostics import gpu_work

LAUNCH_S = float(os.environ.get("SIMULATED_LAUNCH_US", "0")) / 1e6
# A launch's sleep hands the GIL to the process's other threads; the op after it waits for it back,
# by default up to 5 ms, which its span (wall time, as CUPTI's is) would count as the device's work.
sys.setswitchinterval(20e-6)


class SlowHostStream(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.spans = None  # the kernels' spans while a trace is on

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if LAUNCH_S:
            time.sleep(LAUNCH_S)  # the host's launch: the device waits
        start = time.perf_counter_ns()
        out = func(*args, **(kwargs or {}))
        if self.spans is not None:
            self.spans.append(gpu_work.DeviceSpan(start, time.perf_counter_ns()))
        return out


STREAM = SlowHostStream()


@contextmanager
def simulated_trace(device):
    found = []
    STREAM.spans = []
    try:
        yield lambda: found
    finally:
        found.extend(STREAM.spans)
        STREAM.spans = None


gpu_work.supported = lambda device: True
gpu_work.trace = simulated_trace
real_measure = amp_suite.cell.run.measure


def measure(spec, device, progress, **options):
    with STREAM:
        return real_measure(spec, device, progress, **options)


amp_suite.cell.run.measure = measure
