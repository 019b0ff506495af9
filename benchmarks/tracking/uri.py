"""Checking a tracking URI before MLflow sees it: one line for what MLflow would fail on deep inside."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from inputdp.core.errors import ConfigError

DEFAULT_EXPERIMENT = "inputdp"



UNFINISHED = ("RUNNING", "SCHEDULED")



HEARTBEAT_S = 10.0  # how often a live run renews its heartbeat



STALE_AFTER_S = 90.0  # a RUNNING run whose heartbeat is older than this counts as dead (its process is gone)



CLAIM_PATIENCE_S = 60.0  # how long two processes claiming one configuration at once may back off before one wins



SERVER_PROBE_S = 5.0  # how long to wait for a tracking server to accept a connection



_SQLITE = "sqlite:///"



_SQLITE_MAGIC = b"SQLite format 3\x00"



_PASSED_THROUGH = ("postgresql", "mysql", "mssql", "databricks", "databricks-uc")



ALLOWED = "sqlite:///FILE, http(s)://HOST:PORT, or a postgresql://, mysql:// or mssql:// database URI"



def default_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"



def quiet_mlflow() -> None:
    """Keep MLflow's and alembic's start-up chatter (schema migrations, store set-up) out of the output."""

    for name in ("mlflow", "alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)



def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the working directory unless absolute), else None."""
    if not uri.startswith(_SQLITE):
        return None
    return Path(uri[len(_SQLITE):].split("?", 1)[0]).expanduser().absolute()



def check_sqlite_file(uri: str, *, write: bool, what: str) -> Path:
    """The database file of a sqlite URI, refused in one line if MLflow could not use it."""
    path = sqlite_path(uri)
    if path is None or not uri[len(_SQLITE):] or uri[len(_SQLITE):].startswith(":memory:"):
        raise ConfigError(f"{what} {uri!r} is not allowed: name a database file, sqlite:///FILE (a store in memory "
                          "is gone when the command ends)")
    folder = path.parent
    if not folder.is_dir():
        rest = uri[len(_SQLITE):].split("?", 1)[0]
        absolute = Path("/" + rest)  # what sqlite:///tmp/x.db may have meant: three slashes are relative
        hint = "" if rest.startswith(("/", "~")) else (
            f", or, for the absolute path {absolute}, write sqlite:///{absolute} (four slashes): three slashes name a "
            "path relative to the working directory")
        raise ConfigError(f"{what} {uri!r} is not allowed: the folder {folder} does not exist (create it first{hint})")
    if path.exists():
        if not path.is_file():
            raise ConfigError(f"{what} {uri!r} is not allowed: {path} is not a file")
        try:
            with open(path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as err:
            raise ConfigError(f"{what} {uri!r} cannot be read: {err.strerror or err}") from None
        if head and head != _SQLITE_MAGIC:
            raise ConfigError(f"{what} {uri!r} is not allowed: {path} is not an SQLite database")
        if write:
            _probe_write(lambda: os.open(path, os.O_WRONLY), uri, what)
    elif not write:
        raise ConfigError(f"{what} {uri!r} holds no store yet: {path} does not exist (run `bench run` first)")
    else:  # create and remove a file there: permissions alone miss a read-only disk or /proc (MLflow retries ~100 s)
        _probe_write(lambda: os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), uri, what, remove=path)
    return path



def _probe_write(open_fd, uri: str, what: str, remove: Path | None = None) -> None:
    try:
        fd = open_fd()
    except FileExistsError:  # created meanwhile by another process: it will open it as we would
        return
    except OSError as err:
        raise ConfigError(f"{what} {uri!r} cannot be written: {err.strerror or err}") from None
    os.close(fd)
    if remove is not None:
        os.unlink(remove)



def _probe_server(uri: str, what: str) -> None:
    parsed = urlparse(uri)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{what} {uri!r} is not allowed: its port is not a number from 1 to 65535") from None
    if not parsed.hostname:
        raise ConfigError(f"{what} {uri!r} is not allowed: name the server, http://HOST:PORT")
    try:
        with socket.create_connection((parsed.hostname, port), timeout=SERVER_PROBE_S):
            pass
    except OSError as err:
        reason = f"no answer within {SERVER_PROBE_S:g} s" if isinstance(err, TimeoutError) \
            else (err.strerror or str(err) or type(err).__name__)
        raise ConfigError(f"{what} {uri!r} cannot be reached ({reason}): is the server running? "
                          "(`bench server` starts one)") from None



def check_tracking_uri(uri: str | None, *, write: bool, what: str = "--tracking-uri") -> str:
    """The URI a command will use (the default when None), refused in one line if MLflow could not use it.

    ``write``: the command creates runs (``bench run``, ``bench audit``); a read-only command needs the store to exist.
    """
    if uri is None:
        uri = default_tracking_uri()
        what = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default tracking URI"
    scheme = urlparse(uri).scheme.split("+", 1)[0].lower()
    if uri.startswith(_SQLITE):
        check_sqlite_file(uri, write=write, what=what)
    elif scheme in ("http", "https"):
        _probe_server(uri, what)
    elif scheme not in _PASSED_THROUGH:
        raise ConfigError(f"{what} {uri!r} is not allowed: use {ALLOWED} (MLflow's plain-folder store is retired)")
    return uri
