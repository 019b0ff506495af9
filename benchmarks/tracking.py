"""MLflow as a harness callback. Methods never import this; the harness only calls the callback.

Default store: ``sqlite:///mlflow.db`` in the working directory; any tracking URI (an ``http://`` server)
may be given instead. :func:`check_tracking_uri` refuses, in one line, a URI MLflow would fail on deep inside
(an unknown scheme, a folder that does not exist, a file that is not a database, a server that does not answer).

Several processes may share one store. Opening a sqlite store is serialised by a file lock (MLflow builds a new
store's schema on first use, and two processes doing that at once collide), and a configuration is run by one
process at a time through a claim: a RUNNING run whose heartbeat tag is renewed while its process lives (see
:func:`claim`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import random
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from inputdp.core import names
from inputdp.core.errors import ConfigError, one_line, shield

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


# --- checking a URI before MLflow sees it ----------------------------------------------------------------------

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


# --- opening a store -----------------------------------------------------------------------------------------------

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
    MLflow UI opens it on its runs; a sqlite store's artifacts (the leaderboard table) go beside its database."""
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        if exp.tags.get(names.EXPERIMENT_KIND_TAG) is None:
            mlflow_client.set_experiment_tag(exp.experiment_id, names.EXPERIMENT_KIND_TAG, names.EXPERIMENT_KIND)
        return exp.experiment_id
    try:
        return mlflow_client.create_experiment(name, artifact_location=artifact_location,
                                               tags={names.EXPERIMENT_KIND_TAG: names.EXPERIMENT_KIND})
    except Exception:  # noqa: BLE001 - created meanwhile by another process
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


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


# --- runs: one process per configuration ---------------------------------------------------------------------------

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


@dataclass
class Claim:
    status: str  # "claimed" (this process runs it), "finished" (a FINISHED run exists), "elsewhere" (a live run)
    marked_failed: int = 0
    holder: str = ""  # for "elsewhere": which process runs it
    metrics: dict = field(default_factory=dict)  # for "finished": the FINISHED run's metrics


class MLflowTracker:
    """A :class:`~inputdp.benchmarks.harness.RunCallback` that writes one MLflow run per training run."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 extra_tags: dict[str, str] | None = None):
        self.tracking_uri = tracking_uri or default_tracking_uri()
        self.client, self.experiment_id = open_store(self.tracking_uri, experiment)
        self.extra_tags = dict(extra_tags or {})
        self.run_id: str | None = None
        self.token = uuid.uuid4().hex  # names this tracker's runs as alive to other threads of this process
        self.started = False
        self._stop_beating: threading.Event | None = None
        self._beater: threading.Thread | None = None

    # -- the claim ------------------------------------------------------------------------------------------------
    def claim(self, config_key: str, run_name: str) -> Claim:
        """Make this process the one that runs ``config_key``, unless it is FINISHED or alive elsewhere.

        Create a ``pending`` RUNNING run, then look: if no other live run of the key exists, the claim is ``held``.
        If another one exists, withdraw (delete) ours; a held one means the configuration runs elsewhere; a pending
        one means two claims met, and each backs off a random while and tries again. Two processes cannot both
        hold: whichever looked second saw the other's run, created before the first one looked.
        """
        marked = 0
        deadline = time.monotonic() + CLAIM_PATIENCE_S
        while True:
            runs = runs_with_key(self.client, self.experiment_id, config_key)
            done = [r for r in runs if r.info.status == "FINISHED"]
            if done:
                return Claim("finished", marked, metrics=dict(done[0].data.metrics))
            alive, n = reap(self.client, self.experiment_id, runs)
            marked += n
            held = [r for r in alive if r.data.tags.get(names.TAG_CLAIM, "held") == "held"]
            if held:
                return Claim("elsewhere", marked, _holder(held[0]))
            _LIVE_HERE.add(self.token)  # before the run exists: another thread here must never take it for dead
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={
                names.TAG_CONFIG_KEY: config_key, names.TAG_CLAIM: "pending", **self._who()})
            mine = run.info.run_id
            runs = runs_with_key(self.client, self.experiment_id, config_key)
            finished = any(r.info.status == "FINISHED" for r in runs)
            others = [r for r in runs if r.info.run_id != mine and is_alive(r)]
            if not finished and not others:
                self.client.set_tag(mine, names.TAG_CLAIM, "held")
                self.run_id = mine
                self._beat()
                return Claim("claimed", marked)
            self._withdraw(mine)
            _LIVE_HERE.discard(self.token)
            if finished:
                return Claim("finished", marked)
            held = [r for r in others if r.data.tags.get(names.TAG_CLAIM, "held") == "held"]
            if held or time.monotonic() > deadline:
                return Claim("elsewhere", marked, _holder((held or others)[0]))
            time.sleep(random.uniform(0.05, 1.0))

    def _who(self) -> dict[str, str]:
        return {**_here(), names.TAG_OWNER: self.token, names.TAG_HEARTBEAT: f"{time.time():.3f}"}

    @shield
    def release(self) -> None:
        """After the harness: a claim it never started (it failed before training) is withdrawn, not left RUNNING."""
        if self.run_id is not None and not self.started:
            self._stop()
            self._withdraw(self.run_id)
            self.run_id = None

    def _withdraw(self, run_id: str) -> None:
        """A claim given up: ended (KILLED) and then deleted, so that no deleted run is left RUNNING in the store."""
        self.client.set_terminated(run_id, "KILLED")
        self.client.delete_run(run_id)

    def _beat(self) -> None:
        if self._stop_beating is not None:
            return
        stop = self._stop_beating = threading.Event()
        run_id, c = self.run_id, self.client
        _LIVE_HERE.add(self.token)

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                try:
                    c.set_tag(run_id, names.TAG_HEARTBEAT, f"{time.time():.3f}")
                except Exception:  # noqa: BLE001 - a store hiccup: the next beat tries again
                    pass

        self._beater = threading.Thread(target=beat, name="inputdp-heartbeat", daemon=True)
        self._beater.start()

    def _stop(self) -> None:
        if self._stop_beating is not None:
            self._stop_beating.set()
            self._stop_beating = None
        if self._beater is not None:  # a beat in flight must not land after the bookkeeping tags are gone
            self._beater.join(timeout=5.0)
            self._beater = None
        _LIVE_HERE.discard(self.token)

    # -- the callback ---------------------------------------------------------------------------------------------
    @shield
    def on_start(self, config, params: dict[str, Any], tags: dict[str, str]) -> None:
        all_tags = {**tags, **self.extra_tags, **self._who()}
        if self.run_id is None:
            _LIVE_HERE.add(self.token)
            run = self.client.create_run(self.experiment_id, run_name=self._name(config), tags=all_tags)
            self.run_id = run.info.run_id
            extra = []
        else:  # a claimed run: its tags so far say who holds it
            extra = [RunTag(k, str(v)) for k, v in all_tags.items()]
        self.started = True
        self._beat()
        self.client.log_batch(self.run_id, params=[Param(k, _param_value(v)) for k, v in params.items()],
                              tags=[*extra, RunTag(names.TAG_STATUS_NOTE, "started")])
        self._log_dataset(config, params)
        # the whole resolved configuration (params are cut at 500 characters and flat), as the run's artifact
        self.client.log_dict(self.run_id, {"configuration": config.to_dict(), "params": params},
                             names.RESOLVED_CONFIG_ARTIFACT)

    def _log_dataset(self, config, params: dict[str, Any]) -> None:
        """The run's data set as an MLflow input (the UI's Dataset column): its name and content digest, where it
        was read from, and how many examples each split held; never the data."""

        if not config.data_fingerprint:
            return
        source = json.dumps({"dataset": config.dataset, "data_dir": str(config.data_dir or "")})
        profile = json.dumps({"train_examples": params.get(names.PARAM_TRAIN_SIZE),
                              "test_examples": params.get(names.PARAM_TEST_SIZE)})
        dataset = Dataset(name=config.dataset, digest=config.data_fingerprint, source_type="local", source=source,
                          profile=profile)
        inputs = [DatasetInput(dataset, [InputTag("mlflow.data.context", "training")])]
        for attempt in range(3):
            try:
                self.client.log_inputs(self.run_id, inputs)
                return
            except Exception:  # noqa: BLE001 - two runs adding one data set at once race in MLflow's insert
                if attempt == 2:  # (UNIQUE constraint on the datasets table): the next attempt finds it and links it
                    raise
                time.sleep(random.uniform(0.1, 0.5))

    @shield
    def on_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        self._log(metrics, step=epoch)

    @shield
    def on_end(self, metrics: dict[str, float], status: str) -> None:
        self._stop()
        if self.run_id is None:
            return
        if metrics:
            self._log(metrics, step=0)
            chance = metrics.get(names.METRIC_CHANCE_ACCURACY)
            if chance is not None and names.METRIC_FINAL_TEST_ACCURACY in metrics:
                at = metrics[names.METRIC_FINAL_TEST_ACCURACY] <= names.AT_CHANCE_FACTOR * chance
                self.client.set_tag(self.run_id, names.TAG_AT_CHANCE, str(at).lower())
        self.client.set_terminated(self.run_id, status=status)
        run = self.client.get_run(self.run_id)
        if status == "FINISHED":  # who held it no longer matters: the UI shows what the run is, not its bookkeeping
            for tag in names.BOOKKEEPING_TAGS:
                if tag in run.data.tags:
                    self.client.delete_tag(self.run_id, tag)
            if names.TAG_NOTE not in run.data.tags:
                self.client.set_tag(self.run_id, names.TAG_NOTE, describe(run.data.tags, metrics))
        else:  # a KILLED or FAILED run never shares its name with the FINISHED one of the same configuration
            self.client.update_run(self.run_id, name=f"{run.info.run_name} [{status.lower()}]")

    def _name(self, config) -> str:
        """The run's name: an audit's says so (``audit-...``), a training run's is :func:`run_name`."""
        if self.extra_tags.get(names.TAG_KIND) == names.KIND_AUDIT:
            return names.AUDIT_RUN_PREFIX + run_name(config)
        return run_name(config)

    @shield
    def log_summary(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        """Metrics (at step 0) and tags that sum up the run after it ended (an audit's bounds, say)."""

        if self.run_id is None:
            return
        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, 0) for k, v in _finite(metrics).items()],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def _log(self, metrics: dict[str, float], step: int) -> None:
        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, step) for k, v in _finite(metrics).items()])


def parent_run(tracking_uri: str | None, experiment: str, *, key: str, name: str, kind: str,
               note: str = "") -> str:
    """The id of the experiment's parent run with this key, made once (FINISHED: it holds no training itself) and
    found again when the same study or sweep runs again. Its runs carry ``mlflow.parentRunId`` and nest under it.
    On a sqlite store, processes starting the same sweep at once make one parent (the store's lock); on a server
    they may make two, each holding the runs its process started."""
    mlflow_client, exp = open_store(tracking_uri, experiment)
    with _store_lock(check_tracking_uri(tracking_uri or default_tracking_uri(), write=True, what="tracking URI")):
        found = runs_with_key(mlflow_client, exp, key)
        if found:
            return min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
        tags = {names.TAG_KIND: kind, names.TAG_CONFIG_KEY: key}
        if note:
            tags[names.TAG_NOTE] = note
        run = mlflow_client.create_run(exp, run_name=name, tags=tags)
        mlflow_client.set_terminated(run.info.run_id, status="FINISHED")
        return run.info.run_id


def describe(tags: dict[str, str], metrics: dict[str, float]) -> str:
    """A finished run's description in the MLflow UI: method, budget, relation, whether the epsilon is a guarantee
    (and by which accountant), and its accuracy."""
    method = tags.get(names.TAG_METHOD, "?") + (f" [{tags[names.TAG_VARIANT]}]" if tags.get(names.TAG_VARIANT) else "")
    eps = metrics.get(names.METRIC_EPSILON_TARGET, math.inf)
    acc = metrics.get(names.METRIC_FINAL_TEST_ACCURACY)
    text = f"{method} on {tags.get(names.TAG_DATASET, '?')} ({tags.get(names.TAG_PRESET, '?')} preset)"
    if tags.get(names.TAG_KIND) == names.KIND_AUDIT:
        text = f"audit ({tags.get(names.TAG_CANARY_KIND, '?')} canaries) of {text}"
    if math.isfinite(eps):
        guarantee = "a guarantee" if tags.get(names.TAG_PRIVACY_GUARANTEE) == "true" else "not a guarantee"
        text += (f" at epsilon {eps:g} under {tags.get(names.TAG_PRIVACY_ADJACENCY, '?')}: {guarantee} "
                 f"({tags.get(names.TAG_PRIVACY_ACCOUNTANT, '?')})")
    else:
        text += ": no privacy (the reference)"
    if acc is not None:
        text += f"; test accuracy {100 * acc:.2f}%"
    return text + ". Audits and verdicts: bench report."


def span_parent(tracking_uri: str | None, experiment: str, parent_id: str) -> None:
    """A parent run's end moved to its last child's (now, for a child still running), so that the UI shows it
    spanning its children rather than the milliseconds of its making."""
    mlflow_client, exp = open_store(tracking_uri, experiment)
    children = mlflow_client.search_runs([exp], filter_string=f"tags.{names.TAG_PARENT_RUN} = '{parent_id}'",
                                         max_results=50000)
    now = int(time.time() * 1000)
    ends = [c.info.end_time or now for c in children]
    if ends:
        mlflow_client.set_terminated(parent_id, "FINISHED", end_time=max(ends))


def _holder(run) -> str:
    tags = run.data.tags
    return f"pid {tags.get(names.TAG_PID, '?')} on {tags.get(names.TAG_HOST, '?')}"
