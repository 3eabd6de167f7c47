"""MLflow's system metrics on the parent run: CPU, memory, disk and network, and the GPUs through
NVML, as `system/...` series. MLflow samples them in a thread of the CLI's process (every 10 s),
never in a cell's process, so the training loop does not share its interpreter with it."""

from __future__ import annotations

import logging
import threading
from typing import Any

STOP_WAIT_S = 5.0  # MLflow's thread may be inside a request to a store that is down: never wait long


class SystemMetrics:
    def __init__(self, run_id: str, tracking_uri: str) -> None:
        self.monitor: Any = None
        self.unavailable: str | None = None
        try:  # needs psutil (and nvidia-ml-py for the GPUs), which the suite installs
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError as exc:
            self.unavailable = f"MLflow system metrics unavailable: {exc}"
            return
        # Its start/stop chatter and its complaints about a store that is down would interleave with
        # the progress display; the tracker already reports outages once, with what to do.
        logging.getLogger("mlflow.system_metrics").setLevel(logging.ERROR)
        self.monitor = SystemMetricsMonitor(run_id, tracking_uri=tracking_uri)
        self.monitor.start()

    def stop(self) -> None:
        """Stop sampling and flush what was sampled, waiting at most STOP_WAIT_S."""
        if self.monitor is None:
            return
        finishing = threading.Thread(target=self.monitor.finish, name="amp-suite-system-metrics", daemon=True)
        finishing.start()
        finishing.join(STOP_WAIT_S)
        self.monitor = None
