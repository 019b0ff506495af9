"""Loading: an experiment's finished MLflow runs, and each as one row with plain column names (``tidy``): the
training runs and the audit runs apart. It reads the current store schema only: an experiment in an older one is
refused in one line naming ``bench store migrate`` (benchmarks/tracking/schema.py), which brings its runs up to date."""

from __future__ import annotations

import hashlib
import math
import re

import mlflow
import numpy as np
import pandas as pd

from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.benchmarks.tracking import check_schema, default_tracking_uri, open_store
from inputdp.core import names
from inputdp.core.claims import ADJACENCY
from inputdp.core.verdicts import PREFIX

#: one leaderboard row per recipe and budget: runs at another (q, T) are another configuration, not more seeds
GROUP = ["dataset", "preset", "model", "method", "epsilon", "q", "T"]



THREAT = {
    "nothing": "no privacy",
    "inputs": "inputs private; labels public",
    "inputs and labels": "inputs and labels private",
}



def load_runs(tracking_uri: str | None = None, experiment: str = "inputdp") -> pd.DataFrame:
    """Every FINISHED run of the experiment as one row (MLflow ``search_runs`` into pandas)."""

    uri = tracking_uri or default_tracking_uri()
    mlflow_client, exp_id = open_store(uri, experiment, create=False)
    if exp_id is None:
        return pd.DataFrame()
    check_schema(mlflow_client, exp_id, uri, experiment)  # an older store: one line naming bench store migrate
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=[experiment], filter_string="attributes.status = 'FINISHED'",
                              max_results=100000)



def _col(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)



def _join_variant(variant: pd.Series, recipe: pd.Series) -> pd.Series:
    v = variant.fillna("").astype(str)
    return v.where(recipe == "", v.where(v == "", v + ",") + recipe)



def _method_label(method: pd.Series, precision: pd.Series, variant: pd.Series | None = None,
                  holdout: pd.Series | None = None) -> pd.Series:
    """A run in another precision than float32 is its own row: "dirichlet_softmax [bf16]"; so is a run of another
    recipe (the method's variant options): "pate [student=semi_supervised]", and a run evaluated on held-out
    training examples instead of the test split: "dpsgd [holdout 5000]" (a recipe search's, not a result)."""
    if variant is not None:
        other = variant.notna() & (variant.astype(str) != "")
        method = method.where(~other, method + " [" + variant.astype(str) + "]")
    if holdout is not None:
        n = pd.to_numeric(holdout, errors="coerce").fillna(0)
        method = method.where(n <= 0, method + " [holdout " + n.astype(int).astype(str) + "]")
    other = precision.notna() & (precision != "float32")
    return method.where(~other, method + " [" + precision.astype(str) + "]")



#: run settings that change a recipe without being a method option (``bench run --optimizer/--lr/--momentum``)
RECIPE_SETTINGS = ("optimizer", "lr", "momentum", "norm")



def _preset_recipe(method: str, dataset: str, preset: str, epsilon: float = 1.0,
                   adjacency: str = "") -> dict[str, str] | None:
    """The preset's own optimizer, lr, momentum and normalisation for this method at this epsilon under the run's
    relation (a preset may give a recipe of its own from some epsilon up, under some relations), as logged
    (strings); None if unknown. ``adjacency`` "": the run named none (the method's default)."""

    try:
        c = build_config(method=method, dataset=dataset, preset=preset,
                         epsilon=epsilon if math.isfinite(epsilon) else 1.0, seed=0,
                         overrides=Overrides(method_options={method: {ADJACENCY: adjacency}} if adjacency else {}))
    except Exception:  # a preset, data set or method this checkout does not know: no baseline to compare with
        return None
    return {k: str(getattr(c, k)) for k in RECIPE_SETTINGS}



def _recipe_suffix(runs: pd.DataFrame) -> pd.Series:
    """"optimizer=sgd,lr=0.05" for a run whose optimizer, lr, momentum or normalisation differ from its preset's own
    for that method (run settings, not method options: those are in its variant tag), so that two recipes never share
    a leaderboard row."""
    method, dataset, preset = (_col(runs, f"tags.{t}") for t in (names.TAG_METHOD, names.TAG_DATASET, names.TAG_PRESET))
    epsilon = pd.to_numeric(_col(runs, f"params.{names.PARAM_EPSILON}"), errors="coerce").fillna(1.0)
    adjacency = _col(runs, f"params.{names.PARAM_METHOD_OPTIONS}adjacency")
    settings = {k: _col(runs, f"params.{k}") for k in RECIPE_SETTINGS}
    baselines: dict[tuple, dict[str, str] | None] = {}
    out = []
    for i in runs.index:
        relation = adjacency[i] if isinstance(adjacency[i], str) else ""
        key = (method[i], dataset[i], preset[i], float(epsilon[i]), relation)
        if key not in baselines:
            baselines[key] = _preset_recipe(*map(str, key[:3]), key[3], relation)
        base, parts = baselines[key], []
        if base is None:
            out.append("")
            continue
        for k in RECIPE_SETTINGS:
            v = settings[k][i]
            if isinstance(v, str) and _differs(v, base[k]):
                parts.append(f"{k}={v}")
        out.append(",".join(parts))
    return pd.Series(out, index=runs.index, dtype=object)



def _differs(logged: str, own: str) -> bool:
    try:
        return not math.isclose(float(logged), float(own), rel_tol=1e-9)
    except ValueError:
        return logged != own



def _file_stem(dataset: str) -> str:
    """A file name for a data set's plots: a registered name as it is; a path (folder:PATH, npz:FILE) as its last
    part and a short hash of the whole, so that two folders of the same name do not overwrite each other."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", dataset):
        return dataset
    tail = re.sub(r"[^A-Za-z0-9_.-]+", "_", dataset.rstrip("/").rsplit("/", 1)[-1].split("?")[0])[:40]
    return f"{tail or 'data'}-{hashlib.sha256(dataset.encode()).hexdigest()[:8]}"



def _data_labels(dataset: pd.Series, fingerprint: pd.Series, started: pd.Series) -> pd.Series:
    """The data set's name, and where one name holds different data in the store (a user's files written in
    MNIST's format, say) a letter per content, in the order the store first saw them: those are different rows,
    never one. The letter, not the fingerprint: a report is published, and a hash of the private data is a release
    (THEORY.md, "Normalisation and the data's identity")."""
    fp = fingerprint.fillna("").astype(str)
    frame = pd.DataFrame({"d": dataset, "fp": fp, "t": pd.to_numeric(started, errors="coerce")})
    labels = {}
    for d, g in frame[frame["fp"] != ""].groupby("d"):
        if g["fp"].nunique() > 1:
            order = g.groupby("fp")["t"].min().sort_values(kind="stable").index
            labels.update({(d, f): f"{d} [data {chr(ord('A') + i) if i < 26 else i + 1}]" for i, f in enumerate(order)})
    return pd.Series([labels.get((d, f), d) for d, f in zip(dataset, fp)], index=dataset.index)



#: the runs that audit rather than train: a model's audit and a mechanism's
AUDIT_KINDS = (names.KIND_AUDIT, names.KIND_MECHANISM_AUDIT)



def _mechanism_columns(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """The claim's relation (every run) and what a mechanism audit run logs (``bench audit --mechanism``)."""
    return {"adjacency": _col(runs, f"tags.{names.TAG_PRIVACY_ADJACENCY}", "").fillna(""),
            "mechanism_release": _col(runs, f"tags.{names.TAG_MECHANISM_RELEASE}", "").fillna(""),
            **{f"mechanism_{k}": pd.to_numeric(_col(runs, "metrics." + names.METRIC_MECHANISM.format(k)),
                                               errors="coerce")
               for k in ("tightness", "mu_lb", "mu_allowed", "epsilon_free", "epsilon_allowed")},
            "noise_scale": pd.to_numeric(_col(runs, f"params.{names.PARAM_NOISE_SCALE}"), errors="coerce")}



def tidy(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training runs, audit runs), one row per run with plain column names."""
    if runs.empty:
        return pd.DataFrame(columns=[*GROUP, "seed"]), pd.DataFrame()
    kind = _col(runs, f"tags.{names.TAG_KIND}", "train").fillna("train")
    out = pd.DataFrame({
        "run_id": runs["run_id"],
        "dataset": _data_labels(_col(runs, f"tags.{names.TAG_DATASET}"), _col(runs, f"params.{names.PARAM_DATA_FINGERPRINT}"),
                                _col(runs, "start_time")),
        "preset": _col(runs, f"tags.{names.TAG_PRESET}"),
        "model": _col(runs, f"params.{names.PARAM_MODEL}"),
        "method": _method_label(_col(runs, f"tags.{names.TAG_METHOD}"), _col(runs, f"tags.{names.TAG_PRECISION}"),
                                _join_variant(_col(runs, f"tags.{names.TAG_VARIANT}"), _recipe_suffix(runs)),
                                _col(runs, f"params.{names.PARAM_HOLDOUT}")),
        "epsilon": pd.to_numeric(_col(runs, f"params.{names.PARAM_EPSILON}"), errors="coerce"),
        "delta": pd.to_numeric(_col(runs, f"params.{names.PARAM_DELTA}"), errors="coerce"),
        "q": pd.to_numeric(_col(runs, f"params.{names.PARAM_SAMPLING_RATE}"), errors="coerce"),
        "T": pd.to_numeric(_col(runs, f"params.{names.PARAM_STEPS}"), errors="coerce"),
        "seed": _col(runs, f"tags.{names.TAG_SEED}"),
        "method_name": _col(runs, f"tags.{names.TAG_METHOD}"),
        "match_key": _col(runs, f"tags.{names.TAG_MATCH_KEY}"),
        "norm": _col(runs, f"tags.{names.TAG_NORM}"),
        "test_accuracy": _col(runs, f"metrics.{names.METRIC_FINAL_TEST_ACCURACY}"),
        "median_epoch_time_s": _col(runs, f"metrics.{names.METRIC_MEDIAN_EPOCH_TIME}"),
        "total_train_time_s": _col(runs, f"metrics.{names.METRIC_TOTAL_TRAIN_TIME}"),
        "peak_memory_mb": _col(runs, f"metrics.{names.METRIC_PEAK_MEMORY}"),
        "device": _col(runs, f"params.{names.PARAM_DEVICE}", "cpu").fillna("cpu"),
        # 1 where other work shared the cores while the run was timed, 0 where none did (absent: runs logged before
        # the check, whose times are read as the other uncontended ones: nothing says otherwise)
        "contended": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_CONTENDED}"), errors="coerce"),
        "epsilon_spent": _col(runs, f"metrics.{names.METRIC_FINAL_EPSILON_SPENT}"),
        "epsilon_dd_sanitised": _col(runs, f"metrics.{names.METRIC_EPSILON_DD_SANITISED}"),
        "view": _col(runs, f"tags.{names.TAG_VIEW}", "matched").fillna("matched"),
        "configs_tried": pd.to_numeric(_col(runs, f"tags.{names.TAG_CONFIGS_TRIED}"), errors="coerce"),
        "scope": _col(runs, f"tags.{names.TAG_PRIVACY_SCOPE}"),
        "accountant": _col(runs, f"tags.{names.TAG_PRIVACY_ACCOUNTANT}", "").fillna(""),
        "guarantee": _col(runs, f"tags.{names.TAG_PRIVACY_GUARANTEE}", "").fillna(""),
        "vectors_lb": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_VECTORS_EPSILON_LB}"), errors="coerce"),
        "paper_epsilon": pd.to_numeric(_col(runs, f"metrics.{names.METRIC_PAPER_EPSILON}"), errors="coerce"),
        "protects": _col(runs, f"tags.{names.TAG_PRIVACY_PROTECTS}"),
        "mechanism": _col(runs, f"tags.{names.TAG_PRIVACY_MECHANISM}", "").fillna(""),
        "needs_public_data": _col(runs, f"tags.{names.TAG_PRIVACY_NEEDS_PUBLIC_DATA}"),
        "epsilon_lb": _col(runs, f"metrics.{names.METRIC_EPSILON_LB}"),
        "audit_of": _col(runs, f"tags.{names.TAG_AUDIT_OF}"),
        "canary_kind": _col(runs, f"tags.{names.TAG_CANARY_KIND}"),
        "audit_mode": _col(runs, f"tags.{names.TAG_AUDIT_MODE}", "one_run").fillna("one_run"),
        "audit_runs": _col(runs, f"metrics.{names.METRIC_AUDIT_RUNS}"),
        "train_examples": _col(runs, f"params.{names.PARAM_TRAIN_EXAMPLES}"),
        # the claim's relation (a key; "" for a reference run), and the relation and design an audit built its
        # pairs under
        "relation": _col(runs, f"tags.{names.TAG_PRIVACY_RELATION}", "").fillna(""),
        "covers_relations": _col(runs, f"tags.{names.TAG_PRIVACY_COVERS}", "").fillna(""),
        "audit_relation": _col(runs, f"tags.{names.TAG_AUDIT_RELATION}", "").fillna(""),
        "audit_design": _col(runs, f"tags.{names.TAG_AUDIT_DESIGN}", "").fillna(""),
        "kind": kind,
        **_mechanism_columns(runs),
    })
    _threat_bounds(runs, out)
    audited = out["kind"].isin(AUDIT_KINDS)  # and a study's or sweep's parent run, a speed run: no training
    return out[~audited & ~out["kind"].isin([names.KIND_STUDY, names.KIND_SWEEP, names.KIND_SPEED])].copy(), out[audited].copy()



def _threat_bounds(runs: pd.DataFrame, out: pd.DataFrame) -> None:
    """Each threat model's bound and ceiling (Steinke's), and the f-DP bounds of the same guesses, into ``out``."""
    for threat in names.THREATS:
        out[f"lb_{threat}"] = _col(runs, f"metrics.{names.METRIC_THREAT_BOUND.format(threat)}")
        out[f"ceiling_{threat}"] = _col(runs, f"metrics.{names.METRIC_THREAT_CEILING.format(threat)}")
        # the f-DP bounds of the same guesses (audits logged before them have none)
        for col, metric in ((f"fdp_{threat}", names.METRIC_THREAT_FDP_BOUND),
                            (f"fdp_ceiling_{threat}", names.METRIC_THREAT_FDP_CEILING),
                            (f"gdp_mu_{threat}", names.METRIC_THREAT_GDP_MU),
                            # 1/0 whether any of the threat's tests had power (audits logged before: none said)
                            (f"power_{threat}", names.METRIC_THREAT_POWER)):
            out[col] = pd.to_numeric(_col(runs, f"metrics.{metric.format(threat)}"), errors="coerce")
        # each audit's verdict as it stored it (core/verdicts.py: the fields, never its prose)
        prefix = PREFIX.format(threat)
        for field in ("word", "bound_kind"):
            out[f"verdict_{field}_{threat}"] = _col(runs, f"tags.{prefix}{field}", "").fillna("")
        for field in ("bound", "claimed_epsilon", "ceiling", "tests", "level"):
            out[f"verdict_{field}_{threat}"] = pd.to_numeric(_col(runs, f"metrics.{prefix}{field}"), errors="coerce")
    # the claimed-curve test's smallest p-value over its thresholds (gradient canaries; NaN for every other audit)
    p_values = [c for c in runs.columns if c.startswith("metrics." + names.METRIC_CURVE.format("p_value."))]
    out["curve_p_value"] = runs[p_values].apply(pd.to_numeric, errors="coerce").min(axis=1) if p_values else np.nan
