"""The harness's MLflow callback: a claim per configuration, its heartbeat, the run's params, metrics, dataset and
description; a sweep's or study's parent run."""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag

from inputdp.core import names
from inputdp.core.errors import shield

from . import uri as _uri
from .store import (
    _LIVE_HERE,
    _finite,
    _here,
    _param_value,
    _store_lock,
    client,
    is_alive,
    open_store,
    reap,
    run_name,
    runs_with_key,
)
from .uri import CLAIM_PATIENCE_S, DEFAULT_EXPERIMENT, check_tracking_uri, default_tracking_uri


@dataclass
class Claim:
    status: str  # "claimed" (this process runs it), "finished" (a FINISHED run exists), "elsewhere" (a live run)
    marked_failed: int = 0
    holder: str = ""  # for "elsewhere": which process runs it
    metrics: dict = field(default_factory=dict)  # for "finished": the FINISHED run's metrics



class MLflowTracker:
    """A :class:`~inputdp.benchmarks.harness.RunCallback` that writes one MLflow run per training run."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 extra_tags: dict[str, str] | None = None, log_model: bool = False):
        self.tracking_uri = tracking_uri or default_tracking_uri()
        #: whether the harness hands this tracker the released model of a finished run (``log_model``)
        self.wants_model = log_model
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
            while not stop.wait(_uri.HEARTBEAT_S):
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

    @shield
    def log_model(self, model) -> None:
        """The released model's state_dict as the artifact ``model/state_dict.pt`` (load it into the model the
        run's resolved_config.json names: ``inputdp.benchmarks.models.build_model``)."""
        if self.run_id is None:
            return
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, names.MODEL_ARTIFACT)
            torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
            self.client.log_artifact(self.run_id, path, "model")

    def log_text(self, text: str, artifact_file: str) -> None:
        """A text artifact on this run (an audit's tables: every canary's scores, its trade-off curve)."""
        if self.run_id is not None:
            self.client.log_text(self.run_id, text, artifact_file)

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


def log_finished_run(tracking_uri: str | None, experiment: str, *, name: str, tags: dict[str, str],
                     params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None) -> str:
    """One run made and ended FINISHED at once, with its tags, params and (finite) metrics: what a measurement that
    is not a training run stores (a study's speed run, a mechanism audit). Returns its id."""
    mlflow_client, exp = open_store(tracking_uri, experiment)
    run = mlflow_client.create_run(exp, run_name=name, tags=tags)
    ts = int(time.time() * 1000)
    mlflow_client.log_batch(run.info.run_id, metrics=[Metric(k, v, ts, 0) for k, v in _finite(metrics or {}).items()],
                            params=[Param(k, _param_value(v)) for k, v in (params or {}).items()])
    mlflow_client.set_terminated(run.info.run_id, status="FINISHED")
    return run.info.run_id


def log_table(tracking_uri: str | None, run_id: str, table, artifact_file: str) -> None:
    """A table (pandas) logged on a run as an MLflow table artifact (the UI's Artifacts and Evaluation views)."""
    client(tracking_uri).log_table(run_id, data=table, artifact_file=artifact_file)
