"""Opening a store (a file lock around a sqlite store's schema), its experiment, and its runs: keys, liveness, reaping."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from inputdp.core import names
from inputdp.core.claims import RELATION_VALUES
from inputdp.core.errors import ConfigError, one_line
from inputdp.core.verdicts import REFUTED, Verdict

from .uri import (
    DEFAULT_EXPERIMENT,
    STALE_AFTER_S,
    UNFINISHED,
    check_tracking_uri,
    default_tracking_uri,
    quiet_mlflow,
    sqlite_path,
)

#: the store schema this code writes and the leaderboard reads (what each version adds: schema.py)
STORE_SCHEMA = 3


def lock_path(uri: str) -> Path | None:
    """The lock file of a sqlite store: beside its database (removed with it, never piling up in the temporary
    folder); in the temporary folder, named by the database's path, only when the database's folder is read-only."""
    path = sqlite_path(uri)
    if path is None:
        return None
    beside = path.with_name(path.name + ".lock")
    if os.access(path.parent, os.W_OK):
        return beside
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"inputdp-store-{digest}.lock"



@contextlib.contextmanager
def _store_lock(uri: str):
    """Hold an exclusive lock for a sqlite store (one lock file per database, see lock_path)."""
    path = lock_path(uri)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (concurrent first use of a new store may then collide)
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)



def client(tracking_uri: str | None = None):
    """An MLflow client of the store (the default store when None)."""
    quiet_mlflow()

    return MlflowClient(tracking_uri=tracking_uri or default_tracking_uri())



def experiment_id(mlflow_client, name: str = DEFAULT_EXPERIMENT, artifact_location: str | None = None) -> str:
    """The experiment's id, made if missing (a concurrent maker's is used), tagged as model training so that the
    MLflow UI opens it on its runs; a sqlite store's artifacts (the leaderboard table) go beside its database. A new
    experiment is tagged with the store schema this code writes; an existing one keeps its own (``bench store
    migrate`` brings an older one up to date, schema.py)."""
    tags = {names.EXPERIMENT_KIND_TAG: names.EXPERIMENT_KIND, names.RUNS_VIEW_TAG: runs_view_state()}
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        for key, value in tags.items():
            if exp.tags.get(key) != value:
                mlflow_client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id
    try:
        return mlflow_client.create_experiment(name, artifact_location=artifact_location,
                                               tags={**tags, names.EXPERIMENT_SCHEMA_TAG: str(STORE_SCHEMA)})
    except Exception:  # noqa: BLE001 - created meanwhile by another process
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


#: the runs table's columns in the experiment's view (MLflow's column keys: ``TYPE.`NAME` ``)
RUNS_VIEW_COLUMNS = (
    ("tags", names.TAG_METHOD), ("tags", names.TAG_DATASET), ("tags", names.TAG_MODEL),
    ("params", names.PARAM_EPSILON), ("tags", names.TAG_PRIVACY_ADJACENCY), ("tags", names.TAG_PRIVACY_GUARANTEE),
    ("metrics", names.METRIC_FINAL_TEST_ACCURACY), ("metrics", names.METRIC_FINAL_EPSILON_SPENT),
    ("metrics", names.METRIC_MEDIAN_EPOCH_TIME), ("metrics", names.METRIC_PEAK_MEMORY), ("tags", names.TAG_SEED),
)


def runs_view_state() -> str:
    """The experiment's runs-table view as MLflow 3's UI reads a shared view: every finished training run (not the
    sweep and study parents, which would fold them), most accurate first, the key metrics as columns. MLflow has no
    server-side default for the table's columns; this view is opened by the link of ``runs_view_url``."""
    return json.dumps({
        "selectedColumns": [f"{kind}.`{key}`" for kind, key in RUNS_VIEW_COLUMNS],
        "searchFilter": f"metrics.{names.METRIC_FINAL_TEST_ACCURACY} >= 0",
        "orderByKey": f"metrics.`{names.METRIC_FINAL_TEST_ACCURACY}`",
        "orderByAsc": False,
    }, sort_keys=True)


def runs_view_url(tracking_uri: str, experiment: str) -> str:
    """Where a user sees the experiment's runs with the key metrics as columns: the link itself for a tracking server;
    for a file store, the command that serves it and the link under its default address."""
    path = f"#/experiments/{experiment}/runs?viewStateShareKey={names.RUNS_VIEW_KEY}"
    if tracking_uri.startswith(("http://", "https://")):
        return f"{tracking_uri.rstrip('/')}/{path}"
    return f"mlflow ui --backend-store-uri {tracking_uri}, then http://127.0.0.1:5000/{path}"



def open_store(tracking_uri: str | None, experiment: str = DEFAULT_EXPERIMENT, *, create: bool = True):
    """(client, experiment id or None) with the store's schema in place. Every user of a store comes through here
    (the CLI, sweeps on any executor, the leaderboard), so a URI MLflow could not use is refused here, in one line,
    before MLflow retries it for minutes; ``create=False`` (reading) also needs the store to exist."""
    uri = check_tracking_uri(tracking_uri or default_tracking_uri(), write=create, what="tracking URI")
    try:
        with _store_lock(uri):
            c = client(uri)
            if create:
                path = sqlite_path(uri)
                folder = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in experiment)
                artifacts = str(path.parent / "mlartifacts" / folder) if path is not None else None
                return c, experiment_id(c, experiment, artifacts)
            exp = c.get_experiment_by_name(experiment)
            return c, (exp.experiment_id if exp is not None else None)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - MLflow, SQLAlchemy and HTTP errors alike: the store is unusable
        raise ConfigError(f"tracking store {uri!r} cannot be used: {one_line(err, 240)}") from None



def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}



def _param_value(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 500 else text[:497] + "..."



def run_name(config) -> str:
    """A training run's name in the UI: method-dataset-epsEPS-sSEED."""
    return f"{config.method}-{config.dataset}-eps{config.privacy.epsilon:g}-s{config.seed}"



def _here() -> dict[str, str]:
    return {names.TAG_PID: str(os.getpid()), names.TAG_HOST: socket.gethostname()}



def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: it exists
        return True
    return True



_LIVE_HERE: set[str] = set()  # owner tokens of the runs this process claims or runs (several threads may run sweeps)



def is_alive(run, now: float | None = None) -> bool:
    """Whether an unfinished run's process still lives: on this host, by its pid; anywhere, by its heartbeat."""
    if run.info.status not in UNFINISHED:
        return False
    tags = run.data.tags
    if tags.get(names.TAG_OWNER) in _LIVE_HERE:
        return True
    here = _here()
    if tags.get(names.TAG_HOST) == here[names.TAG_HOST]:
        pid = tags.get(names.TAG_PID, "")
        if not pid.isdigit() or pid == here[names.TAG_PID] or not _pid_alive(int(pid)):
            return False  # its process is gone, or it is this one's and nothing here renews it any more
    try:
        beat = float(tags.get(names.TAG_HEARTBEAT, ""))
    except ValueError:
        beat = (run.info.start_time or 0) / 1000.0
    return ((now or time.time()) - beat) <= STALE_AFTER_S



def runs_with_key(mlflow_client, exp_id: str, config_key: str) -> list:
    """Every run of the experiment stored under a configuration key."""
    return mlflow_client.search_runs([exp_id], filter_string=f"tags.{names.TAG_CONFIG_KEY} = '{config_key}'",
                                     max_results=1000)


def finished_with_key(mlflow_client, exp_id: str, config_key: str) -> bool:
    """Whether the experiment holds a FINISHED run under the configuration key."""
    return any(r.info.status == "FINISHED" for r in runs_with_key(mlflow_client, exp_id, config_key))


def reap(mlflow_client, exp_id: str, runs: list, keep: str | None = None) -> tuple[list, int]:
    """Mark the unfinished runs whose process is gone FAILED; (the runs still alive, how many were marked)."""
    alive, marked = [], 0
    for r in runs:
        if r.info.status not in UNFINISHED or r.info.run_id == keep:
            continue
        if is_alive(r):
            alive.append(r)
            continue
        try:
            mlflow_client.set_terminated(r.info.run_id, status="FAILED")
            mlflow_client.update_run(r.info.run_id, name=f"{r.info.run_name} [failed]")
        except Exception:
            if _withdrawn(mlflow_client, r.info.run_id):
                continue  # a claim withdrawn (deleted) or ended since the list was read: nothing to mark
            raise
        marked += 1
    return alive, marked



def _withdrawn(mlflow_client, run_id: str) -> bool:
    try:
        info = mlflow_client.get_run(run_id).info
    except Exception:
        return True  # gone altogether
    return info.lifecycle_stage == "deleted" or info.status not in UNFINISHED


def refuted_claims(mlflow_client, exp: str) -> dict:
    """(match key, method, variant) -> the largest bound of a stored audit of that claim, under the claim's own
    relation, whose stored verdict (core/verdicts.py: its fields) is "refuted" (what ``bench run`` prints). It reads the
    current store schema: the caller refuses, or says it skips, an experiment in an older one
    (``schema.check_schema``)."""
    out: dict = {}
    audits = f"tags.{names.TAG_KIND} = '{names.KIND_AUDIT}'"
    for a in mlflow_client.search_runs([exp], filter_string=audits, max_results=50000):
        t, m = a.data.tags, a.data.metrics
        relation = RELATION_VALUES.get(t.get(names.TAG_PRIVACY_RELATION, ""))
        if relation is not None and t.get(names.TAG_AUDIT_DESIGN) != relation.excluded:
            continue  # pairs under another relation: it tests no statement of this claim
        key = (t.get(names.TAG_AUDIT_OF, ""), t.get(names.TAG_METHOD, ""), t.get(names.TAG_VARIANT, ""))
        for threat in names.THREATS:
            verdict = Verdict.from_fields(threat, m, t)
            if verdict is not None and verdict.word == REFUTED:
                out[key] = max(out.get(key, 0.0), verdict.bound)
    return out
