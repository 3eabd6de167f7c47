"""Where MLflow's own log lines go: into a file, never between the suite's messages.

MLflow installs a stderr handler on its logger when it is imported, and a store that fails
(a server answering errors, a database it can't migrate) logs ERROR lines and whole tracebacks
through it, a hundred lines around the one line the suite prints about the same failure. Its
loggers, and those of the libraries under it, write to the command's log file instead.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

from amp_suite.records.rundir import append_to
from amp_suite.tracking.uri import mask_credentials

STORE_LOGGERS = ("mlflow", "alembic", "sqlalchemy", "urllib3")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Masked(logging.Filter):
    """No credentials in the log file either: `user:secret@` forms, and the tracking URI's own
    user part wherever MLflow repeats it (`profile=token@host`)."""

    def __init__(self, tracking_uri: str | None) -> None:
        super().__init__()
        userinfo = (tracking_uri or "").partition("://")[2].partition("/")[0].rpartition("@")[0]
        self.secret = userinfo or None

    def filter(self, record: logging.LogRecord) -> bool:
        message = mask_credentials(record.getMessage())
        record.msg, record.args = message.replace(self.secret, "***") if self.secret else message, None
        return True


class _LogFile(logging.FileHandler):
    """A FileHandler that appends only to a plain file inside the folder, never through a link."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):
        return io.TextIOWrapper(append_to(Path(self.baseFilename)), encoding="utf-8", errors="backslashreplace")


def route_store_logs(log_file: Path | None, tracking_uri: str | None = None) -> None:
    """Send the store's log records to `log_file` (created), or nowhere when it is None."""
    import mlflow  # noqa: F401  (its import installs the handler replaced here)

    handler: logging.Handler = logging.NullHandler()
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handler = _LogFile(log_file)
            handler.setFormatter(logging.Formatter(FORMAT))
        except OSError:
            pass  # a folder we can't write: the one-line messages still say what failed
    handler.addFilter(_Masked(tracking_uri))
    for name in STORE_LOGGERS:
        logger = logging.getLogger(name)
        for existing in list(logger.handlers):
            logger.removeHandler(existing)
        logger.addHandler(handler)
        logger.propagate = False
