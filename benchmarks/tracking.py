"""MLflow as a harness callback. Methods never import this; the harness only calls the callback.

Default store: ``sqlite:///mlflow.db`` in the working directory; any tracking URI (an ``http://`` server)
may be given instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from . import names

DEFAULT_EXPERIMENT = "inputdp"
UNFINISHED = ("RUNNING", "SCHEDULED")


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def quiet_mlflow() -> None:
    """Keep MLflow's and alembic's start-up chatter (schema migrations, store set-up) out of the output."""
    import logging

    for name in ("mlflow", "alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)


def client(tracking_uri: str | None = None):
    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri or default_tracking_uri())


def experiment_id(mlflow_client, name: str = DEFAULT_EXPERIMENT) -> str:
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return mlflow_client.create_experiment(name)
    except Exception:  # noqa: BLE001 - created meanwhile by another process
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _param_value(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 500 else text[:497] + "..."


class MLflowTracker:
    """A :class:`~inputdp.benchmarks.harness.RunCallback` that writes one MLflow run per training run."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 extra_tags: dict[str, str] | None = None):
        self.tracking_uri = tracking_uri or default_tracking_uri()
        self.client = client(self.tracking_uri)
        self.experiment_id = experiment_id(self.client, experiment)
        self.extra_tags = dict(extra_tags or {})
        self.run_id: str | None = None

    def on_start(self, config, params: dict[str, Any], tags: dict[str, str]) -> None:
        import socket

        from mlflow.entities import Param, RunTag

        where = {"pid": str(os.getpid()), "host": socket.gethostname()}  # to find (and stop) a run's process
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"{config.method}-{config.dataset}-eps{config.privacy.epsilon:g}-s{config.seed}",
            tags={**tags, **where, **self.extra_tags},
        )
        self.run_id = run.info.run_id
        self.client.log_batch(self.run_id, params=[Param(k, _param_value(v)) for k, v in params.items()],
                              tags=[RunTag("status_note", "started")])

    def on_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        self._log(metrics, step=epoch)

    def on_end(self, metrics: dict[str, float], status: str) -> None:
        if self.run_id is None:
            return
        if metrics:
            self._log(metrics, step=0)
        self.client.set_terminated(self.run_id, status=status)

    def log_summary(self, metrics: dict[str, float], tags: dict[str, str]) -> None:
        """Metrics (at step 0) and tags that sum up the run after it ended (an audit's bounds, say)."""
        import time

        from mlflow.entities import Metric, RunTag

        if self.run_id is None:
            return
        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, 0) for k, v in _finite(metrics).items()],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def _log(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, step) for k, v in _finite(metrics).items()])


def runs_with_key(mlflow_client, exp_id: str, config_key: str) -> list:
    return mlflow_client.search_runs([exp_id], filter_string=f"tags.{names.TAG_CONFIG_KEY} = '{config_key}'",
                                     max_results=1000)
