"""MLflow as a harness callback, and the one owner of the store. Methods never import this; the harness only calls
the callback.

Default store: ``sqlite:///mlflow.db`` in the working directory; any tracking URI (an ``http://`` server)
may be given instead. :func:`check_tracking_uri` refuses, in one line, a URI MLflow would fail on deep inside
(an unknown scheme, a folder that does not exist, a file that is not a database, a server that does not answer).

Several processes may share one store. Opening a sqlite store is serialised by a file lock (MLflow builds a new
store's schema on first use, and two processes doing that at once collide), and a configuration is run by one
process at a time through a claim: a RUNNING run whose heartbeat tag is renewed while its process lives
(``MLflowTracker.claim``).

One job per module: ``uri`` (checking a URI), ``store`` (opening a store, its runs' keys and liveness), ``tracker``
(the callback, its claim, parent runs), ``schema`` (the store schema's version and its one migration).
"""

from .schema import STEPS, check_schema, migrate, schema_of
from .store import (
    STORE_SCHEMA,
    client,
    experiment_id,
    finished_with_key,
    is_alive,
    lock_path,
    open_store,
    reap,
    refuted_claims,
    run_name,
    runs_view_url,
    runs_with_key,
)
from .tracker import Claim, MLflowTracker, describe, log_finished_run, log_table, parent_run, span_parent
from .uri import (
                  ALLOWED,
                  CLAIM_PATIENCE_S,
                  DEFAULT_EXPERIMENT,
                  HEARTBEAT_S,
                  SERVER_PROBE_S,
                  STALE_AFTER_S,
                  UNFINISHED,
                  check_sqlite_file,
                  check_tracking_uri,
                  default_tracking_uri,
                  quiet_mlflow,
                  sqlite_path,
)

__all__ = ["STEPS", "STORE_SCHEMA", "check_schema", "migrate", "schema_of",
           "ALLOWED", "CLAIM_PATIENCE_S", "DEFAULT_EXPERIMENT", "HEARTBEAT_S", "SERVER_PROBE_S", "STALE_AFTER_S", "UNFINISHED",
           "Claim", "MLflowTracker", "check_sqlite_file", "check_tracking_uri", "client", "default_tracking_uri",
           "refuted_claims", "runs_view_url", "describe", "experiment_id", "finished_with_key", "log_finished_run",
           "log_table", "is_alive", "lock_path", "open_store",
           "parent_run", "quiet_mlflow", "reap", "run_name", "runs_with_key", "span_parent", "sqlite_path"]
