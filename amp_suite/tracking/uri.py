"""Tracking URIs: checked before anything starts, and never printed with their passwords."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from amp_suite.config import ConfigError

# The stores MLflow 3 can write to from here. Its plain file store (a path or file:) is
# deprecated and refuses to start; SQLAlchemy URIs may name a driver ("postgresql+psycopg2").
SERVER_SCHEMES = ("http", "https", "databricks")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
MAX_URI_LENGTH = 2048

_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/\s]*@")


def mask_credentials(text: str) -> str:
    """`scheme://user:secret@host` becomes `scheme://user:***@host`, wherever it appears in text."""
    return _CREDENTIALS.sub(r"\g<scheme>\g<user>:***@", text)


def embedded_store_uri(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"


def is_server(uri: str) -> bool:
    return scheme_of(uri) in ("http", "https")


def scheme_of(uri: str) -> str:
    return urlsplit(uri).scheme.lower().split("+", 1)[0]


def check_tracking_uri(uri: str) -> str:
    """The URI if MLflow can use it; otherwise one ConfigError line (credentials masked)."""
    shown = mask_credentials(uri[:200])
    if len(uri) > MAX_URI_LENGTH or any(ch.isspace() for ch in uri):
        raise ConfigError(f"--tracking-uri {shown}: not a URI")
    scheme = scheme_of(uri)
    if scheme in ("", "file"):
        raise ConfigError(
            f"--tracking-uri {shown}: MLflow 3's file store is deprecated; use sqlite:///path/to/mlflow.db"
        )
    if scheme not in SERVER_SCHEMES + DATABASE_SCHEMES:
        choices = ", ".join(f"{s}://" for s in SERVER_SCHEMES + DATABASE_SCHEMES)
        raise ConfigError(f"--tracking-uri {shown}: unsupported scheme {scheme!r}; use one of {choices}")
    if scheme in ("http", "https") and not urlsplit(uri).hostname:
        raise ConfigError(f"--tracking-uri {shown}: no host")
    if scheme == "sqlite":
        _check_sqlite_file(uri, shown)
    return uri


def _check_sqlite_file(uri: str, shown: str) -> None:
    database = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else ""
    if database in ("", ":memory:"):  # MLflow would take it, and everything logged would vanish
        raise ConfigError(f"--tracking-uri {shown}: name a database file, e.g. sqlite:///path/to/mlflow.db")
    path = Path(database)
    if path.exists() and not path.is_file():
        raise ConfigError(f"--tracking-uri {shown}: {path} is not a file")
    if not path.parent.is_dir():
        raise ConfigError(f"--tracking-uri {shown}: the folder {path.parent} does not exist")
