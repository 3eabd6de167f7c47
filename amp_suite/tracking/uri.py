"""Tracking URIs: checked before anything starts, and never printed with their passwords.

Everything the URI alone can show is refused here, before MLflow or torch loads: a port that is
no number, an unknown scheme, a database driver that is not installed, a SQLite file that can't
be made (or, to read, isn't there).
"""

from __future__ import annotations

import os
import re
import string
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from amp_suite.config import ConfigError
from amp_suite.errors import shorten
from amp_suite.paths import check_path, shown

# The stores MLflow 3 can write to from here. Its plain file store (a path or file:) is
# deprecated and refuses to start; SQLAlchemy URIs may name a driver ("postgresql+psycopg2").
SERVER_SCHEMES = ("http", "https", "databricks")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
MAX_URI_LENGTH = 2048
REACHABLE_TIMEOUT_S = 5.0
ARTIFACTS = "mlartifacts"  # beside a SQLite store's database, as MLflow's own server keeps them
SQLITE_HEADER = b"SQLite format 3\x00"
# The query options SQLAlchemy's SQLite driver takes; it drops any other with a warning, so
# `sqlite:///q?mode=ro/mlflow.db` would silently open ./q.
SQLITE_OPTIONS = ("uri", "timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements")
# The module a driver's import names -> what to pip install for it.
DRIVER_PACKAGES = {
    "psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient", "pymysql": "PyMySQL",
    "mysql": "mysql-connector-python", "pyodbc": "pyodbc", "pymssql": "pymssql", "pg8000": "pg8000",
}  # fmt: skip

# user:password@ (the password may hold '@' or ':') or a token alone (token@), after "://". The
# scheme before it is checked apart (_follows_scheme): matched as a prefix, [A-Za-z][A-Za-z0-9+.-]*
# would be tried from every letter of a long word, and refusing a 100,000-character URI took
# seconds; this way each character is looked at a bounded number of times.
_CREDENTIALS = re.compile(r"://(?:(?P<user>[^/@:\s]*):[^/\s]*|[^/@:\s]+)@")
_SCHEME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "+.-")


def mask_credentials(text: str) -> str:
    """`scheme://user:secret@host` becomes `scheme://user:***@host` and `scheme://token@host`
    becomes `scheme://***@host`, wherever they appear in text."""

    def masked(found: re.Match) -> str:
        if not _follows_scheme(text, found.start()):
            return found[0]
        return "://" + ("***@" if found["user"] is None else f"{found['user']}:***@")

    return _CREDENTIALS.sub(masked, text)


def _follows_scheme(text: str, end: int) -> bool:
    """Whether text[:end] ends with a URI scheme: a letter, then letters, digits, '+', '.' or '-'.
    The characters walked back over are a scheme's, which no other match's can be (no ':' or '/')."""
    index = end - 1
    while index >= 0 and text[index] in _SCHEME_CHARACTERS:
        if text[index] in string.ascii_letters:
            return True
        index -= 1
    return False


def mask_uri(uri: str) -> str:
    """A URI as given, masked as a whole: everything before its last '@' is userinfo, whatever it
    holds (a password with a space or a '/' is no URI, and must not be echoed either)."""
    scheme, sep, rest = uri.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at:
        return mask_credentials(uri)
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{f'{user}:' if colon else ''}***@{host}"


# MLflow 3.x's UI picks its mode per browser, not per experiment: the `workflowType` URL parameter,
# else what the browser last chose (localStorage "mlflow.workflowType_v1"), else GenAI; the
# experiment's mlflow.experimentKind tag is not read while that navigation is on. A link the suite
# prints therefore names the mode; the UI's own links (a run's name in the runs table) drop it.
UI_MODE_QUERY = "workflowType=machine_learning"
# The runs table nests a parent's cells behind a collapsed "+" and charts the first 10 runs only;
# both are per-browser view state. A shared view (an experiment tag MLflow's UI reads when a link
# names its key, cell_view.runs_view) opens it with each comparison's precisions side by side.
UI_VIEW_KEY = "amp-suite"


def ui_link(base: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """A link into MLflow's UI that opens in its model-training mode: the experiments list, an
    experiment's runs (in the suite's shared view), or a run
    ("http://127.0.0.1:5000/#/experiments/1/runs/abc?workflowType=machine_learning")."""
    route, query = "/experiments", UI_MODE_QUERY
    if experiment_id is not None:
        route += f"/{quote(experiment_id, safe='')}/runs"
        route += f"/{quote(run_id, safe='')}" if run_id is not None else ""
        query = query if run_id is not None else f"viewStateShareKey={UI_VIEW_KEY}&{query}"
    return f"{base.rstrip('/')}/#{route}?{query}"


def embedded_store_uri(out_dir: Path) -> str:
    return sqlite_uri((out_dir / "mlflow.db").resolve())


def sqlite_uri(database: Path) -> str:
    """The URI of a SQLite file, any name: SQLAlchemy ends the path at '?' and decodes %XX, so the
    path is percent-escaped; an escaped one names the driver, because MLflow creates the folder
    from the text after `sqlite:///` without decoding it (a stray q%3Fmode%3Dro/ beside q?mode=ro/)."""
    return for_mlflow(f"sqlite:///{quote(os.fsencode(database))}")


def for_mlflow(uri: str) -> str:
    """The spelling to hand MLflow: the same store, with the driver named where the path is escaped."""
    scheme, sep, rest = uri.partition(":///")
    if sep and scheme.lower() == "sqlite" and "%" in rest.partition("?")[0]:
        return f"sqlite+pysqlite:///{rest}"
    return uri


def sqlite_database(uri: str) -> Path | None:
    """The file a SQLite URI names, as SQLAlchemy reads it; None for any other URI."""
    parts = _sqlite_parts(uri)
    if parts is None or parts[0] in ("", ":memory:") or _true(parts[1].get("uri", "")):
        return None
    return Path(parts[0])


def artifact_root(uri: str) -> Path | None:
    """Where a store's artifacts go when nothing else says: beside a SQLite database, never the
    working directory's ./mlruns (MLflow's default). Servers decide for themselves."""
    database = sqlite_database(uri)
    return database.parent / ARTIFACTS if database is not None else None


def check_server_answers(uri: str) -> None:
    """One bounded request to a server's /health: an unreachable server fails in seconds, not
    after MLflow's retries, and (called at the edge) before torch loads. Any HTTP answer, even a
    401, proves the server is there. ConnectionError if none answers; nothing to do for a database."""
    if not is_server(uri):
        return
    parts = urlsplit(uri)
    netloc = parts.netloc.rsplit("@", 1)[-1]  # the health check needs no credentials
    health = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
    try:
        urllib.request.urlopen(health, timeout=REACHABLE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(f"no MLflow server answers there ({reason})") from None


def is_server(uri: str) -> bool:
    return scheme_of(uri) in ("http", "https")


def scheme_of(uri: str) -> str:
    if uri.lower() == "databricks":  # MLflow's name for the workspace its Databricks configuration names
        return "databricks"
    return urlsplit(uri).scheme.lower().split("+", 1)[0]


def check_tracking_uri(uri: str) -> str:
    """The URI if MLflow can use it; otherwise one ConfigError line (credentials masked)."""
    shown_uri = shorten(mask_uri(uri), 200)
    label = f"--tracking-uri {shown_uri}"
    if len(uri) > MAX_URI_LENGTH or any(ch.isspace() for ch in uri):
        raise ConfigError(f"{label}: not a URI")
    try:
        port = urlsplit(uri).port
    except ValueError as exc:  # a port that is no number or past 65535, an unclosed [IPv6
        if "port" not in str(exc).lower():
            raise ConfigError(f"{label}: not a URI ({shorten(str(exc), 80)})") from None
        port = 0
    if port == 0:
        raise ConfigError(f"{label}: the port must be a number from 1 to 65535")
    scheme = scheme_of(uri)
    if scheme in ("", "file"):
        raise ConfigError(f"{label}: MLflow 3's file store is deprecated; use sqlite:///path/to/mlflow.db")
    if scheme not in SERVER_SCHEMES + DATABASE_SCHEMES:
        choices = ", ".join(f"{s}://" for s in SERVER_SCHEMES + DATABASE_SCHEMES)
        raise ConfigError(f"{label}: unsupported scheme {shorten(scheme, 40)!r}; use one of {choices}")
    if scheme in ("http", "https") and not urlsplit(uri).hostname:
        raise ConfigError(f"{label}: no host")
    if scheme == "sqlite":
        _check_sqlite_file(uri, label)
    return uri


def check_tracking_store(uri: str, existing: bool = False) -> str:
    """check_tracking_uri, and what opening the store needs that the URI alone shows: its database
    driver installed and, to read (`existing`), a SQLite file that is there: reading never creates."""
    check_tracking_uri(uri)
    if scheme_of(uri) in DATABASE_SCHEMES:
        _check_driver(uri)
    database = sqlite_database(uri)
    if existing and database is not None and not database.is_file():
        raise ConfigError(
            f"--tracking-uri {shorten(mask_uri(uri), 200)}: no MLflow store at {shown(database)}"
            " (reading needs an existing store; `amp-suite run` and `amp-suite sync` create one)"
        )
    return uri


def _check_driver(uri: str) -> None:
    """SQLAlchemy imports the driver when the store first connects, deep inside MLflow."""
    from sqlalchemy.engine.url import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown_uri = shorten(mask_uri(uri), 200)
    try:
        make_url(uri).get_dialect().import_dbapi()
    except ImportError as exc:
        missing = exc.name or str(exc)
        install = DRIVER_PACKAGES.get(missing.split(".")[0], missing)
        raise ConfigError(
            f"tracking store {shown_uri} is not usable: its database driver {shorten(missing, 60)} is not installed:"
            f" pip install {install}"
        ) from None
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        why = shorten(mask_credentials(str(exc).splitlines()[0]), 120)
        raise ConfigError(f"tracking store {shown_uri} is not usable: SQLAlchemy can't open it ({why})") from None


def _check_sqlite_file(uri: str, label: str) -> None:
    parts = _sqlite_parts(uri)
    if parts is None or parts[0] in ("", ":memory:"):  # MLflow would take it, and everything logged would vanish
        raise ConfigError(f"{label}: name a database file, e.g. sqlite:///path/to/mlflow.db")
    unknown = [shorten(key, 40) for key in parts[1] if key not in SQLITE_OPTIONS]
    if unknown:
        raise ConfigError(
            f"{label}: SQLite takes no option {unknown[:3]} (it would open {shown(parts[0])}); write a '?' in a file"
            " name as %3F"
        )
    path = sqlite_database(uri)
    if path is None:  # uri=true: an SQLite URI filename, which SQLite itself parses
        return
    check_path(path, "--tracking-uri")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{label}: {shown(path)} is not a file")
    if not path.parent.is_dir():
        raise ConfigError(f"{label}: the folder {shown(path.parent)} does not exist")
    if path.is_file() and path.stat().st_size and _header(path) != SQLITE_HEADER:
        raise ConfigError(f"{label}: {shown(path)} is not an SQLite database")


def _sqlite_parts(uri: str) -> tuple[str, dict[str, str]] | None:
    """(path, options) of sqlite:///path?options, split and decoded as SQLAlchemy does it."""
    scheme, sep, rest = uri.partition(":///")
    if not sep or scheme.lower().split("+", 1)[0] != "sqlite":
        return None
    path, _, query = rest.partition("?")
    return unquote(path), dict(parse_qsl(query, keep_blank_values=True))


def _true(value: str) -> bool:
    return value.lower() in ("1", "true", "yes", "on")


def _header(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_HEADER))
    except OSError:
        return b""  # unreadable: MLflow says so, with the reason
