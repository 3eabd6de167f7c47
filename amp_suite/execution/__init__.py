"""The parent side of the process boundary: the runner walks a matrix, executors and the scheduler
place cells on devices, a worker process runs each cell (and is what a crash or a hang takes down),
the fleet does the same on a Ray cluster, and batch search probes sizes in fresh processes.
No torch here: torch loads only in the worker's child (amp_suite.cell)."""
