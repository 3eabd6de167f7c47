"""The forkserver's last preload (amp_suite.execution.worker): the server exits at once with the suite.

The forkserver holds torch, dynamo and the workloads' libraries, and it inherited the suite's
stdout and stderr. Left to Python's own shutdown it spends about 1.5 s collecting that heap after
the suite has exited, and whatever reads the suite's output (a pipe, `| tee`, a test's
subprocess.run) waits that long for its end of file. The server has nothing to flush or release
(each cell is its own process and stops with the suite), so it leaves through os._exit: registered
last, this runs before anything torch registered at exit.
"""

from __future__ import annotations

import atexit
import os
import sys


def _exit_now() -> None:
    sys.stderr.flush()
    os._exit(0)


# Only in the server (started as `python -c 'from multiprocessing.forkserver import main; ...'`):
# a process that imported this module by mistake must keep its own exit code.
if sys.argv == ["-c"] and "multiprocessing.forkserver" in sys.modules:
    atexit.register(_exit_now)
