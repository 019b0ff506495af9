"""The store's schema: a version on each experiment, and the one migration that brings an older experiment's runs up
to it (``bench store migrate``).

An experiment this code makes is tagged ``inputdp.store_schema`` = :data:`STORE_SCHEMA` when it is made; one made
before the tag existed is schema 1, whatever its runs hold. The leaderboard refuses, in one line naming the command
(:func:`check_schema`), an experiment of another schema, and one of this schema holding a FINISHED run that still lacks
what a step adds (a run an older inputdp logged after the migration, on a worker not yet upgraded, say).

The migration adds to each FINISHED run what a run logged today carries and an older one lacks, computed from what
that run itself logged. It removes nothing and changes no value a run has, save the variant tag, which grows by the
option it lacked: so it can run twice, on a store some of whose runs are already current, or while a sweep writes to
it. Each step says what it adds and from what (:data:`STEPS`). The reports of every study store at hand read the same
before (the code that read older runs in place) and after, byte for byte; the one case where they would not is a
run whose preset or data set the reading checkout could not build, whose lr_rule the old reading left unnamed and the
migration names, as Method.variant names it for a run logged today.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mlflow.entities import Metric, RunTag

from inputdp.benchmarks.audits.gradient_canary_reading import reread
from inputdp.benchmarks.presets import preset_options
from inputdp.core import names
from inputdp.core.claims import ABSENT, relation_key
from inputdp.core.errors import ConfigError
from inputdp.core.verdicts import one_run_fields
from inputdp.methods import METHODS

from .store import STORE_SCHEMA, open_store

#: what a patch adds to one run: (tags, metrics), each name -> value
Patch = tuple[dict[str, str], dict[str, float]]
GRADIENT_CANARIES = names.AUDIT_MODE_GRADIENT_CANARIES


def schema_of(mlflow_client, exp_id: str) -> int:
    """The experiment's store schema: its tag, else 1 (made before the tag existed)."""
    tag = mlflow_client.get_experiment(exp_id).tags.get(names.EXPERIMENT_SCHEMA_TAG, "1")
    try:
        return int(tag)
    except ValueError:
        raise ConfigError(f"experiment {exp_id} has store schema {tag!r}, which is not a number: the store was "
                          "not written by inputdp") from None


def check_schema(mlflow_client, exp_id: str, tracking_uri: str, experiment: str) -> None:
    """Refuse, in one line naming what to do, an experiment whose schema is not the one this code reads, or whose
    FINISHED runs are not all in it."""
    found = schema_of(mlflow_client, exp_id)
    command = f"bench store migrate --tracking-uri {tracking_uri} --experiment {experiment}"
    if found < STORE_SCHEMA:
        raise ConfigError(f"experiment {experiment!r} in {tracking_uri} is in store schema {found} (runs logged "
                          f"before schema {STORE_SCHEMA}); bring it up to date first: {command}")
    if found > STORE_SCHEMA:
        raise ConfigError(f"experiment {experiment!r} in {tracking_uri} is in store schema {found}, written by a "
                          f"newer inputdp than this one (schema {STORE_SCHEMA}): upgrade inputdp to read it")
    stale = {run.info.run_id for run, _, _, _ in _patches(_finished_runs(mlflow_client, exp_id))}
    if stale:
        raise ConfigError(f"experiment {experiment!r} in {tracking_uri} holds {len(stale)} finished run(s) logged "
                          f"in an older schema since it was migrated (an older inputdp on a worker?): {command}")


def _has(metrics: dict, key: str) -> bool:
    """A metric the run logged, and finite (the tracker logs no other; a NaN reads as absent)."""
    return math.isfinite(metrics.get(key, math.nan))


def _relation(run) -> Patch:
    tags = run.data.tags
    key = relation_key(tags.get(names.TAG_PRIVACY_ADJACENCY, ""))
    if tags.get(names.TAG_PRIVACY_RELATION) or not key:  # a reference run's text names none: nothing to add
        return {}, {}
    return {names.TAG_PRIVACY_RELATION: key}, {}


def _threat_split(run) -> Patch:
    best, m = run.data.tags.get(names.TAG_AUDIT_BEST_SCORE), run.data.metrics
    if best is None:
        return {}, {}
    threat = "black_box" if best in names.BLACK_BOX_SCORES else "white_box"
    split = (names.METRIC_THREAT_BOUND.format(threat), names.METRIC_THREAT_CEILING.format(threat))
    if any(_has(m, k) for k in split):  # split already
        return {}, {}
    out = dict(zip(split, (m.get(names.METRIC_EPSILON_LB), m.get(names.METRIC_EPSILON_LB_CEILING))))
    return {}, {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def _lr_rule_variant(run) -> Patch:
    tags, params = run.data.tags, run.data.params
    rule, variant = params.get(names.PARAM_METHOD_OPTIONS + "lr_rule"), tags.get(names.TAG_VARIANT, "")
    method = tags.get(names.TAG_METHOD, "")
    if rule is None or "lr_rule=" in variant or method not in METHODS.names():
        return {}, {}
    try:
        defaults = METHODS.get(method).load().option_defaults
    except Exception:  # noqa: BLE001 - a plug-in that does not load here: its defaults unknown, the run left alone
        return {}, {}
    # the recipe's baseline as Method.variant takes it for a run logged today: the defaults, updated by the preset's
    base = {**defaults, **preset_options(tags.get(names.TAG_PRESET, ""), tags.get(names.TAG_DATASET, ""), method)}
    if rule == str(base.get("lr_rule")):
        return {}, {}
    return {names.TAG_VARIANT: ",".join(p for p in (variant, f"lr_rule={rule}") if p)}, {}


def _audit_design(run) -> Patch:
    if run.data.tags.get(names.TAG_KIND) != names.KIND_AUDIT or names.TAG_AUDIT_DESIGN in run.data.tags:
        return {}, {}
    return {names.TAG_AUDIT_DESIGN: ABSENT}, {}


def _final_epsilon(run) -> Patch:
    m = run.data.metrics
    if _has(m, names.METRIC_FINAL_EPSILON_SPENT) or not _has(m, names.METRIC_EPSILON_SPENT):
        return {}, {}
    return {}, {names.METRIC_FINAL_EPSILON_SPENT: m[names.METRIC_EPSILON_SPENT]}


def _audit_verdicts(run) -> Patch:
    """A one-run or multi-run audit's verdict fields, from the bounds it logged (core/verdicts.py)."""
    tags, m = run.data.tags, run.data.metrics
    if (tags.get(names.TAG_KIND) != names.KIND_AUDIT or tags.get(names.TAG_CANARY_KIND) == GRADIENT_CANARIES
            or any(k.startswith("verdict.") for k in tags)):
        return {}, {}
    try:
        epsilon = float(run.data.params.get(names.PARAM_EPSILON, "nan"))
        delta = float(run.data.params.get(names.PARAM_DELTA, "nan"))
    except ValueError:
        return {}, {}
    metrics, new_tags = one_run_fields(m, tags, claimed_epsilon=epsilon, delta=delta,
                                       canaries=int(m.get(names.METRIC_AUDIT_CANARIES, 0)))
    return new_tags, metrics


def _claimed_curve(run, client=None) -> Patch:
    """A gradient-canary audit logged before its verdict was the claimed-curve test: its stored canaries' coins and
    scores read again by today's analysis (the claim's release family and accountant from its stored configuration;
    the rates from the claimed mechanism alone), so that a change of analysis re-reads, never re-trains."""
    tags = run.data.tags
    if (client is None or tags.get(names.TAG_CANARY_KIND) != GRADIENT_CANARIES
            or any(k.startswith("verdict.") for k in tags)):
        return {}, {}
    metrics, new_tags = reread(client, run)
    known = set(run.data.metrics) | set(tags)
    return ({k: v for k, v in new_tags.items() if k not in known},
            {k: v for k, v in metrics.items() if k not in known})


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    patch: Callable[..., Patch]


#: each step of schema 1 -> 2 -> 3: what it adds to a run that lacks it, and from what
STEPS = (
    Step("relation", "the claim's relation as a key (privacy.relation), from the relation its adjacency text names",
         _relation),
    Step("threat_split", "an audit's bound and ceiling under its threat model (epsilon_lb.THREAT), from its one bound "
         "and the class of its best score (outputs only: black box; else white box)", _threat_split),
    Step("lr_rule_variant", "lr_rule in the variant tag where it differs from the preset's (runs logged before "
         "lr_rule was a variant option)", _lr_rule_variant),
    Step("audit_design", "an audit's design tag: absent (audits logged before designs followed the claim's "
         "relation built every excluded canary absent)", _audit_design),
    Step("final_epsilon", "final_epsilon_spent, from the run's last epsilon_spent", _final_epsilon),
    Step("audit_verdicts", "an audit's verdict as fields (verdict.THREAT.word, bound, its kind, ceiling, the claim, "
         "relation, design, family, level), from the bounds it logged", _audit_verdicts),
    Step("claimed_curve", "a gradient-canary audit's claimed-curve verdict and figures, its stored canaries' coins "
         "and scores read again (its one-run readings kept)", _claimed_curve),
)


#: the steps that read a run's artifacts (the store's client is handed to them)
_READS_ARTIFACTS = (_claimed_curve,)


def _finished_runs(mlflow_client, exp_id: str) -> list:
    """The runs a report reads: a run not FINISHED (failed, killed, or running now) is left as it is."""
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs([exp_id], "attributes.status = 'FINISHED'", max_results=5000,
                                         page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _patches(runs: list, client=None) -> list[tuple]:
    """(run, tags, metrics, the names of the steps that add them) for each run some step adds to (``client``: the
    store, for the steps that read a run's artifacts; without it they add nothing)."""
    out = []
    for run in runs:
        tags, metrics, steps = {}, {}, []
        for step in STEPS:  # each step reads the run as the steps before it left it
            seen = _As(run, tags, metrics)
            t, m = step.patch(seen, client) if step.patch in _READS_ARTIFACTS else step.patch(seen)
            if t or m:
                steps.append(step.name)
            tags.update(t)
            metrics.update(m)
        if steps:
            out.append((run, tags, metrics, steps))
    return out


class _As:
    """A stored run as the migration's earlier steps leave it: its tags and metrics with their additions."""

    def __init__(self, run, tags: dict[str, str], metrics: dict[str, float]):
        self.info = run.info
        self.data = type("Data", (), {"tags": {**run.data.tags, **tags}, "metrics": {**run.data.metrics, **metrics},
                                      "params": run.data.params})()


def migrate(tracking_uri: str | None, experiment: str, *, dry_run: bool = False) -> tuple[int, int, Counter]:
    """Bring the experiment's FINISHED runs up to :data:`STORE_SCHEMA`: (its schema before, the runs read, how many
    runs each step changed). ``dry_run`` counts without writing. Refused in one line if the experiment does not
    exist or is newer."""
    mlflow_client, exp_id = open_store(tracking_uri, experiment, create=False)
    if exp_id is None:
        held = sorted(e.name for e in mlflow_client.search_experiments() if e.name != "Default")
        raise ConfigError(f"--experiment {experiment!r} is not in the store: it holds "
                          f"{', '.join(held) if held else 'no experiment'}; nothing to migrate")
    before = schema_of(mlflow_client, exp_id)
    if before > STORE_SCHEMA:
        check_schema(mlflow_client, exp_id, str(tracking_uri), experiment)
    runs, changed = _finished_runs(mlflow_client, exp_id), Counter()
    for run, tags, metrics, steps in _patches(runs, mlflow_client):
        changed.update(steps)
        if not dry_run:
            ts = int(time.time() * 1000)
            mlflow_client.log_batch(run.info.run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()],
                                    tags=[RunTag(k, v) for k, v in tags.items()])
    if not dry_run:
        mlflow_client.set_experiment_tag(exp_id, names.EXPERIMENT_SCHEMA_TAG, str(STORE_SCHEMA))
    return before, len(runs), changed
